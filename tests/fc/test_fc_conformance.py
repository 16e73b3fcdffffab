# SPDX-License-Identifier: Apache-2.0
"""Every request the Firecracker backend makes, checked against Firecracker's
API spec by the fake `firecracker` (fake_firecracker.py + fcspec.py), while
the backend's vmm_ops run as the daemon runs them (build/test/fc-driver): a
boot, the vsock channel, pause, Full and Diff snapshots, resume, a restore
from the snapshot (File memory backend), probe, stop. And what happens when
Firecracker refuses a request or answers garbage.
"""
import json
import os
import socket
import threading
import time

import pytest

from conftest import alive, fake_kernel_files, run_driver

# (method, path template, what distinguishes the variant) the backend must send.
EXPECTED = {
    ("PUT", "/machine-config", ""), ("PUT", "/boot-source", ""), ("PUT", "/drives/{drive_id}", ""),
    ("PUT", "/network-interfaces/{iface_id}", ""), ("PUT", "/vsock", ""), ("PUT", "/entropy", ""),
    ("PUT", "/actions", "InstanceStart"), ("PATCH", "/vm", "Paused"), ("PATCH", "/vm", "Resumed"),
    ("PUT", "/snapshot/create", "Full"), ("PUT", "/snapshot/create", "Diff"),
    ("PUT", "/snapshot/load", "File"), ("GET", "/", ""),
}


def variant(rec):
    b = rec.get("body") or {}
    t = rec["template"]
    if t == "/actions":
        return b.get("action_type", "")
    if t == "/vm":
        return b.get("state", "")
    if t == "/snapshot/create":
        return b.get("snapshot_type", "Full")
    if t == "/snapshot/load":
        return (b.get("mem_backend") or {}).get("backend_type", "mem_file_path")
    return ""


def steps_ok(rc, steps, err):
    assert rc == 0, f"driver failed: {steps[-1] if steps else err}"
    return {s["step"]: s for s in steps}


@pytest.fixture
def booted(tmp_path, fakefc, guest, tap_netns):
    """A lifecycle and a restore through the fake; returns the fake's records."""
    if tap_netns is None:
        pytest.skip("needs root (a network namespace with a tap0 for PUT /network-interfaces)")
    kernel, initrd, rootfs = fake_kernel_files(tmp_path)
    env = dict(fakefc.env, FAKE_FC_GUEST_SOCK=guest.sock)
    d1 = tmp_path / "sb1"
    d1.mkdir()
    rc, steps, err = run_driver(["lifecycle", "--dir", str(d1), "--kernel", kernel, "--initrd", initrd,
                                 "--rootfs", rootfs, "--netns", tap_netns, "--disk-mib", "128", "--diff"], env)
    life = steps_ok(rc, steps, err)
    d2 = tmp_path / "sb2"
    d2.mkdir()
    rc, steps, err = run_driver(["restore", "--dir", str(d2), "--from", str(d1 / "snap"), "--netns", tap_netns,
                                 "--diff"], env)
    rest = steps_ok(rc, steps, err)
    return {"life": life, "restore": rest, "dirs": (d1, d2), "records": fakefc.records(),
            "starts": fakefc.records("start"), "fakefc": fakefc, "rootfs": rootfs}


def test_every_request_conforms_to_the_spec(booted, spec):
    recs = booted["records"]
    assert recs, "the fake saw no request"
    bad = [(r["method"], r["path"], r["problems"]) for r in recs if r["problems"]]
    assert not bad, f"requests that do not conform to Firecracker {spec.version}: {bad}"
    refused = [(r["method"], r["path"], r.get("fault")) for r in recs if r["status"] >= 400]
    assert not refused, f"requests the fake Firecracker refused: {refused}"
    assert all(not r.get("response_problems") for r in recs)


def test_every_request_type_is_covered(booted):
    seen = {(r["method"], r["template"], variant(r)) for r in booted["records"]}
    assert EXPECTED <= seen, f"not exercised: {sorted(EXPECTED - seen)}"
    # Nothing beyond what this test knows about: a new request needs a new line in EXPECTED.
    assert seen <= EXPECTED, f"requests this test does not cover: {sorted(seen - EXPECTED)}"


def test_request_bodies(booted):
    recs = booted["records"]

    def body(method, template, v=None):
        for r in recs:
            if r["method"] == method and r["template"] == template and (v is None or variant(r) == v):
                return r["body"]
        raise AssertionError(f"no {method} {template}")

    mc = body("PUT", "/machine-config")
    assert mc == {"vcpu_count": 2, "mem_size_mib": 256, "smt": False, "track_dirty_pages": True}
    boot = body("PUT", "/boot-source")
    # The kernel and initramfs are outside the jail: fds it was given, by their /proc/self/fd name.
    assert boot["kernel_image_path"] == "/proc/self/fd/4" and boot["initrd_path"] == "/proc/self/fd/5"
    assert "airlock.root=/dev/vda" in boot["boot_args"] and "panic=-1" in boot["boot_args"]
    assert "reboot=k" in boot["boot_args"] and "acpi=off" not in boot["boot_args"]
    # Names relative to the VMM's cwd (the sandbox dir, later the jail root), so snapshots restore elsewhere.
    assert body("PUT", "/drives/{drive_id}") == {"drive_id": "root", "path_on_host": "disk.raw",
                                                 "is_root_device": False, "is_read_only": False,
                                                 "cache_type": "Writeback"}
    assert body("PUT", "/network-interfaces/{iface_id}") == {"iface_id": "eth0", "host_dev_name": "tap0",
                                                             "guest_mac": "02:1a:2b:3c:4d:5e"}
    assert body("PUT", "/vsock") == {"guest_cid": 3, "uds_path": "v.sock"}
    # A save is written in the jail root under the daemon's names, then taken out (vmm-save.c).
    assert body("PUT", "/snapshot/create", "Full") == {"snapshot_type": "Full", "snapshot_path": "save.mem.vmstate",
                                                       "mem_file_path": "save.mem"}
    assert body("PUT", "/snapshot/create", "Diff") == {"snapshot_type": "Diff", "mem_file_path": "save.mem",
                                                       "snapshot_path": "save.mem.vmstate"}
    # The snapshot's files are outside the jail too: fds (the memory mapped MAP_PRIVATE through it).
    assert body("PUT", "/snapshot/load") == {"snapshot_path": "/proc/self/fd/7", "resume_vm": False,
                                             "mem_backend": {"backend_type": "File",
                                                             "backend_path": "/proc/self/fd/6"},
                                             "track_dirty_pages": True}


def test_order_and_process(booted):
    recs = booted["records"]
    first = [r for r in recs if r["template"] == "/snapshot/load"]
    # The restore's first request is the load (only valid on a fresh process).
    starts = booted["starts"]
    assert len(starts) == 2
    d1, d2 = booted["dirs"]
    assert starts[0]["cwd"] == str(d1) and starts[1]["cwd"] == str(d2)
    assert starts[0]["argv"] == ["--api-sock", "fc.sock", "--id", "airlock-sb-0123456789abcdef"]
    # The VMM's stdout (the guest's serial console) is the FIFO.
    assert all(s["stdout_is_fifo"] for s in starts)
    assert os.path.exists(d1 / "con.fifo")
    # It ran in the sandbox's network namespace, not the test's.
    assert starts[0]["netns"] != os.readlink("/proc/self/ns/net")
    assert first, "no snapshot load"
    # Every VMM was killed by stop and reaped.
    for s in starts:
        assert not alive(s["pid"])
    assert booted["life"]["stop"]["killed"] and booted["restore"]["stop"]["killed"]


def test_files(booted):
    d1, d2 = booted["dirs"]
    disk = d1 / "disk.raw"
    st = os.stat(disk)
    # disk_mib 128: the guest sees 128 MiB; the copy of a sparse template stays sparse.
    assert st.st_size == 128 << 20
    assert st.st_blocks * 512 < 8 << 20, "the disk copy is not sparse"
    with open(disk, "rb") as f, open(booted["rootfs"], "rb") as g:
        assert f.read(1300) == g.read(1300)
    assert (d1 / "snap" / "memory.bin").exists() and (d1 / "snap" / "memory.bin.vmstate").exists()
    assert (d1 / "snap" / "disk.raw").exists() and (d1 / "snap" / "diff.bin").exists()
    assert (d1 / "snap" / "diff.bin.vmstate").exists()
    # What the VMM wrote in its jail root was taken out, not left there.
    assert not (d1 / "save.mem").exists() and not (d1 / "save.mem.vmstate").exists()
    assert (d2 / "disk.raw").exists()


def test_channel_across_snapshot_and_restore(booted):
    life, rest = booted["life"], booted["restore"]
    assert life["hello"]["hello"]["proto"] == 1
    assert life["exec"]["stdout"] == "booted\n"
    # The snapshot reset the vsock connection; the host reconnected and the agent re-accepted.
    assert "reset" in life
    assert life["exec-after-snapshot"]["stdout"] == "after-snapshot\n"
    assert life["rehello"]["hello"]["boot_id"] == life["hello"]["hello"]["boot_id"]
    assert rest["exec"]["stdout"] == "restored\n"
    resets = booted["fakefc"].records("vsock-reset")
    assert resets and resets[0]["connections"] == 1
    connects = booted["fakefc"].records("vsock-connect")
    assert all(c["line"] == "CONNECT 1024\n" for c in connects)


# ---- refusals ---------------------------------------------------------------------------------

def test_refused_request_fails_spawn_and_kills_the_vmm(tmp_path, fakefc, guest):
    kernel, initrd, rootfs = fake_kernel_files(tmp_path)
    env = dict(fakefc.env, FAKE_FC_GUEST_SOCK=guest.sock, FAKE_FC_FAULT="PUT /boot-source")
    d = tmp_path / "sb"
    d.mkdir()
    rc, steps, _ = run_driver(["lifecycle", "--dir", str(d), "--kernel", kernel, "--initrd", initrd,
                               "--rootfs", rootfs], env)
    assert rc == 1
    assert steps[-1]["step"] == "spawn"
    assert steps[-1]["error"] == "Firecracker API PUT /boot-source: 400: injected fault for PUT /boot-source"
    (start,) = fakefc.records("start")
    assert not alive(start["pid"]), "the refused VMM was left running"
    # Nothing after the refusal was sent.
    assert [r["template"] for r in fakefc.records()] == ["/machine-config", "/boot-source"]


def test_bzimage_is_refused_before_starting(tmp_path, fakefc):
    _, initrd, rootfs = fake_kernel_files(tmp_path)
    bz = tmp_path / "vmlinuz"
    bz.write_bytes(b"MZ" + b"\0" * 0x1fc + b"HdrS")
    d = tmp_path / "sb"
    d.mkdir()
    rc, steps, _ = run_driver(["lifecycle", "--dir", str(d), "--kernel", str(bz), "--initrd", initrd,
                               "--rootfs", rootfs], fakefc.env)
    assert rc == 1 and steps[-1]["step"] == "spawn"
    assert "is not an uncompressed ELF vmlinux" in steps[-1]["error"]
    assert fakefc.records("start") == []


def test_missing_firecracker_binary(tmp_path):
    kernel, initrd, rootfs = fake_kernel_files(tmp_path)
    d = tmp_path / "sb"
    d.mkdir()
    env = dict(os.environ, PATH=str(tmp_path))  # no firecracker there
    rc, steps, _ = run_driver(["lifecycle", "--dir", str(d), "--kernel", kernel, "--initrd", initrd,
                               "--rootfs", rootfs], env)
    assert rc == 1 and steps[-1]["step"] == "spawn"
    assert steps[-1]["error"] == "firecracker is not on PATH (docs/kvm-host.md)"


# ---- answers that are not Firecracker's ------------------------------------------------------

class RawServer:
    """Answers every connection on DIR/fc.sock with canned bytes."""

    def __init__(self, d, answer, close=True, delay=0.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(d / "fc.sock"))
        self.sock.listen(4)
        self.answer, self.close, self.delay = answer, close, delay
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.recv(65536)
            time.sleep(self.delay)
            if self.answer is not None:
                try:
                    c.sendall(self.answer)
                except OSError:
                    pass
            if self.close:
                c.close()
            else:
                threading.Timer(5, c.close).start()


BAD_ANSWERS = [
    (b"HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 9000000\r\n\r\n{}", "over the limit"),
    (b"HTTP/1.1 200 \r\nX: " + b"a" * 9000 + b"\r\n\r\n", "head is longer than 8192 bytes"),
    (b"HTTP/1.0 200 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 200 \nContent-Length: 2\n\n{}", "bare LF"),
    (b"HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding"),
    (b"HTTP/1.1 200 \r\nContent-Type: application/json\r\n\r\n{}", "without Content-Length"),
    (b"HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{nope", "not valid JSON"),
    (b"HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n[42]", "not an object"),
    (b"HTTP/1.1 204 \r\n\r\nHTTP/1.1 204 \r\n\r\n", "bytes after the answer"),
    (b"HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{}",
     "closed the connection in the middle of its answer"),
    (b"", "closed the connection without answering"),
    (b"\x00\x01\x02garbage\r\n\r\n", "NUL byte"),
    (b"garbage\r\n\r\n", "status line"),
]


@pytest.mark.parametrize("answer,needle", BAD_ANSWERS, ids=[n for _, n in BAD_ANSWERS])
def test_bad_answers_are_refused(tmp_path, answer, needle):
    RawServer(tmp_path, answer)
    rc, steps, _ = run_driver(["call", "--dir", str(tmp_path), "--timeout-ms", "3000", "GET", "/"], os.environ)
    assert rc == 1
    assert steps[-1]["error"].startswith("Firecracker API GET /: bad answer: ")
    assert needle in steps[-1]["error"]


def test_silent_api_times_out(tmp_path):
    RawServer(tmp_path, None, close=False)
    t0 = time.monotonic()
    rc, steps, _ = run_driver(["call", "--dir", str(tmp_path), "--timeout-ms", "300", "GET", "/"], os.environ)
    assert rc == 1 and time.monotonic() - t0 < 3
    assert "no complete answer in time" in steps[-1]["error"]


def test_good_answer_through_the_socket(tmp_path):
    body = json.dumps({"app_name": "Firecracker", "id": "x", "state": "Running", "vmm_version": "1.17.0"}).encode()
    RawServer(tmp_path, b"HTTP/1.1 200 \r\nServer: Firecracker API\r\nConnection: keep-alive\r\n"
                        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    rc, steps, _ = run_driver(["call", "--dir", str(tmp_path), "GET", "/"], os.environ)
    assert rc == 0 and steps[-1]["body"]["state"] == "Running"


# ---- the jail ---------------------------------------------------------------------------------

def _opts(argv):
    """The jailer's options before "--" as (name, value) pairs, and the VMM's argv."""
    i = argv.index("--")
    opts, k = [], 0
    while k < i:
        if argv[k] in ("--new-pid-ns",):
            opts.append((argv[k], None))
            k += 1
        else:
            opts.append((argv[k], argv[k + 1]))
            k += 2
    return opts, argv[i + 1:]


def test_firecracker_runs_in_the_jail(booted):
    """What the daemon asks of airlock-jailer for Firecracker: QEMU's jail with
    /dev/kvm and /dev/net/tun, no seccomp profile of the jailer's (Firecracker
    installs its own), the kernel/initramfs (boot) or memory/state (restore)
    as the only fds, the sandbox's network namespace."""
    runs = [r for r in booted["fakefc"].jailer_runs() if "--" in r]
    assert len(runs) == 2
    d1, d2 = booted["dirs"]
    for run, d, sid, keep in ((runs[0], d1, "sb-0123456789abcdef", ["4", "5"]),
                              (runs[1], d2, "sb-fedcba9876543210", ["6", "7"])):
        opts, vmm = _opts(run)
        o = {}
        for k, v in opts:
            o.setdefault(k, []).append(v)
        assert o["--id"] == [sid] and o["--root"] == [str(d)]
        assert o["--uid"] == o["--gid"] and int(o["--uid"][0]) >= 1000
        assert sorted(o["--dev"]) == ["/dev/kvm", "/dev/net/tun"]
        assert "--seccomp" not in o, "the jailer must not add QEMU's profile to Firecracker"
        assert "--new-pid-ns" in o and o["--netns-fd"] == ["3"]
        assert o["--keep-fd"] == keep
        for k in ("--memory-mib", "--cpu-quota-pct", "--pids-max", "--rlimit-fsize", "--rlimit-nofile",
                  "--cgroup-parent"):
            assert k in o, k
        assert os.path.isabs(vmm[0]) and os.path.realpath(vmm[0]) == vmm[0]
        assert vmm[1:] == ["--api-sock", "fc.sock", "--id", "airlock-" + sid]


def test_no_vmm_without_its_jail(tmp_path, fakefc):
    """A jailer that refuses: the error says so and no VMM runs."""
    kernel, initrd, rootfs = fake_kernel_files(tmp_path)
    jailer = tmp_path / "refusing-jailer"
    jailer.write_text('#!/bin/sh\n[ "$1" = --check ] && exit 0\n'
                      'echo "airlock-jailer: validate: --dev /dev/kvm: No such file or directory" >&2\nexit 1\n')
    jailer.chmod(0o755)
    d = tmp_path / "sb"
    d.mkdir()
    rc, steps, _ = run_driver(["lifecycle", "--dir", str(d), "--kernel", kernel, "--initrd", initrd,
                               "--rootfs", rootfs, "--jailer", str(jailer)], fakefc.env)
    assert rc == 1 and steps[-1]["step"] == "spawn"
    assert steps[-1]["error"].startswith("the VMM's jail could not be set up: "), steps[-1]
    assert fakefc.records("start") == []
