# SPDX-License-Identifier: Apache-2.0
"""QEMU with KVM inside the real airlock-jailer, under the shipped seccomp
profile (security/seccomp/qemu-x86_64.json, default action kill_process):
the profile must hold every syscall of QEMU's KVM start-up and vCPU loop.
Before issue 15 it was derived under TCG only, and a jailed `-accel kvm` QEMU
died at once of SIGSYS (`uname`, kvm_arch_init's first call).

For each of airlockd's KVM CPU models (`host`, and `host,-arch-capabilities`
for nested hosts where -cpu host aborts with "failed to set MSR 0x10a"),
QEMU runs in the jail with airlockd's command line (qemuutil.qemu_argv,
kvm=True) and /dev/kvm in its /dev for RUN_S seconds. Then it is either
still running, answers QMP query-status and takes stop/cont (which kicks the
vCPU thread out of KVM_RUN: tgkill) and quits with status 0, or it ended for
its own reasons: status 1 with QEMU's own error on stderr, or SIGABRT (QEMU's
assertion when the host refuses an MSR). Never SIGSYS, and the kernel logs no
seccomp kill (`audit: type=1326`, read from /dev/kmsg, else dmesg) for the
jail's uid.
The same under TCG for comparison, and a control that proves the checks
catch a kill: with `uname` taken out of a copy of the profile, the KVM QEMU
must die of SIGSYS with the audit record for syscall 63.

A host where /dev/kvm does not open read-write skips the KVM tests; a KVM
that cannot boot a Linux guest (nested hosts) is enough: nothing here waits
for the guest (see security/seccomp/derive-profile.py --accel kvm).
Root only. Run: pytest-3 -v tests/integration/test_seccomp_kvm.py
"""
import json
import os
import random
import re
import signal
import subprocess
import time

import pytest

from conftest import IMAGES, JAILER
import qemuutil as q
# The jail as test_jailer.py builds and cleans it (ids, uids, cgroup
# cleanup, the tap owned by the jail's uid), and its fixture jail_base.
import test_jailer as tj
from test_jailer import Jail, Netns, jail_boot_files

jail_base = tj.jail_base
PROFILE = tj.PROFILE

RUN_S = 3
KVM_CPUS = ("host", "host,-arch-capabilities")
AUDIT_SECCOMP = "type=1326"
SYSCALL_UNAME = 63  # x86_64


def kvm_unusable():
    """Why KVM cannot be tried here, or None."""
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm on this host"
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
    except OSError as e:
        return f"/dev/kvm does not open read-write: {e.strerror}"
    return None


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the jailer needs root"),
    pytest.mark.skipif(not os.path.exists(JAILER), reason="build/airlock-jailer missing (make all)"),
    pytest.mark.skipif(not all(os.path.exists(os.path.join(IMAGES, "kernels", f))
                               for f in ("vmlinuz", "initramfs.cpio")), reason="build/images missing (make images)"),
]
needs_kvm = pytest.mark.skipif(kvm_unusable() is not None, reason=kvm_unusable() or "")


class Kmsg:
    """The kernel log records written after it was made: /dev/kmsg read from
    its end, else (no /dev/kmsg, e.g. a private /dev) `dmesg` against what it
    showed at first. available: False when neither can be read."""

    def __init__(self):
        self.fd, self.before = None, None
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            self.before = set(self.dmesg() or ())
        self.available = self.fd is not None or self.dmesg() is not None

    @staticmethod
    def dmesg():
        r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30)
        return r.stdout.splitlines() if r.returncode == 0 else None

    def lines(self):
        if self.fd is None:
            new = [ln for ln in self.dmesg() or () if ln not in self.before]
            self.before.update(new)
            return new
        out = []
        while True:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                return out
            except BrokenPipeError:
                continue  # records overwritten before they were read: go on
            out.append(rec.decode(errors="replace").split(";", 1)[-1].split("\n", 1)[0])

    def close(self):
        if self.fd is not None:
            os.close(self.fd)


def seccomp_kills(lines, uid):
    """The audit records of seccomp kills of the jail's uid (unique to it)."""
    return [ln for ln in lines if AUDIT_SECCOMP in ln and re.search(rf"\buid={uid}\b", ln)]


def jail_children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(k) for k in f.read().split()]
    except OSError:
        return []


class Run:
    """What became of one jailed QEMU."""
    status = None      # the jailer's exit status (the VMM's), None while it runs
    qmp_status = None  # query-status at RUN_S, when it was still running
    stderr = ""
    kills = ()         # audit records of seccomp kills of the jail's uid
    kernel_log = True  # whether the kernel's log could be read
    vmm = None         # the VMM's pid, when it was seen
    kvm_fds = ()       # its KVM objects at RUN_S (anon_inode:kvm-vm, kvm-vcpu:N)


def kvm_fds(pid):
    """The KVM objects pid holds: proof that QEMU made its VM and vCPU."""
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("anon_inode:kvm-"):
                out.add(link)
    except OSError:
        pass
    return out


def run_jailed(jail_base, tag, *, kvm, cpu=None, profile=None):
    """QEMU with airlockd's command line in the jail under profile (None:
    the shipped one), for RUN_S seconds; then query-status, stop/cont and
    quit if it still runs."""
    profile = profile or PROFILE
    j = Jail(jail_base, tag)
    boot_fds, fds, keep = jail_boot_files(j)
    ns = Netns(f"airlock-jk-{os.getpid()}-{random.randrange(1 << 20):x}", tap_user=j.uid)
    # airlockd's jail for QEMU, /dev/kvm in it only under KVM (as airlockd
    # gives it only when it runs KVM).
    devs = ("--dev", "/dev/net/tun", "--dev", "/dev/null") + (("--dev", "/dev/kvm") if kvm else ())
    args = ("--netns-fd", str(ns.fd), "--new-pid-ns", "--memory-mib", "768", "--pids-max", "128",
            "--rlimit-nofile", "1024", "--bind-ro", "/usr", *devs, "--seccomp", profile, *keep)
    payload = q.qemu_argv(f"airlock-{tag}", kvm=kvm, cpu=cpu, fds=fds, console="console.log")
    errpath = os.path.join(j.dir, "stderr.txt")
    kmsg = Kmsg()
    r = Run()
    try:
        with open(errpath, "wb") as err:
            p = j.start(*args, payload=payload, pass_fds=(ns.fd, *boot_fds), stderr=err)
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline and p.poll() is None:
            # The VMM: the jailer's child under --new-pid-ns (seen unless it
            # dies at once; its uid names its audit records anyway).
            if r.vmm is None and jail_children(p.pid):
                r.vmm = jail_children(p.pid)[0]
            time.sleep(0.02)
        if p.poll() is None:
            r.kvm_fds = kvm_fds(r.vmm) if r.vmm else set()
            qp = os.path.join(j.root, "qmp.sock")
            try:
                r.qmp_status = q.qmp(qp, "query-status", proc=p)["status"]
                # A pause kicks the vCPU thread out of KVM_RUN (SIG_IPI: tgkill).
                q.qmp(qp, "stop", proc=p)
                assert q.qmp(qp, "query-status", proc=p)["status"] == "paused"
                q.qmp(qp, "cont", proc=p)
                q.qmp(qp, "quit", proc=p)
            except (OSError, RuntimeError, ValueError) as e:
                # QEMU gone in the middle: its status and the kernel's log
                # say why (below); one that still runs failed QMP.
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    raise e from None
        r.status = p.wait(30)
        with open(errpath, errors="replace") as f:
            r.stderr = f.read()
        # kauditd prints a kill's record a moment after it.
        lines = []
        deadline = time.monotonic() + (3 if r.status == -signal.SIGSYS else 0.3)
        while not seccomp_kills(lines, j.uid) and time.monotonic() < deadline:
            time.sleep(0.05)
            lines += kmsg.lines()
        r.kills = seccomp_kills(lines, j.uid)
        r.kernel_log = kmsg.available
        return r
    finally:
        kmsg.close()
        for fd in boot_fds:
            os.close(fd)
        j.close()
        ns.close()


def assert_not_killed_by_seccomp(r, what):
    assert r.status != -signal.SIGSYS, f"{what}: killed by seccomp (SIGSYS); audit: {r.kills}; stderr: {r.stderr}"
    assert not r.kills, f"{what}: the kernel logged a seccomp kill: {r.kills}"


@needs_kvm
@pytest.mark.parametrize("cpu", KVM_CPUS)
def test_kvm_qemu_is_not_killed_by_the_profile(jail_base, cpu):
    r = run_jailed(jail_base, "kvm", kvm=True, cpu=cpu)
    assert_not_killed_by_seccomp(r, f"-accel kvm -cpu {cpu}")
    if r.qmp_status is not None:
        # It ran RUN_S seconds of its vCPU loop, paused, resumed, quit.
        print(f"-cpu {cpu}: query-status {r.qmp_status} after {RUN_S} s, holding {sorted(r.kvm_fds)}")
        assert {"anon_inode:kvm-vm", "anon_inode:kvm-vcpu:0"} <= r.kvm_fds, (r.vmm, r.kvm_fds)
        assert r.status == 0, (r.status, r.stderr)
        return
    # Ended by itself before RUN_S: only for QEMU's own reasons.
    assert "airlock-jailer: " not in r.stderr, r.stderr
    # QEMU's own assertion (e.g. the host refusing MSR 0x10a) ends it with
    # SIGABRT, or, seen on a nested host, with SIGSEGV from another of its
    # threads while the abort runs; either way after the assertion's message
    # (a seccomp kill would be SIGSYS and an audit record, checked above).
    qemu_assert = re.search(r"qemu-system-x86_64: \S+:\d+: .*failed\.|' failed\.$", r.stderr, re.M)
    if r.status == -signal.SIGABRT or (r.status == -signal.SIGSEGV and qemu_assert):
        print(f"-cpu {cpu}: QEMU aborted (an assertion, e.g. the host refusing MSR 0x10a): {r.stderr.strip()}")
        return
    assert r.status == 1 and "qemu-system-x86_64: " in r.stderr, (r.status, r.stderr)
    print(f"-cpu {cpu}: QEMU refused to run here: {r.stderr.strip()}")


def test_tcg_qemu_is_not_killed_by_the_profile(jail_base):
    r = run_jailed(jail_base, "tcg", kvm=False)
    assert_not_killed_by_seccomp(r, "-accel tcg")
    assert r.qmp_status == "running", (r.status, r.stderr)
    assert r.vmm and not r.kvm_fds, (r.vmm, r.kvm_fds)
    assert r.status == 0, (r.status, r.stderr)


@needs_kvm
def test_the_checks_see_a_seccomp_kill(jail_base, tmp_path):
    # The control: the profile without uname, QEMU's first KVM-only call
    # (kvm_arch_init): the KVM QEMU must die of it, and both checks above
    # must see it.
    with open(PROFILE) as f:
        prof = json.load(f)
    assert "uname" in prof["syscalls"], "the profile has no uname: KVM's start-up is missing from it"
    prof["syscalls"].remove("uname")
    path = tmp_path / "no-uname.json"
    path.write_text(json.dumps(prof))
    os.chmod(path, 0o644)
    with open("/proc/sys/kernel/seccomp/actions_logged") as f:
        logged = "kill_process" in f.read().split()
    r = run_jailed(jail_base, "kvmctl", kvm=True, cpu=KVM_CPUS[-1], profile=str(path))
    assert r.status == -signal.SIGSYS, (r.status, r.stderr)
    if logged and r.kernel_log:
        assert any(f"syscall={SYSCALL_UNAME} " in k and "sig=31" in k for k in r.kills), r.kills
    with pytest.raises(AssertionError):
        assert_not_killed_by_seccomp(r, "the control")
