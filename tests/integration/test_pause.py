"""Pause and resume: a frozen sandbox keeps its memory and its processes,
uses no CPU, refuses work unless asked to resume, and survives a daemon
restart still paused."""
import time

from conftest import qemu_processes, wait_for

COUNTER = "i=0; while true; do i=$((i+1)); echo $i > /tmp/c.tmp; mv /tmp/c.tmp /tmp/count; sleep 0.1; done"


def count(api, sid, **kw):
    r = api.request("POST", f"/v1/sandboxes/{sid}/exec" + kw.get("query", ""),
                    body={"cmd": ["cat", "/tmp/count"]})
    return r


def qemu_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def test_pause_resume_keeps_processes_running(daemon, api, cli):
    sb = api.create_ok()
    sid = sb["id"]
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["sh", "-c", COUNTER]})
    assert r.status == 201, r
    wait_for(lambda: count(api, sid).status == 200 and count(api, sid).json["stdout"].strip() != "", 20,
             "the counter to start")

    r = api.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200 and r.json["state"] == "paused", r
    assert api.get(sid).json["state"] == "paused"

    # Work on a paused sandbox is refused with a message that says what to do.
    r = count(api, sid)
    assert r.status == 409, r
    assert "resume" in r.json["error"]["message"]

    # Frozen: the counter does not move and QEMU burns (almost) no CPU.
    pids = list(qemu_processes(needle=sid))
    assert len(pids) == 1, pids
    cpu0 = qemu_cpu_seconds(pids[0])
    time.sleep(2)
    assert qemu_cpu_seconds(pids[0]) - cpu0 < 0.5

    # Pausing twice is harmless; resuming brings the same processes back.
    assert api.request("POST", f"/v1/sandboxes/{sid}/pause").status == 200
    r = api.request("POST", f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    first = int(count(api, sid).json["stdout"])
    wait_for(lambda: int(count(api, sid).json["stdout"]) > first, 20, "the counter to go on")
    procs = api.request("GET", f"/v1/sandboxes/{sid}/processes").json["processes"]
    assert any(p["state"] == "running" and p["cmd"][-1] == COUNTER for p in procs)

    # ?resume=true resumes first.
    assert cli("pause", sid).returncode == 0
    r = count(api, sid, query="?resume=true")
    assert r.status == 200, r
    assert api.get(sid).json["state"] == "running"
    api.delete_ok(sid)


def test_pause_of_a_deleted_or_unknown_sandbox(api):
    r = api.request("POST", "/v1/sandboxes/sb-0000000000000000/pause")
    assert r.status == 404, r
    sb = api.create_ok()
    api.delete_ok(sb["id"])
    r = api.request("POST", f"/v1/sandboxes/{sb['id']}/resume")
    assert r.status == 409, r


def test_paused_sandbox_survives_a_daemon_restart(daemon, api):
    sb = api.create_ok()
    sid = sb["id"]
    api.exec_ok(sid, ["sh", "-c", "echo kept > /tmp/f"])
    assert api.request("POST", f"/v1/sandboxes/{sid}/pause").status == 200
    daemon.stop()
    daemon.start()
    assert daemon.api.get(sid).json["state"] == "paused"
    r = daemon.api.request("POST", f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200, r
    out = daemon.api.exec_ok(sid, ["cat", "/tmp/f"])
    assert out["stdout"] == "kept\n"
    daemon.api.delete_ok(sid)
