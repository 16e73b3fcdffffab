# SPDX-License-Identifier: Apache-2.0
"""How a VMM's end is told, and how a VMM learns that nobody will re-attach.

A VMM killed from outside (kill -9 of its QEMU) puts its sandbox in `error`
with the signal named, whether this daemon started it or re-attached to it
after a restart. VMs outlive their daemon by design; each jailer's
supervisor watches the sandbox's lease (docs/jailer.md, "Lease"): a VM
whose lease is not renewed within --orphan-timeout-s, or whose sandbox
directory is gone, is stopped. Real daemons and QEMU microVMs; every
duration below bounds a hang, it is not a timing benchmark."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import Daemon, _parent, _report_on_failure, pid_alive, qemu_processes, wait_for
from lifecycleutil import WAIT_S, wait_state


def only_qemu(sid):
    pids = list(qemu_processes(needle=f"airlock-{sid}"))
    assert len(pids) == 1, f"expected one QEMU for {sid}, found {pids}"
    return pids[0]


@pytest.fixture
def fresh(tmp_path, request):
    """A daemon of the test's own (tests here kill and restart it)."""
    made = []

    def start(*extra):
        d = Daemon(tmp_path, extra_args=list(extra)).start()
        made.append(d)
        return d
    yield start
    for d in made:
        _report_on_failure(request, d)
    for d in made:
        leftovers = d.cleanup()
        assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


# ------------------------------------------------------------------ how the VMM ended

def killed_vmm_error(d, sid):
    os.kill(only_qemu(sid), signal.SIGKILL)
    sb = wait_state(d.api, sid, "error")
    return sb["error"] or ""


def test_sigkilled_vmm_is_named_by_its_signal(fresh):
    d = fresh()
    sid = d.api.create_ok(template="minimal", vcpus=1, memory_mib=256)["id"]
    err = killed_vmm_error(d, sid)
    assert "the VMM was killed by signal 9 (SIGKILL)" in err, err
    assert "status 0" not in err, err


def test_sigkilled_reattached_vmm_is_named_by_its_signal(fresh):
    d = fresh()
    sid = d.api.create_ok(template="minimal", vcpus=1, memory_mib=256)["id"]
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.start()
    assert d.api.get(sid).json["state"] == "running", d.log()
    assert f"sandbox {sid}: re-attached" in d.log(), d.log()
    # The VMM is not this daemon's child: the jailer, which waited for it,
    # says how it ended.
    err = killed_vmm_error(d, sid)
    assert "the VMM was killed by signal 9 (SIGKILL)" in err, err
    assert "status 0" not in err, err


# ------------------------------------------------------------------ the lease

def test_flag_bounds(tmp_path):
    from conftest import AIRLOCKD
    for bad in ("2592001", "-1", "1h", ""):
        r = subprocess.run([AIRLOCKD, "--orphan-timeout-s", bad, "--socket", str(tmp_path / "s"),
                            "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "--orphan-timeout-s must be from 0 to 2592000" in r.stderr, (bad, r)
    assert not os.path.exists(tmp_path / "state")
    r = subprocess.run([AIRLOCKD, "--help"], capture_output=True, text=True, timeout=30)
    assert "--orphan-timeout-s N" in r.stdout and "default 3600; 0 = never" in r.stdout, r


ORPHAN_S = 3
# The jailer looks at the lease every quarter of the timeout: a VM stops
# within the timeout and a look after it is gone. This bounds a hang on a
# loaded machine (about 10x that); it is not a benchmark.
STOP_BOUND_S = 10 * ORPHAN_S + 30


def cgroup_dirs(sid):
    from conftest import cgroup_mounts
    return [p for p in (os.path.join(m, "airlock", sid) for m, _ in cgroup_mounts().values()) if os.path.isdir(p)]


def running_vm(d):
    sid = d.api.create_ok(template="minimal", vcpus=1, memory_mib=256)["id"]
    return sid, only_qemu(sid)


def assert_answers(d, sid):
    r = d.api.exec(sid, ["echo", "alive"])
    assert r.status == 200 and r.json["exit_code"] == 0, r


def test_orphan_whose_state_dir_is_removed_stops(fresh):
    d = fresh("--orphan-timeout-s", str(ORPHAN_S))
    sid, pid = running_vm(d)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    assert pid_alive(pid)  # VMs outlive their daemon
    shutil.rmtree(d.state_dir)
    wait_for(lambda: not pid_alive(pid), STOP_BOUND_S, "the orphaned VM to stop")
    # Nobody else would remove its cgroup: its jailer did.
    wait_for(lambda: not cgroup_dirs(sid), 30, f"the cgroup of {sid} to go")


def test_orphan_whose_lease_expires_stops_and_says_why(fresh):
    d = fresh("--orphan-timeout-s", str(ORPHAN_S))
    sid, pid = running_vm(d)
    # Renewed while the daemon lives: twice the timeout later it still runs.
    time.sleep(2 * ORPHAN_S)
    assert pid_alive(pid)
    assert_answers(d, sid)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    t0 = time.monotonic()
    wait_for(lambda: not pid_alive(pid), STOP_BOUND_S, "the orphaned VM to stop")
    assert time.monotonic() - t0 >= ORPHAN_S - 1, "stopped before its lease expired"
    log = open(os.path.join(d.sandbox_dir(sid), "vmm.log"), errors="replace").read()
    assert "was not renewed for" in log and "no airlockd will re-attach to the VMM" in log, log
    wait_for(lambda: not cgroup_dirs(sid), 30, f"the cgroup of {sid} to go")
    # A daemon that does come back finds it gone.
    d.start()
    sb = wait_state(d.api, sid, "error")
    assert "gone" in (sb["error"] or ""), sb


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_daemon_back_in_time_keeps_its_vms(fresh, how):
    d = fresh("--orphan-timeout-s", str(ORPHAN_S))
    sid, pid = running_vm(d)
    if how == "SIGKILL":
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
    else:
        assert d.stop() == 0
    assert pid_alive(pid)
    d.start()
    assert f"sandbox {sid}: re-attached" in d.log(), d.log()
    # The restarted daemon renews the lease: long after the timeout the VM
    # still runs and answers.
    time.sleep(3 * ORPHAN_S)
    assert pid_alive(pid) and d.api.get(sid).json["state"] == "running", d.log()
    assert_answers(d, sid)
    lease = os.stat(os.path.join(d.sandbox_dir(sid), "lease"))
    assert lease.st_uid == 0 and lease.st_mode & 0o077 == 0, oct(lease.st_mode)



def test_a_vm_keeps_its_timeout_when_a_restart_turns_it_off(fresh):
    """--orphan-timeout-s 0 after a restart: the VMs started with a lease
    still have it, and the daemon still renews it."""
    d = fresh("--orphan-timeout-s", str(ORPHAN_S))
    sid, pid = running_vm(d)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.extra_args = ["--orphan-timeout-s", "0"]
    d.start()
    time.sleep(3 * ORPHAN_S)
    assert pid_alive(pid) and d.api.get(sid).json["state"] == "running", d.log()
    assert_answers(d, sid)
    # A VM started now has no lease (and is not stopped for it).
    sid2, pid2 = running_vm(d)
    assert not os.path.exists(os.path.join(d.sandbox_dir(sid2), "lease"))
    jailer = open(f"/proc/{_parent(pid2)}/cmdline", "rb").read().split(b"\0")
    assert b"--exit-file" in jailer and b"--lease" not in jailer, jailer

def test_the_vmm_cannot_renew_its_own_lease(fresh):
    """SECURITY: the lease is root's, in the sandbox directory (root's, 0700),
    out of the jail: neither the VMM's uid nor its view of the file system
    reaches it (a VMM that could renew its lease would outlive every daemon)."""
    d = fresh("--orphan-timeout-s", str(ORPHAN_S))
    sid, pid = running_vm(d)
    lease = os.path.join(d.sandbox_dir(sid), "lease")
    uid = int([line for line in open(f"/proc/{pid}/status") if line.startswith("Uid:")][0].split()[1])
    assert uid >= 1000, uid
    r = subprocess.run(["touch", "-c", lease], user=uid, group=uid, extra_groups=[], capture_output=True)
    assert r.returncode != 0 and b"Permission denied" in r.stderr, r
    # The same command as that uid does write where the uid may (the refusal
    # above is the lease's path, not the way the test runs it).
    ctl = tempfile.mkdtemp(dir="/tmp")
    try:
        os.chown(ctl, uid, uid)
        r = subprocess.run(["touch", os.path.join(ctl, "x")], user=uid, group=uid, extra_groups=[],
                           capture_output=True)
        assert r.returncode == 0, r
    finally:
        shutil.rmtree(ctl)
    # The VMM's root is its vm/ directory: the lease is not in its world.
    assert os.stat(f"/proc/{pid}/root/").st_ino == os.stat(d.vm_dir(sid)).st_ino
    for p in ("/lease", lease, "/../lease"):
        assert not os.path.exists(f"/proc/{pid}/root{p}"), p
