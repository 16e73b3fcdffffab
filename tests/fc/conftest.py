# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the Firecracker backend's tests on hosts without KVM: the
test driver (build/test/fc-driver, the backend's vmm_ops as the daemon calls
them), a fake `firecracker` on PATH that checks every request against the
spec (fake_firecracker.py), an airlock-agent as the "guest" behind the fake's
vsock (--listen-unix), a network namespace with a tap0.

Run with `make test-fc` (builds what it needs), or `pytest-3 -v tests/fc`.
"""
import json
import os
import shutil
import signal
import subprocess
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
DRIVER = os.path.join(BUILD, "test", "fc-driver")
AGENT = os.path.join(BUILD, "airlock-agent")
FAKE = os.path.join(HERE, "fake_firecracker.py")
FAKE_JAILER = os.path.join(HERE, "fake_jailer.sh")


def require(path, how):
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing; {how}", pytrace=False)


@pytest.fixture(scope="session")
def spec():
    import fcspec
    return fcspec.Spec()


class FakeFirecracker:
    """PATH with the fake as `firecracker`, and its request log."""

    def __init__(self, base):
        self.base = str(base)
        self.bin = os.path.join(self.base, "bin")
        os.makedirs(self.bin, exist_ok=True)
        os.symlink(FAKE, os.path.join(self.bin, "firecracker"))
        self.log = os.path.join(self.base, "fake-fc.jsonl")
        self.jailer_log = os.path.join(self.base, "fake-jailer.log")
        self.env = dict(os.environ, PATH=f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        FAKE_FC_LOG=self.log, FAKE_JAILER_LOG=self.jailer_log)

    def jailer_runs(self):
        """The argument vectors the (fake) jailer was run with."""
        if not os.path.exists(self.jailer_log):
            return []
        with open(self.jailer_log, "rb") as f:
            return [line.rstrip(b"\0").decode().split("\0") for line in f.read().split(b"\n") if line]

    def records(self, event="request"):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            recs = [json.loads(line) for line in f]
        return [r for r in recs if r.get("event") == event]


@pytest.fixture
def fakefc(tmp_path):
    return FakeFirecracker(tmp_path)


def _unix_listening(path):
    """Whether a unix socket bound to path is listening (__SO_ACCEPTCON)."""
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == path and int(fields[3], 16) & 0x10000:
                return True
    return False


class Guest:
    """airlock-agent --listen-unix: the vsock code path of the agent."""

    def __init__(self, base):
        require(AGENT, "run 'make all'")
        self.sock = os.path.join(str(base), "guest.sock")
        self.run_dir = os.path.join(str(base), "guest-run")
        os.makedirs(self.run_dir)
        self.proc = subprocess.Popen([AGENT, "--listen-unix", self.sock],
                                     env=dict(os.environ, AIRLOCK_AGENT_RUN_DIR=self.run_dir),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(str(base), "agent.log"), "wb"))
        # The path exists from bind(), connections are taken from listen():
        # wait for the socket to be listening (/proc/net/unix), without
        # connecting (a connection would be the agent's host).
        deadline = time.monotonic() + 10
        while not _unix_listening(self.sock):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError("airlock-agent --listen-unix did not start")
            time.sleep(0.01)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def guest(tmp_path):
    g = Guest(tmp_path)
    yield g
    g.stop()


@pytest.fixture(scope="session")
def tap_netns():
    """/run/netns/NAME of a namespace holding tap0 (root only), else None."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        yield None
        return
    name = f"airlock-fctest-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "tuntap", "add", "dev", "tap0", "mode", "tap"], check=True)
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def fake_kernel_files(base):
    """An ELF-looking "vmlinux", an initramfs and a sparse 64 MiB template."""
    base = str(base)
    kernel = os.path.join(base, "vmlinux")
    with open(kernel, "wb") as f:
        f.write(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    initrd = os.path.join(base, "initramfs.cpio")
    with open(initrd, "wb") as f:
        f.write(b"070701")
    rootfs = os.path.join(base, "rootfs.ext4")
    with open(rootfs, "wb") as f:
        f.write(b"template-data" * 100)
        f.seek(32 << 20)
        f.write(b"more-data")
        f.truncate(64 << 20)
    return kernel, initrd, rootfs


def run_driver(args, env, timeout=60):
    require(DRIVER, "run 'make test-fc' (it builds build/test/fc-driver)")
    if args and args[0] in ("lifecycle", "restore"):
        # VMMs start through a jailer, as in the daemon (fake_jailer.sh: no jail).
        args = [args[0], "--jailer", FAKE_JAILER] + args[1:]
    p = subprocess.run([DRIVER] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    err = p.stderr.decode()
    for s in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert s not in err, f"the driver (ASan+UBSan build) reported:\n{err}"
    steps = []
    for line in p.stdout.decode().splitlines():
        try:
            steps.append(json.loads(line))
        except ValueError:
            pass
    return p.returncode, steps, err


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped since the kill
        return False


@pytest.fixture(autouse=True)
def _no_stray_fakes(fakefc):
    yield
    for rec in fakefc.records("start"):
        if alive(rec["pid"]):
            os.kill(rec["pid"], signal.SIGKILL)
            raise AssertionError(f"a fake firecracker (pid {rec['pid']}) outlived its test")
