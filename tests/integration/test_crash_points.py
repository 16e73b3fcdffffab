# SPDX-License-Identifier: Apache-2.0
"""Crash safety (issue 18): airlockd killed (SIGKILL) at named points inside
fork, snapshot, pause, resume, delete, create and restore, then restarted on
the same state dir; after each restart the invariants of docs/api.md
("After a crash") hold:

- nothing is left that no record owns: no snapshot directory without its
  record (or the other way round), no internal (fork) snapshot, no sandbox
  directory of a deleted sandbox, no VMM or cgroup of a sandbox that is not
  running or paused;
- a fork is all or nothing: a fork cut by the crash leaves none of its
  copies; one that finished keeps them all;
- a snapshot cut by the crash is not listed and its files are gone, and the
  sandbox goes back to how it was;
- a pause or resume cut by the crash leaves the sandbox as its record says,
  its VM alive (never torn down for not answering);
- what was acknowledged before the crash is intact.

The crash points exist only in build/crash/airlockd (`make crash-build`,
src/daemon/obs/crash-point.h); the daemon reads the armed point from a file
at every crash point, so a test arms one without restarting. Also here: a
second airlockd on the same state dir is refused without harm, and a paused
sandbox can be snapshotted and forked again and again. Template minimal,
one vCPU, as everywhere."""
import os
import signal
import sqlite3
import subprocess
import threading
import time

import pytest

from conftest import BUILD, JAILER, ROOT, Daemon, cgroup_mounts, qemu_processes, wait_for
from lifecycleutil import guest_sh, snapshot
from qemuutil import qmp

CRASH_AIRLOCKD = os.path.join(BUILD, "crash", "airlockd")
EGRESS = os.path.join(BUILD, "airlock-egress")
SECCOMP = os.path.join(ROOT, "security", "seccomp", "qemu-x86_64.json")
CG_PARENT = "airlock"
# Bounds a hang; times nothing.
WAIT_S = 120


class CrashDaemon(Daemon):
    """airlockd from the crash build; arm() names the point it dies at."""

    def __init__(self, base_dir):
        self.point_file = os.path.join(str(base_dir), "crash-point")
        open(self.point_file, "w").close()
        super().__init__(base_dir, binary=CRASH_AIRLOCKD,
                         extra_args=["--jailer", JAILER, "--egress-bin", EGRESS, "--seccomp-profile", SECCOMP],
                         env={"AIRLOCK_TEST_CRASH_POINT": self.point_file})

    def arm(self, point):
        with open(self.point_file, "w") as f:
            f.write(point)

    def crash_during(self, point, action):
        """Runs action (an API call) with `point` armed; the daemon must die
        there (SIGKILL). Then restarts it, disarmed."""
        self.arm(point)
        result = {}

        def run():
            try:
                result["answer"] = action()
            except OSError as e:  # the connection dies with the daemon
                result["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"airlockd did not reach crash point {point}; answer: {result}; "
                                 f"log:\n{self.log()}")
        t.join(timeout=30)
        self.arm("")
        assert self.proc.returncode == -9, (self.proc.returncode, self.log())
        assert f"crash point {point.split('@')[0]}" in self.log(60), self.log()
        assert "answer" not in result or result["answer"].status >= 500, result
        self.start()
        return result


@pytest.fixture(scope="module")
def cd(tmp_path_factory):
    if not os.path.exists(CRASH_AIRLOCKD):
        pytest.fail(f"{CRASH_AIRLOCKD} is missing: run 'make crash-build' (make integration does)", pytrace=False)
    d = CrashDaemon(tmp_path_factory.mktemp("crash")).start()
    yield d
    d.arm("")
    if d.proc.poll() is not None:
        d.start()
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU left running: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def box(cd, request):
    """A running sandbox of the crash daemon, deleted afterwards."""
    sb = cd.api.create_ok()
    yield sb["id"]
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n---- airlockd log ({cd.log_path}) ----\n{cd.log()}")
    if cd.proc.poll() is None:
        cd.api.delete(sb["id"])


def db_rows(d, sql):
    db = sqlite3.connect(f"file:{os.path.join(d.state_dir, 'airlock.db')}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def vm_status(d, sid):
    """What the sandbox's QEMU says of its guest (query-status): running, paused, postmigrate."""
    return qmp(os.path.join(d.vm_dir(sid), "qmp.sock"), "query-status")["status"]


def cgroup_left(sid):
    return [os.path.join(m, CG_PARENT, sid) for m, _v in cgroup_mounts().values()
            if os.path.exists(os.path.join(m, CG_PARENT, sid))]


def reattached(d):
    """Waits until the restarted daemon has re-attached every live sandbox
    (GET /healthz "reattaching" is 0: until then their requests answer 503)."""
    wait_for(lambda: d.api.healthz().json["reattaching"] == 0, WAIT_S, "the re-attach to finish")


def check_invariants(d):
    """What must hold after every restart; returns the records by id."""
    reattached(d)
    recs = {s["id"]: s for s in d.api.list(all=True)}
    live = {i for i, s in recs.items() if s["state"] in ("running", "paused")}
    # Every sandbox directory belongs to a record that is not deleted.
    for sid in d.sandbox_dirs():
        assert sid in recs and recs[sid]["state"] != "deleted", (sid, recs.get(sid))
    # Every VMM of this state dir is a running or paused sandbox's, one each.
    vmms = d.qemus()
    for pid, cmd in vmms.items():
        assert any(f"airlock-{sid}" in cmd for sid in live), (pid, cmd, recs)
    for sid in live:
        assert len([c for c in vmms.values() if f"airlock-{sid}" in c]) == 1, (sid, vmms)
    # No cgroup of a sandbox that has no VMM.
    for sid, s in recs.items():
        if sid not in live:
            assert not cgroup_left(sid), (sid, s["state"], cgroup_left(sid))
    # Snapshots: a directory for every record and a record for every
    # directory; no fork's internal snapshot; the quota's sum is the list's.
    rows = db_rows(d, "SELECT id, internal, size_bytes FROM snapshots")
    assert not [r for r in rows if r[1]], rows
    snap_dir = os.path.join(d.state_dir, "snapshots")
    assert sorted(os.listdir(snap_dir)) == sorted(r[0] for r in rows), (os.listdir(snap_dir), rows)
    listed = d.api.request("GET", "/v1/snapshots").json
    listed = listed["snapshots"] if isinstance(listed, dict) else listed
    assert sum(s["size_bytes"] for s in listed) == sum(r[2] for r in rows), (listed, rows)
    # No record is still half-way (creating, stopping, snapshotting).
    assert not [s for s in recs.values() if s["state"] in ("creating", "stopping", "snapshotting")], recs
    # Every running sandbox answers.
    for sid in live:
        if recs[sid]["state"] == "running":
            assert d.api.exec_ok(sid, ["echo", "ok"])["stdout"] == "ok\n", sid
    return recs


def fork(d, sid, count):
    return lambda: d.api.request("POST", f"/v1/sandboxes/{sid}/fork", body={"count": count})


def children_of_forks(recs, before):
    return {i: s for i, s in recs.items() if i not in before}


@pytest.mark.parametrize("point", ["fork.snapshot_taken", "fork.child_made@1", "fork.children_made"])
def test_fork_cut_by_a_crash_leaves_nothing(cd, box, point):
    before = {s["id"] for s in cd.api.list(all=True)}
    guest_sh(cd.api, box, "echo parent > /tmp/who")
    cd.crash_during(point, fork(cd, box, 2))
    recs = check_invariants(cd)
    new = children_of_forks(recs, before)
    # All or nothing: every copy the fork made is deleted.
    assert all(s["state"] == "deleted" for s in new.values()), new
    assert cd.api.get(box).json["state"] == "running"
    assert guest_sh(cd.api, box, "cat /tmp/who") == "parent\n"
    # The parent's snapshots work again (its quota counts only what is listed).
    snap = snapshot(cd.api, box, "after")
    assert cd.api.request("DELETE", f"/v1/snapshots/{snap['id']}").status in (200, 204)


def test_fork_that_finished_keeps_all_its_copies(cd, box):
    before = {s["id"] for s in cd.api.list(all=True)}
    cd.crash_during("fork.finished", fork(cd, box, 2))
    recs = check_invariants(cd)
    new = children_of_forks(recs, before)
    assert len(new) == 2 and all(s["state"] == "running" for s in new.values()), new
    for sid in new:
        cd.api.delete_ok(sid)


@pytest.mark.parametrize("point", ["snapshot.written", "snapshot.published"])
def test_snapshot_cut_by_a_crash_is_rolled_back(cd, box, point):
    guest_sh(cd.api, box, "echo kept > /tmp/mark")
    cd.crash_during(point, lambda: cd.api.request("POST", f"/v1/sandboxes/{box}/snapshots", body={"name": "cut"}))
    check_invariants(cd)
    assert [s for s in cd.api.request("GET", "/v1/snapshots").json["snapshots"] if s["name"] == "cut"] == []
    assert cd.api.get(box).json["state"] == "running"
    assert guest_sh(cd.api, box, "cat /tmp/mark") == "kept\n"


def test_pause_cut_by_a_crash_keeps_the_vm(cd, box):
    guest_sh(cd.api, box, "echo alive > /tmp/mark")
    pid = [p for p, c in cd.qemus().items() if f"airlock-{box}" in c]
    cd.crash_during("pause.vmm_paused", lambda: cd.api.request("POST", f"/v1/sandboxes/{box}/pause"))
    check_invariants(cd)
    # The pause was never acknowledged: the record says running, and so does the VM, the same VM.
    assert cd.api.get(box).json["state"] == "running"
    assert vm_status(cd, box) == "running"
    assert [p for p, c in cd.qemus().items() if f"airlock-{box}" in c] == pid
    assert guest_sh(cd.api, box, "cat /tmp/mark") == "alive\n"
    assert "could not re-attach" not in cd.log(200)


def test_resume_cut_by_a_crash_stays_paused(cd, box):
    assert cd.api.request("POST", f"/v1/sandboxes/{box}/pause").status == 200
    cd.crash_during("resume.vmm_resumed", lambda: cd.api.request("POST", f"/v1/sandboxes/{box}/resume"))
    check_invariants(cd)
    assert cd.api.get(box).json["state"] == "paused"
    assert vm_status(cd, box) == "paused"
    # The VM is paused as its record says: a resume then works as usual.
    r = cd.api.request("POST", f"/v1/sandboxes/{box}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    assert cd.api.exec_ok(box, ["echo", "back"])["stdout"] == "back\n"


@pytest.mark.parametrize("point", ["delete.stopping", "delete.torn_down"])
def test_delete_cut_by_a_crash_is_finished(cd, point):
    sid = cd.api.create_ok()["id"]
    cd.crash_during(point, lambda: cd.api.delete(sid))
    recs = check_invariants(cd)
    assert recs[sid]["state"] == "deleted", recs[sid]
    assert not os.path.exists(cd.sandbox_dir(sid))


def test_create_cut_by_a_crash_never_runs_unacknowledged(cd):
    before = {s["id"] for s in cd.api.list(all=True)}
    cd.crash_during("create.inserted", lambda: cd.api.create())
    recs = check_invariants(cd)
    new = children_of_forks(recs, before)
    assert len(new) == 1 and all(s["state"] == "error" for s in new.values()), new
    for sid in new:
        cd.api.delete_ok(sid)


def test_restore_cut_by_a_crash_keeps_the_snapshot(cd, box):
    snap = snapshot(cd.api, box, "origin")
    before = {s["id"] for s in cd.api.list(all=True)}
    cd.crash_during("restore.loaded", lambda: cd.api.create(snapshot=snap["id"]))
    recs = check_invariants(cd)
    new = children_of_forks(recs, before)
    assert len(new) == 1 and all(s["state"] == "error" for s in new.values()), new
    # The snapshot is intact and restores.
    r = cd.api.create(snapshot=snap["id"])
    assert r.status == 201, r
    cd.api.delete_ok(r.json["id"])
    for sid in new:
        cd.api.delete_ok(sid)
    assert cd.api.request("DELETE", f"/v1/snapshots/{snap['id']}").status in (200, 204)


# ------------------------------------------------------------- no crash needed

def test_a_paused_sandbox_snapshots_and_forks_again_and_again(cd, box):
    guest_sh(cd.api, box, "echo before-pause > /tmp/mark")
    assert cd.api.request("POST", f"/v1/sandboxes/{box}/pause").status == 200
    snaps = [snapshot(cd.api, box, f"paused-{i}") for i in range(3)]
    r = cd.api.request("POST", f"/v1/sandboxes/{box}/fork", body={"count": 1})
    assert r.status == 201, r
    copy = r.json["sandboxes"][0]["id"]
    # Nothing ran in between: every save is the same guest state.
    assert len({s["digests"]["memory"] for s in snaps}) == 1, snaps
    assert cd.api.get(box).json["state"] == "paused"
    assert vm_status(cd, box) in ("paused", "postmigrate")
    assert guest_sh(cd.api, copy, "cat /tmp/mark") == "before-pause\n"
    restored = cd.api.create_ok(snapshot=snaps[-1]["id"])["id"]
    assert guest_sh(cd.api, restored, "cat /tmp/mark") == "before-pause\n"
    r = cd.api.request("POST", f"/v1/sandboxes/{box}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    # After running again, a pause and a snapshot save anew.
    guest_sh(cd.api, box, "echo after-resume > /tmp/mark")
    assert cd.api.request("POST", f"/v1/sandboxes/{box}/pause").status == 200
    again = snapshot(cd.api, box, "paused-again")
    assert again["digests"]["memory"] != snaps[0]["digests"]["memory"]
    assert cd.api.request("POST", f"/v1/sandboxes/{box}/resume").status == 200
    for sid in (copy, restored):
        cd.api.delete_ok(sid)
    for s in snaps + [again]:
        assert cd.api.request("DELETE", f"/v1/snapshots/{s['id']}").status in (200, 204)
    check_invariants(cd)


def test_second_daemon_on_the_same_state_dir_is_refused_without_harm(cd, box, tmp_path):
    guest_sh(cd.api, box, "echo first > /tmp/mark")
    tsnaps = sorted(os.listdir(os.path.join(cd.state_dir, "template-snapshots")))
    second = Daemon(tmp_path, state_dir=cd.state_dir, name="second")
    t0 = time.monotonic()
    proc = subprocess.run(second.argv(), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc
    assert "in use by another airlockd" in proc.stdout + proc.stderr, proc
    assert f"pid {cd.proc.pid}" in proc.stdout + proc.stderr, proc
    # Refused before it touched anything: at once, the VM alive, the template snapshots kept.
    assert time.monotonic() - t0 < 30
    assert not os.path.exists(second.socket)
    assert cd.api.get(box).json["state"] == "running"
    assert guest_sh(cd.api, box, "cat /tmp/mark") == "first\n"
    assert sorted(os.listdir(os.path.join(cd.state_dir, "template-snapshots"))) == tsnaps
    other = cd.api.create_ok()["id"]
    cd.api.delete_ok(other)
    check_invariants(cd)


def test_released_lock_lets_the_next_daemon_start(tmp_path):
    """The lock goes with the daemon, even one killed: a restart is never refused."""
    d = Daemon(tmp_path).start()
    try:
        d.proc.kill()
        d.proc.wait()
        d.start()
        assert d.api.healthz().status == 200
    finally:
        d.cleanup()


def test_only_the_daemon_holds_the_lock(cd, box):
    """VMs and the gateway outlive their daemon: none of them may hold the
    state dir's lock, or a restarted daemon would be refused."""
    lock = os.path.realpath(os.path.join(cd.state_dir, "airlockd.lock"))
    holders = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fds = os.path.join("/proc", pid, "fd")
        try:
            for fd in os.listdir(fds):
                if os.readlink(os.path.join(fds, fd)) == lock:
                    holders.add(int(pid))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    assert holders == {cd.proc.pid}, (holders, cd.proc.pid, qemu_processes(cd.state_dir))


def test_api_answers_while_a_vm_that_does_not_answer_is_reattached(cd):
    """The API opens at once after a restart; a sandbox still being
    re-attached answers 503 with Retry-After, and the others work meanwhile
    (the re-attach runs in parallel, not one sandbox at a time)."""
    slow = cd.api.create_ok()["id"]
    fine = cd.api.create_ok()["id"]
    pid = [p for p, c in cd.qemus().items() if f"airlock-{slow}" in c]
    assert len(pid) == 1, cd.qemus()
    os.kill(pid[0], signal.SIGSTOP)  # its re-attach waits for it (up to 10 s)
    try:
        cd.proc.kill()
        cd.proc.wait()
        cd.start(wait_reattach=False)
        health = cd.api.healthz().json
        assert health["reattaching"] >= 1, health
        r = cd.api.exec(slow, ["true"])
        assert r.status == 503 and r.json["error"]["code"] == "unavailable", r
        assert "re-attaching" in r.json["error"]["message"], r
        assert int(r.headers.get("Retry-After") or r.headers.get("retry-after")) >= 1, r.headers
        # The healthy one is back while the other one still waits.
        wait_for(lambda: cd.api.exec(fine, ["true"]).status == 200, WAIT_S, f"{fine} to answer")
        assert cd.api.healthz().json["reattaching"] >= 1
    finally:
        os.kill(pid[0], signal.SIGCONT)
    reattached(cd)
    # Woken within its deadline it is re-attached; else it ended in error (never left half-way).
    assert cd.api.get(slow).json["state"] in ("running", "error"), cd.api.get(slow).json
    check_invariants(cd)
    for sid in (slow, fine):
        cd.api.delete_ok(sid)
