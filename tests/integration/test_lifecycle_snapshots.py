# SPDX-License-Identifier: Apache-2.0
"""The session lifecycle on real VMs: pause/resume, snapshots, restores,
forks, recover, timeouts, and a daemon killed in the middle of all that.

One daemon for the module (also listening on TCP, for the tenant checks) and
one sandbox, `origin`, that runs a counter in the background; most tests
snapshot, restore or fork it. Template minimal, 1 vCPU, 256 MiB. The only
timing bound is the documented 2 s clock tolerance of a restored guest;
every wait only bounds a hang."""
import json
import os
import random
import re
import signal
import threading
import time

import pytest

from apiutil import ListeningDaemon, TcpApi, free_port
from conftest import Daemon, pid_alive, qemu_processes, vmm_dir, wait_for
from lifecycleutil import (WAIT_S, file_digests, flip_byte, guest_sh, ids_in, read_counter, restore,
                           snapshot, snapshot_dir, start_counter, state, vmm_pid, wait_counter_above,
                           wait_state)

SNAP_ID = re.compile(r"^snap-[0-9a-f]{16}$")
SB_ID = re.compile(r"^sb-[0-9a-f]{16}$")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """Overrides conftest's: the same daemon, also on TCP with tokens."""
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-lifecycle"), free_port()).start()
    yield d
    if d.proc is not None and d.proc.poll() is None:
        try:  # snapshots are large: leave none behind
            for s in d.api.request("GET", "/v1/snapshots").json["snapshots"]:
                d.api.request("DELETE", f"/v1/snapshots/{s['id']}")
        except Exception:
            pass
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left after the module: {leftovers}; log:\n{d.log()}"


class Origin:
    """The module's long-lived sandbox, with a counter, a snapshot, and a file
    written before and one after the snapshot."""


@pytest.fixture(scope="module")
def origin(daemon):
    api = daemon.api
    o = Origin()
    o.id = api.create_ok(template="minimal", vcpus=1, memory_mib=256)["id"]
    start_counter(api, o.id)
    guest_sh(api, o.id, "echo before > /root/before.txt && sync")
    o.before = read_counter(api, o.id)
    o.snap = snapshot(api, o.id, "origin-1")
    o.after = read_counter(api, o.id)
    guest_sh(api, o.id, "echo after > /root/after.txt && sync")
    yield o
    api.delete(o.id)


# ------------------------------------------------------------------ pause and snapshots

def test_counter_keeps_counting_across_pause_resume(api, origin):
    v = read_counter(api, origin.id)
    r = api.request("POST", f"/v1/sandboxes/{origin.id}/pause")
    assert r.status == 200 and r.json["state"] == "paused", r
    r = api.exec(origin.id, ["cat", "/tmp/count"])
    assert r.status == 409 and "resume" in r.error_message, r
    r = api.request("POST", f"/v1/sandboxes/{origin.id}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    assert read_counter(api, origin.id) >= v
    wait_counter_above(api, origin.id, read_counter(api, origin.id))
    procs = api.request("GET", f"/v1/sandboxes/{origin.id}/processes").json["processes"]
    assert [p["state"] for p in procs if p["tag"] == "counter"] == ["running"], procs


def test_snapshot_object(api, daemon, origin):
    s = origin.snap
    assert SNAP_ID.match(s["id"]), s
    assert (s["name"], s["sandbox_id"], s["tenant"], s["template"]) == ("origin-1", origin.id, "default", "minimal")
    assert (s["vcpus"], s["memory_mib"], s["backend"], s["generation"]) == (1, 256, "qemu", 0)
    assert s["size_bytes"] > 0 and set(s["digests"]) == {"memory", "disk", "kernel", "initramfs"}
    assert api.request("GET", f"/v1/snapshots/{s['id']}").json == s
    listed = api.request("GET", f"/v1/snapshots?sandbox={origin.id}").json["snapshots"]
    assert s["id"] in [x["id"] for x in listed]
    assert api.request("GET", "/v1/snapshots?sandbox=sb-0000000000000000").json["snapshots"] == []
    files = file_digests(snapshot_dir(daemon, s["id"]))
    assert files["memory.bin"] == s["digests"]["memory"] and files["disk.qcow2"] == s["digests"]["disk"], files
    # The snapshot leaves the sandbox as it was: running, counting.
    assert state(api, origin.id) == "running"
    assert origin.after >= origin.before


def test_two_restores_continue_from_the_snapshot(api, daemon, origin):
    snap = origin.snap
    sdir = snapshot_dir(daemon, snap["id"])
    digests_before = file_digests(sdir)
    # Let the original run well past the snapshot's value first.
    wait_counter_above(api, origin.id, origin.after + 30)
    restored = []
    for _ in range(2):
        sb = restore(api, snap["id"])
        sid = sb["id"]
        restored.append(sid)
        assert SB_ID.match(sid) and sid != origin.id, sb
        assert (sb["template"], sb["vcpus"], sb["memory_mib"]) == ("minimal", 1, 256), sb
        value = read_counter(api, sid)
        original_now = read_counter(api, origin.id)
        assert origin.before <= value < original_now, (
            f"restore {sid} reads {value}: should start at the snapshot's value (>= {origin.before}) and be "
            f"behind the original ({original_now})")
        wait_counter_above(api, sid, value, f"the restored counter of {sid} to go on")
        # Files: synced before the snapshot are there, written after are not.
        assert guest_sh(api, sid, "cat /root/before.txt") == "before\n"
        assert guest_sh(api, sid, "test -e /root/after.txt && echo yes || echo no") == "no\n"
        # Who it is now.
        assert guest_sh(api, sid, "cat /run/airlock/generation").strip() == str(snap["generation"] + 1)
        assert guest_sh(api, sid, "cat /run/airlock/sandbox_id").strip() == sid
    assert restored[0] != restored[1]
    # The original is untouched by its restores and still has its later file.
    assert guest_sh(api, origin.id, "cat /root/after.txt") == "after\n"
    # A restore reads the snapshot and never changes it.
    assert file_digests(sdir) == digests_before
    assert digests_before["memory.bin"] == snap["digests"]["memory"]
    assert digests_before["disk.qcow2"] == snap["digests"]["disk"]
    for sid in restored:
        api.delete_ok(sid)


def test_forks_are_unique(api, daemon, origin):
    snaps_before = ids_in(daemon, "snapshots")
    r = api.request("POST", f"/v1/sandboxes/{origin.id}/fork", body={"count": 2})
    assert r.status == 201, r
    forks = r.json["sandboxes"]
    assert len(forks) == 2 and all(f["state"] == "running" for f in forks), r
    seen = {}
    for f in forks:
        sid = f["id"]
        t0 = time.time()
        out = guest_sh(api, sid, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; date +%s; hostname; "
                                 "cat /run/airlock/sandbox_id /run/airlock/generation").split("\n")
        t1 = time.time()
        rnd, guest_time, hostname, sandbox_id, generation = out[:5]
        assert t0 - 2 <= int(guest_time) <= t1 + 2, f"fork {sid}: guest clock {guest_time}, host {t0:.0f}..{t1:.0f}"
        assert (hostname, sandbox_id, generation) == (sid, sid, "1"), out
        seen[sid] = rnd
        # The parent's processes go on in the copy.
        wait_counter_above(api, sid, read_counter(api, sid))
    assert len(set(seen.values())) == 2, f"two forks read the same random bytes: {seen}"
    # The parent goes on, and the fork's own snapshot is gone.
    assert state(api, origin.id) == "running"
    assert ids_in(daemon, "snapshots") == snaps_before
    listed = api.request("GET", f"/v1/snapshots?sandbox={origin.id}").json["snapshots"]
    assert not [s for s in listed if s["name"].startswith("fork of")], listed
    for f in forks:
        api.delete_ok(f["id"])
    # Bad counts change nothing.
    for body in ({"count": 0}, {"count": 17}, {"count": "2"}, {"copies": 2}):
        r = api.request("POST", f"/v1/sandboxes/{origin.id}/fork", body=body)
        assert r.status == 400 and r.error_code == "invalid_argument", r
    assert api.request("POST", "/v1/sandboxes/sb-0000000000000000/fork", body={"count": 1}).status == 404


def test_snapshot_of_a_paused_sandbox(api, daemon, origin):
    r = api.request("POST", f"/v1/sandboxes/{origin.id}/pause")
    assert r.status == 200, r
    snap = snapshot(api, origin.id, "while paused")
    assert state(api, origin.id) == "paused", "a snapshot must leave a paused sandbox paused"
    r = api.request("POST", f"/v1/sandboxes/{origin.id}/resume")
    assert r.status == 200, r
    wait_counter_above(api, origin.id, read_counter(api, origin.id))
    # Deleting a snapshot removes its files; it is gone for good.
    assert os.path.isdir(snapshot_dir(daemon, snap["id"]))
    assert api.request("DELETE", f"/v1/snapshots/{snap['id']}").status == 204
    assert not os.path.exists(snapshot_dir(daemon, snap["id"]))
    for method in ("GET", "DELETE"):
        r = api.request(method, f"/v1/snapshots/{snap['id']}")
        assert r.status == 404 and r.error_code == "not_found", r


def test_snapshot_of_a_deleted_or_unknown_sandbox(api):
    gone = [s["id"] for s in api.list(all=True) if s["state"] == "deleted"]
    if not gone:
        sid = api.create_ok()["id"]
        api.delete_ok(sid)
        gone = [sid]
    r = api.request("POST", f"/v1/sandboxes/{gone[0]}/snapshots", body={"name": "x"})
    assert r.status == 409 and r.error_code == "conflict", r
    r = api.request("POST", "/v1/sandboxes/sb-0000000000000000/snapshots", body={"name": "x"})
    assert r.status == 404, r


def test_snapshot_bad_bodies(api, origin):
    for body in ({"name": ""}, {"name": "x" * 65}, {"name": 3}, {"name": "a\nb"}, {"name": "x", "extra": 1}):
        r = api.request("POST", f"/v1/sandboxes/{origin.id}/snapshots", body=body)
        assert r.status == 400 and r.error_code == "invalid_argument", (body, r)


def test_snapshot_quota(api, origin):
    r = api.request("PUT", "/v1/tenants/default", body={"max_snapshot_mib": 1})
    assert r.status == 200, r
    try:
        r = api.request("POST", f"/v1/sandboxes/{origin.id}/snapshots", body={"name": "over"})
        assert r.status == 429 and r.error_code == "quota_exceeded", r
    finally:
        assert api.request("PUT", "/v1/tenants/default", body={"max_snapshot_mib": 0}).status == 200
    assert state(api, origin.id) == "running"


# ------------------------------------------------------------------ restore refusals

def test_restore_of_an_unknown_snapshot(api):
    n = len(api.list(all=True))
    r = api.create(snapshot="snap-0000000000000000")
    assert r.status == 404 and r.error_code == "not_found", r
    r = api.create(snapshot="not-a-snapshot")
    assert r.status == 400 and r.error_code == "invalid_argument", r
    assert len(api.list(all=True)) == n


def test_restore_of_a_tampered_snapshot_is_refused(api, daemon, origin):
    snap = snapshot(api, origin.id, "to tamper with")
    flip_byte(os.path.join(snapshot_dir(daemon, snap["id"]), "memory.bin"))
    records = len(api.list(all=True))
    vmms = set(daemon.qemus())
    r = api.create(snapshot=snap["id"])
    assert r.status == 409 and r.error_code == "conflict", r
    assert "digest" in r.error_message and "memory.bin" in r.error_message, r
    assert len(api.list(all=True)) == records, "a refused restore must leave no sandbox record"
    assert set(daemon.qemus()) == vmms, "a refused restore must start no VMM"
    assert api.request("DELETE", f"/v1/snapshots/{snap['id']}").status == 204


def test_another_tenants_snapshot_is_not_found(api, daemon, origin):
    r = api.request("POST", "/v1/tokens", body={"tenant": "a", "description": "lifecycle test"})
    assert r.status == 201, r
    a = TcpApi(daemon.port, r.json["token"])
    snap = origin.snap["id"]
    n = len(api.list(all=True))
    r = a.request("POST", "/v1/sandboxes", body={"snapshot": snap})
    assert r.status == 404 and r.error_code == "not_found", r
    for method, path in (("GET", f"/v1/snapshots/{snap}"), ("DELETE", f"/v1/snapshots/{snap}")):
        r = a.request(method, path)
        assert r.status == 404, r
    assert a.request("GET", "/v1/snapshots").json["snapshots"] == []
    for path, body in ((f"/v1/sandboxes/{origin.id}/snapshots", {"name": "x"}),
                       (f"/v1/sandboxes/{origin.id}/fork", {"count": 1}),
                       (f"/v1/sandboxes/{origin.id}/recover", {}),
                       (f"/v1/sandboxes/{origin.id}/timeout", {"timeout_s": 1})):
        r = a.request("POST", path, body=body)
        assert r.status == 404, r
    assert len(api.list(all=True)) == n
    assert api.request("GET", f"/v1/snapshots/{snap}").status == 200
    assert state(api, origin.id) == "running" and api.get(origin.id).json["timeout_s"] == 0


# ------------------------------------------------------------------ the CLI

def test_cli_lifecycle_verbs(cli, api, origin):
    r = cli("snapshot", origin.id, "from the cli")
    assert r.returncode == 0, r
    snap = r.stdout.decode().strip()
    assert SNAP_ID.match(snap), r
    r = cli("snapshots")
    assert r.returncode == 0 and snap in r.stdout.decode() and "from the cli" in r.stdout.decode(), r
    r = cli("snapshots", "ls", "--sandbox", origin.id, "--json")
    assert r.returncode == 0, r
    assert snap in [s["id"] for s in json.loads(r.stdout)]
    r = cli("snapshots", "inspect", snap, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["name"] == "from the cli", r

    r = cli("restore", snap)
    assert r.returncode == 0, r
    restored = r.stdout.decode().strip()
    assert SB_ID.match(restored) and state(api, restored) == "running", r
    r = cli("fork", restored, "-n", "1")
    assert r.returncode == 0, r
    forks = r.stdout.decode().split()
    assert len(forks) == 1 and SB_ID.match(forks[0]) and state(api, forks[0]) == "running", r

    r = cli("timeout", restored, "600", "--on-timeout", "pause", "--idle", "300")
    assert r.returncode == 0 and restored in r.stdout.decode(), r
    sb = api.get(restored).json
    assert (sb["timeout_s"], sb["on_timeout"], sb["idle_timeout_s"]) == (600, "pause", 300), sb
    r = cli("timeout", restored, "0", "--idle", "0", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["timeout_s"] == 0, r

    r = cli("recover", restored)
    assert r.returncode == 125 and b"only a sandbox in state error" in r.stderr, r

    # Error exits: 125 for what the daemon refuses, 2 for usage.
    for args, code, text in (
            (("snapshot", "sb-0000000000000000", "x"), 125, b"no sandbox"),
            (("restore", "snap-0000000000000000"), 125, b"no snapshot"),
            (("snapshots", "rm", "snap-0000000000000000"), 125, b"no snapshot"),
            (("snapshots", "inspect", "snap-0000000000000000"), 125, b"no snapshot"),
            (("recover", "sb-0000000000000000"), 125, b"no sandbox"),
            (("fork", "sb-0000000000000000"), 125, b"no sandbox"),
            (("timeout", "sb-0000000000000000", "5"), 125, b"no sandbox"),
            (("restore",), 2, b"usage"),
            (("snapshot",), 2, b"usage"),
            (("fork", restored, "-n", "17"), 2, b"1 to 16"),
            (("timeout", restored, "soon"), 2, b"seconds"),
            (("timeout", restored, "5", "--on-timeout", "explode"), 2, b"kill or pause"),
            (("snapshots", "frob"), 2, b"unknown subcommand"),
            (("recover",), 2, b"usage")):
        r = cli(*args)
        assert r.returncode == code and text in r.stderr.lower(), (args, r)
    sb = api.get(restored).json
    assert sb["timeout_s"] == 0 and sb["state"] == "running", "a refused command must change nothing"

    r = cli("snapshots", "rm", snap)
    assert r.returncode == 0 and r.stdout.decode().strip() == snap, r
    assert api.request("GET", f"/v1/snapshots/{snap}").status == 404
    assert cli("rm", restored, forks[0]).returncode == 0


# ------------------------------------------------------------------ a VMM killed from outside

def test_killed_vmm_then_recover(api, cli, daemon, origin):
    # A fresh snapshot: recover takes the latest one.
    before = read_counter(api, origin.id)
    snap = snapshot(api, origin.id, "before the crash")
    after = read_counter(api, origin.id)
    last = wait_counter_above(api, origin.id, after + 50)
    os.kill(vmm_pid(origin.id), signal.SIGKILL)
    sb = wait_state(api, origin.id, "error")
    assert sb["error"] and "exited unexpectedly" in sb["error"], sb
    r = api.exec(origin.id, ["true"])
    assert r.status == 409, r

    r = api.request("POST", f"/v1/sandboxes/{origin.id}/recover", body={"memory": "yes"})
    assert r.status == 400, r
    r = api.request("POST", f"/v1/sandboxes/{origin.id}/recover", body={})
    assert r.status == 200 and r.json["state"] == "running" and r.json["error"] is None, r
    assert r.json["id"] == origin.id
    value = read_counter(api, origin.id)
    assert before <= value <= last, (
        f"recovered from {snap['id']}: the counter reads {value}, should be the snapshot's (>= {before}), "
        f"behind what the dead VM had reached ({last})")
    wait_counter_above(api, origin.id, value, "the recovered counter to go on")
    assert guest_sh(api, origin.id, "cat /run/airlock/generation").strip() == str(snap["generation"] + 1)
    # Recovering a running sandbox is a conflict.
    r = api.request("POST", f"/v1/sandboxes/{origin.id}/recover", body={})
    assert r.status == 409, r
    assert api.request("POST", "/v1/sandboxes/sb-0000000000000000/recover", body={}).status == 404

    # Without memory: a cold boot of its disk, which keeps what was synced.
    guest_sh(api, origin.id, "echo kept > /root/synced.txt && sync")
    os.kill(vmm_pid(origin.id), signal.SIGKILL)
    wait_state(api, origin.id, "error")
    r = cli("recover", origin.id, "--no-memory")
    assert r.returncode == 0 and r.stdout.decode().strip() == origin.id, r
    assert state(api, origin.id) == "running"
    assert guest_sh(api, origin.id, "cat /root/synced.txt") == "kept\n"
    # A fresh boot: no counter running, a new uptime.
    running = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '[m]v /tmp/c.tmp' || true"
    assert guest_sh(api, origin.id, running).strip() == "0"
    assert api.request("DELETE", f"/v1/snapshots/{snap['id']}").status == 204


# ------------------------------------------------------------------ timeouts

def events(api, sid, prefix):
    r = api.request("GET", f"/v1/events?sandbox={sid}&type={prefix}")
    assert r.status == 200, r
    return [json.loads(line) for line in r.raw.decode().splitlines() if line.strip()]


def test_timeouts(api):
    sb = api.create_ok(timeout_s=4, on_timeout="pause")
    sid = sb["id"]
    assert (sb["timeout_s"], sb["on_timeout"], sb["idle_timeout_s"]) == (4, "pause", 0), sb
    # Paused time does not count: pause at once for longer than the timeout.
    r = api.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200, r
    time.sleep(6)
    r = api.request("POST", f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    assert r.json["running_ms"] < 4000, r
    assert state(api, sid) == "running"
    # Then the running time runs out: on_timeout pause.
    wait_state(api, sid, "paused")
    ev = events(api, sid, "sandbox.timeout")
    assert [(e["data"]["reason"], e["data"]["action"]) for e in ev] == [("timeout", "pause")], ev
    r = api.request("POST", f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    api.exec_ok(sid, ["true"])

    # Updates: no timeout, but an idle timeout pauses an untouched sandbox.
    r = api.request("POST", f"/v1/sandboxes/{sid}/timeout", body={"timeout_s": 0, "idle_timeout_s": 3})
    assert r.status == 200 and (r.json["timeout_s"], r.json["idle_timeout_s"]) == (0, 3), r
    wait_state(api, sid, "paused")
    ev = events(api, sid, "sandbox.timeout")
    assert ev[-1]["data"] == {"reason": "idle_timeout", "action": "pause"}, ev

    # Bad input changes nothing.
    for body in ({"on_timeout": "explode"}, {"timeout_s": -1}, {"timeout_s": "5"}, {"idle_timeout_s": 10**9},
                 {"deadline": 5}):
        r = api.request("POST", f"/v1/sandboxes/{sid}/timeout", body=body)
        assert r.status == 400 and r.error_code == "invalid_argument", (body, r)
    assert api.request("POST", "/v1/sandboxes/sb-0000000000000000/timeout", body={"timeout_s": 1}).status == 404

    # on_timeout kill: the sandbox is deleted once its running time is used up.
    r = api.request("POST", f"/v1/sandboxes/{sid}/timeout",
                    body={"timeout_s": 2, "on_timeout": "kill", "idle_timeout_s": 0})
    assert r.status == 200 and (r.json["timeout_s"], r.json["on_timeout"], r.json["idle_timeout_s"]) == \
        (2, "kill", 0), r
    assert state(api, sid) == "paused", "a paused sandbox stays paused; its timeout waits"
    assert api.request("POST", f"/v1/sandboxes/{sid}/resume").status == 200
    wait_state(api, sid, "deleted")
    ev = events(api, sid, "sandbox.timeout")
    assert ev[-1]["data"] == {"reason": "timeout", "action": "kill"}, ev
    assert not qemu_processes(needle=f"airlock-{sid}")
    r = api.request("POST", f"/v1/sandboxes/{sid}/timeout", body={"timeout_s": 5})
    assert r.status == 409, r


def test_resume_after_an_idle_pause_restarts_the_idle_clock(api):
    idle = 4
    sid = api.create_ok(idle_timeout_s=idle)["id"]
    try:
        wait_state(api, sid, "paused")
        t0 = time.monotonic()
        r = api.request("POST", f"/v1/sandboxes/{sid}/resume")
        assert r.status == 200, r
        wait_state(api, sid, "paused")
        elapsed = time.monotonic() - t0
        # A lower bound only: the reaper looks once a second, so never earlier than idle - 1 s.
        assert elapsed >= idle - 1, f"paused again {elapsed:.1f} s after the resume (idle_timeout_s={idle})"
    finally:
        api.delete(sid)


# ------------------------------------------------------------------ kill -9 of airlockd

def test_daemon_killed_during_a_lifecycle_loop(tmp_path):
    d = Daemon(tmp_path, name="crash").start()
    try:
        _crash_and_check(d)
    finally:
        leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


def qemu_owner(pid):
    """The sandbox dir a VMM runs in ('' once it is gone): the parent of
    its vm/ directory (the jail's root)."""
    d = vmm_dir(pid)
    return os.path.dirname(d) if os.path.basename(d) == "vm" else d


def _crash_and_check(d):
    api = d.api
    ready = {}

    def make(name, pause):
        sid = api.create_ok()["id"]
        if pause:
            assert api.request("POST", f"/v1/sandboxes/{sid}/pause").status == 200
        ready[name] = sid

    stop = threading.Event()

    def loop():
        for _ in range(6):
            if stop.is_set():
                return
            try:
                r = api.create(template="minimal", vcpus=1, memory_mib=256)
                if r.status != 201:
                    return
                sid = r.json["id"]
                api.request("POST", f"/v1/sandboxes/{sid}/pause")
                api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "loop"})
                api.request("POST", f"/v1/sandboxes/{sid}/resume")
                api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "loop-running"})
                api.delete(sid)
            except OSError:
                return  # the daemon is gone

    makers = [threading.Thread(target=make, args=("keeper", False)), threading.Thread(target=make, args=("paused", True))]
    loops = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for t in makers + loops:
        t.start()
    for t in makers:
        t.join(WAIT_S)
    keeper, paused = ready["keeper"], ready["paused"]
    # Kill it while the loops create, pause, resume or delete. A kill in the
    # middle of a snapshot is test_daemon_killed_during_a_snapshot's (a daemon
    # bug makes it fail for now): wait for a moment without one.
    wait_for(lambda: len(api.list(all=True)) >= 5, WAIT_S, "the loops to get going")
    time.sleep(random.uniform(0, 3))
    wait_for(lambda: not [s for s in api.list() if s["state"] == "snapshotting"], WAIT_S,
             "a moment without a snapshot under way")
    states_at_kill = {s["id"]: s["state"] for s in api.list(all=True)}
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    stop.set()
    for t in loops:
        t.join(WAIT_S)
    vmms_while_down = qemu_processes(d.state_dir)

    d.start()
    records = api.list(all=True)
    by_id = {s["id"]: s for s in records}
    problems = []
    for s in records:
        if s["state"] not in ("running", "paused", "deleted", "error"):
            problems.append(f"{s['id']} is stuck in {s['state']}")
        if s["state"] == "error" and not s["error"]:
            problems.append(f"{s['id']} is in state error without a reason")
    assert not problems, f"{problems} (states at the kill: {states_at_kill}); log:\n{d.log()}"
    assert by_id[keeper]["state"] == "running" and by_id[paused]["state"] == "paused", (by_id[keeper], by_id[paused])
    for s in records:
        if s["state"] == "running":
            r = api.request("POST", f"/v1/sandboxes/{s['id']}/exec", body={"cmd": ["echo", "alive"]}, timeout=60)
            assert r.status == 200 and r.json["stdout"] == "alive\n", (s["id"], r)
    # Every VMM belongs to a live sandbox; no VMM of a deleted one survives
    # (the restart kills those: wait for them to be gone).
    def strays():
        out = {}
        for pid in set(vmms_while_down) | set(d.qemus()):
            owner = os.path.basename(qemu_owner(pid))
            if pid_alive(pid) and by_id.get(owner, {}).get("state") not in ("running", "paused"):
                out[pid] = (owner, by_id.get(owner, {}).get("state"))
        return out
    wait_for(lambda: not strays(), 30, "VMMs of sandboxes that are not live to be gone")
    # Nothing half-written, nothing without an owner.
    snaps_on_disk = ids_in(d, "snapshots")
    assert not [n for n in snaps_on_disk if n.endswith(".tmp")], snaps_on_disk
    listed = {s["id"] for s in api.request("GET", "/v1/snapshots").json["snapshots"]}
    assert set(snaps_on_disk) == listed, f"snapshot dirs {snaps_on_disk} vs records {sorted(listed)}"
    for name in ids_in(d, "sandboxes"):
        assert by_id.get(name, {}).get("state") not in (None, "deleted"), f"sandboxes/{name} has no live record"
    # The paused one resumes with its processes.
    assert api.request("POST", f"/v1/sandboxes/{paused}/resume").status == 200
    api.exec_ok(paused, ["true"])
    for s in listed:
        assert api.request("DELETE", f"/v1/snapshots/{s}").status == 204


def test_daemon_killed_during_a_snapshot(tmp_path):
    d = Daemon(tmp_path, name="snapcrash").start()
    try:
        api = d.api
        ids = {}

        def make(kind):
            sid = api.create_ok()["id"]
            if kind == "paused":
                assert api.request("POST", f"/v1/sandboxes/{sid}/pause").status == 200
            ids[kind] = sid

        makers = [threading.Thread(target=make, args=(k,)) for k in ("running", "paused")]
        for t in makers:
            t.start()
        for t in makers:
            t.join(WAIT_S)
        for sid in ids.values():
            threading.Thread(target=lambda i=sid: _ignore_os_errors(
                api.request, "POST", f"/v1/sandboxes/{i}/snapshots", body={"name": "cut short"}), daemon=True).start()
        # A running sandbox shows "snapshotting"; a paused one stays "paused" while it is
        # saved, so its save is seen by its half-written snapshot directory.
        wait_for(lambda: api.get(ids["running"]).json["state"] == "snapshotting"
                 and len([n for n in ids_in(d, "snapshots") if n.endswith(".tmp")]) == 2, WAIT_S,
                 "both snapshots to be under way")
        time.sleep(0.3)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        d.start()
        assert not [n for n in ids_in(d, "snapshots") if n.endswith(".tmp")]
        assert api.request("GET", "/v1/snapshots").json["snapshots"] == []
        # Rolled back: each sandbox is as it was before its snapshot.
        assert state(api, ids["paused"]) == "paused", "a sandbox paused before the snapshot must stay paused"
        assert state(api, ids["running"]) == "running"
        time.sleep(5)  # long enough for a save that was left running in QEMU to end
        for sid in ids.values():
            r = api.request("POST", f"/v1/sandboxes/{sid}/exec?resume=true", body={"cmd": ["echo", "alive"]},
                            timeout=60)
            assert r.status == 200 and r.json["stdout"] == "alive\n", (sid, r)
    finally:
        leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


def _ignore_os_errors(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError:
        pass


def test_disk_full_during_a_snapshot(tmp_path):
    """A state dir too small for the memory file: the snapshot fails with a clear
    error, the sandbox keeps running, and nothing half-written stays or is listed."""
    import subprocess
    small = tmp_path / "small"
    small.mkdir()
    # 48 MiB: room for the store, the sandbox's overlay and logs, not for ~90 MiB of memory.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(small)], check=True)
    d = None
    try:
        d = Daemon(tmp_path, state_dir=str(small / "state"), name="diskfull").start()
        api = d.api
        sid = api.create_ok()["id"]
        r = api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "too big"})
        assert r.status >= 500, r
        assert "full" in r.json["error"]["message"] or "space" in r.json["error"]["message"].lower(), r
        assert api.get(sid).json["state"] == "running"
        out = api.exec_ok(sid, ["echo", "still here"])
        assert out["stdout"] == "still here\n"
        assert api.request("GET", "/v1/snapshots").json["snapshots"] == []
        assert not ids_in(d, "snapshots"), ids_in(d, "snapshots")
        api.delete_ok(sid)
    finally:
        if d is not None:
            leftovers = d.cleanup()
        subprocess.run(["umount", "-l", str(small)], check=False)
    assert not leftovers, f"QEMU processes left: {leftovers}"
