# SPDX-License-Identifier: Apache-2.0
"""The agent's vsock channel end to end in a real guest: QEMU microvm with a
vhost-vsock device and no virtio-serial port, the host connecting with
AF_VSOCK to the guest's port 1024. Needs /dev/vhost-vsock, which this
project's CI machine does not have: there it skips and the framing is tested
over socket pairs instead (tests/unit/test-vsock-uds.c, test_fc_vsock.py,
test_fc_conformance.py)."""
import json
import os
import socket
import struct
import subprocess
import time

import pytest

from conftest import BUILD

IMAGES = os.path.join(BUILD, "images", "kernels")
HELLO, EXEC, STDOUT, EXIT = 1, 2, 4, 6

pytestmark = pytest.mark.skipif(
    not os.access("/dev/vhost-vsock", os.R_OK | os.W_OK) or not hasattr(socket, "AF_VSOCK"),
    reason="no usable /dev/vhost-vsock on this host: the vsock path is tested over socket pairs instead")


def tsc_khz():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return 0


def recv_frame(s, stream=None):
    while True:
        head = b""
        while len(head) < 12:
            data = s.recv(12 - len(head))
            assert data, "the guest closed the connection"
            head += data
        _, t, _, st, n = struct.unpack(">BBHII", head)
        body = b""
        while len(body) < n:
            body += s.recv(n - len(body))
        if stream is None or st == stream:
            return t, st, body


def send_frame(s, t, stream, payload):
    s.sendall(struct.pack(">BBHII", 1, t, 0, stream, len(payload)) + payload)


def connect(cid, deadline):
    while True:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        s.settimeout(30)
        try:
            s.connect((cid, 1024))
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_agent_over_vhost_vsock(tmp_path):
    kernel, initrd = os.path.join(IMAGES, "vmlinuz"), os.path.join(IMAGES, "initramfs.cpio")
    if not (os.path.exists(kernel) and os.path.exists(initrd)):
        pytest.fail("run 'make images' first", pytrace=False)
    cid = 1000 + os.getpid() % 100000
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    append = "console=ttyS0 quiet panic=-1" + ("" if kvm else f" tsc_early_khz={tsc_khz()}")
    console = tmp_path / "console.log"
    vm = subprocess.Popen(
        ["qemu-system-x86_64", "-M", "microvm", "-accel", "kvm" if kvm else "tcg", "-cpu", "host" if kvm else "max",
         "-smp", "1", "-m", "256", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
         "-serial", f"file:{console}", "-kernel", kernel, "-initrd", initrd, "-append", append,
         "-device", f"vhost-vsock-device,guest-cid={cid}"], stdin=subprocess.DEVNULL)
    try:
        # No root disk: the agent stays in the initramfs, where /init is all there is.
        s = connect(cid, time.monotonic() + 60)
        t, _, body = recv_frame(s, 0)
        assert t == HELLO, console.read_text()
        boot_id = json.loads(body)["boot_id"]
        send_frame(s, EXEC, 1, json.dumps({"argv": ["/init", "--version"]}).encode())
        out = b""
        while True:
            t, _, body = recv_frame(s, 1)
            if t == STDOUT:
                out += body
            elif t == EXIT:
                break
        assert out.startswith(b"airlock-agent ")
        # The host goes away and comes back (what a restore looks like): re-accepted.
        s.close()
        s = connect(cid, time.monotonic() + 30)
        send_frame(s, HELLO, 0, b"{}")
        t, _, body = recv_frame(s, 0)
        assert t == HELLO and json.loads(body)["boot_id"] == boot_id
        s.close()
    finally:
        vm.kill()
        vm.wait()
