# SPDX-License-Identifier: Apache-2.0
"""Sandbox lifecycle: delete leaves nothing behind, records survive a
restart of the daemon."""
import os
import threading
import time

from conftest import Daemon, kill_pids, pid_alive, qemu_processes, wait_for, zombie_children


def test_rm_leaves_no_process_socket_or_file(daemon, api):
    sb = api.create_ok()
    sid = sb["id"]
    sdir = daemon.sandbox_dir(sid)
    assert os.path.isdir(sdir), f"{sdir} should exist while the sandbox runs"
    pids = [p for p, c in daemon.qemus().items() if sid in c]
    assert len(pids) == 1, daemon.qemus()
    pid = pids[0]
    assert api.exec_ok(sid, ["echo", "x"])["stdout"] == "x\n"

    deleted = api.delete_ok(sid)
    assert deleted["id"] == sid

    # No process: the VMM is gone (and reaped, not a zombie of the daemon).
    assert not pid_alive(pid), f"QEMU {pid} of {sid} still runs after DELETE"
    assert not qemu_processes(needle=sid), qemu_processes(needle=sid)
    assert zombie_children(daemon.proc.pid) == []
    # No socket or file: the whole sandbox dir is gone.
    assert not os.path.exists(sdir), (sdir, os.listdir(sdir) if os.path.isdir(sdir) else None)
    # The record stays, as deleted.
    r = api.get(sid)
    assert r.status == 200 and r.json["state"] == "deleted", r
    assert sid not in [s["id"] for s in api.list()]
    assert sid in [s["id"] for s in api.list(all=True)]


def test_list_is_newest_first(api):
    a = api.create_ok()
    b = api.create_ok()
    try:
        ids = [s["id"] for s in api.list()]
        assert ids.index(b["id"]) < ids.index(a["id"]), ids
    finally:
        api.delete(a["id"])
        api.delete(b["id"])


def test_daemon_exits_cleanly_on_sigterm(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        assert d.stop() == 0, d.log()
    finally:
        d.cleanup()


def test_records_survive_a_restart(restart_daemon):
    d = restart_daemon
    api = d.api
    kept = api.create_ok(metadata={"role": "kept"}, env={"K": "v"})
    gone = api.create_ok()
    api.delete_ok(gone["id"])
    before = {s["id"]: s for s in api.list(all=True)}

    assert d.stop() == 0, d.log()
    d.start()

    r = api.get(kept["id"])
    assert r.status == 200, r
    assert r.json["metadata"] == {"role": "kept"} and r.json["env"] == {"K": "v"}
    assert r.json["template"] == "minimal" and r.json["created_at"] == kept["created_at"]
    # Re-attached to its VM, or marked error if that VM is gone: never lost, never "creating".
    assert r.json["state"] in ("running", "error"), r

    r = api.get(gone["id"])
    assert r.status == 200 and r.json["state"] == "deleted", r
    assert gone["id"] not in [s["id"] for s in api.list()]
    after = {s["id"]: s for s in api.list(all=True)}
    assert set(after) == set(before)
    assert not os.path.exists(d.sandbox_dir(gone["id"]))


def test_running_sandbox_is_reattached_after_restart(restart_daemon):
    d = restart_daemon
    api = d.api
    sb = api.create_ok()
    api.exec_ok(sb["id"], ["sh", "-c", "echo before-restart > /tmp/mark"])
    pids = [p for p, c in d.qemus().items() if sb["id"] in c]
    assert len(pids) == 1

    assert d.stop() == 0, d.log()
    # The VM keeps running while the daemon is away.
    assert pid_alive(pids[0])
    d.start()

    r = api.get(sb["id"])
    assert r.status == 200 and r.json["state"] == "running", r
    res = api.exec_ok(sb["id"], ["cat", "/tmp/mark"])
    assert res["stdout"] == "before-restart\n", res
    api.delete_ok(sb["id"])
    wait_for(lambda: not pid_alive(pids[0]), 30, "the re-attached VM to end after DELETE")


def test_template_build_left_by_a_crashed_daemon_is_killed(restart_daemon):
    """The first create from a template boots it once to snapshot it. If
    airlockd dies meanwhile, that VMM (its jail, its cgroup) must not outlive
    it: the next airlockd kills it at start-up, and builds anew."""
    d = restart_daemon
    def create():  # its connection dies with the daemon
        try:
            d.api.create()
        except OSError:
            pass

    creator = threading.Thread(target=create)
    creator.start()
    builds = wait_for(lambda: [p for p, c in d.qemus().items() if "airlock-tpl-" in c], 60,
                      "the template build's VMM")
    time.sleep(1.5)  # past the jailer's set-up (a jailer whose parent dies during it exits)
    d.proc.kill()
    d.proc.wait()
    creator.join(30)
    time.sleep(1)
    assert all(pid_alive(p) for p in builds), "the build VMM went with the daemon: nothing to test"
    d.start()
    wait_for(lambda: not any(pid_alive(p) for p in builds), 30, "the build VMM a crashed airlockd left to be killed")
    assert "killing the template build VMM" in d.log(tail_lines=2000)
    # The template still works: it is built again.
    sb = d.api.create_ok()
    assert d.api.exec_ok(sb["id"], ["echo", "ok"])["stdout"] == "ok\n"
    d.api.delete_ok(sb["id"])


def test_vm_that_died_while_daemon_was_away_is_error(restart_daemon):
    d = restart_daemon
    api = d.api
    sb = api.create_ok()
    pids = [p for p, c in d.qemus().items() if sb["id"] in c]
    assert len(pids) == 1
    assert d.stop() == 0, d.log()
    kill_pids(pids)
    wait_for(lambda: not pid_alive(pids[0]), 30, "the killed VM to go away")
    d.start()
    r = api.get(sb["id"])
    assert r.status == 200 and r.json["state"] == "error", r
    assert r.json["error"], r
    r = api.exec(sb["id"], ["true"])
    assert r.status == 409, r
    api.delete_ok(sb["id"])
    assert not os.path.exists(d.sandbox_dir(sb["id"]))
