# SPDX-License-Identifier: Apache-2.0
"""The watchdog (docs/api.md, "Watchdog"): a running sandbox whose VMM stops
answering QMP, or whose guest agent stops answering its pings, for longer
than --watchdog-s is killed by pidfd and put in state `error` with the
reason; its QEMU, network namespace and sockets are gone, its disk stays for
recover, and the other sandboxes go on. Paused sandboxes are not asked, and
--watchdog-s 0 turns it off. The VMMs are really stopped (SIGSTOP, or QMP
`stop` behind the daemon's back), nothing is simulated."""
import json
import os
import re
import signal
import socket
import time

import pytest

from conftest import Daemon, _report_on_failure, cgroup_mounts, pid_alive, qemu_processes, wait_for

WATCHDOG_S = 4
# Detection takes the threshold plus up to one probe period (a third of it,
# at least 1 s) plus one probe (at most 1 s); the rest is slack for a loaded
# CI machine. It bounds a hang, it is not a timing benchmark.
DETECT_S = WATCHDOG_S + 12


@pytest.fixture(scope="module")
def wd(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("watchdog"), extra_args=["--watchdog-s", str(WATCHDOG_S)]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def api(wd, request):
    yield wd.api
    _report_on_failure(request, wd)


def vmm_pid(d, sid):
    pids = list(qemu_processes(needle=sid))
    assert len(pids) == 1, pids
    return pids[0]


def netns_inode(pid):
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def netns_holders(inode):
    """Processes that hold the network namespace: as their own, or as an
    open fd (the daemon keeps one per sandbox)."""
    want = f"net:[{inode}]"
    found = set()
    def link(path):
        try:
            return os.readlink(path)
        except OSError:  # gone meanwhile (the daemon opens and closes fds all the time)
            return None

    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        if link(f"/proc/{entry}/ns/net") == want:
            found.add(int(entry))
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        # One fd closed between the listing and its readlink must not hide
        # the others (CI missed the daemon's namespace fd so).
        if any(link(f"/proc/{entry}/fd/{fd}") == want for fd in fds):
            found.add(int(entry))
    return found


def state(api, sid):
    r = api.get(sid)
    assert r.status == 200, r
    return r.json


def events(api, sid, prefix):
    r = api.request("GET", f"/v1/events?sandbox={sid}&type={prefix}")
    assert r.status == 200, r
    return [json.loads(line) for line in r.raw.decode().splitlines() if line.strip()]


def metric(api, name, labels=""):
    r = api.request("GET", "/metrics")
    assert r.status == 200, r
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", r.raw.decode(), re.M)
    assert m, f"{name}{labels} not in /metrics"
    return float(m.group(1))


def qmp_stop(sock_path):
    """Stops the guest's vCPUs with QMP `stop` behind the daemon's back: QEMU
    still answers, the agent cannot."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock_path)
    f = s.makefile("rwb")
    json.loads(f.readline())  # greeting
    for cmd in ("qmp_capabilities", "stop"):
        f.write(json.dumps({"execute": cmd}).encode() + b"\n")
        f.flush()
        while True:
            msg = json.loads(f.readline())
            if "event" in msg:
                continue
            assert "return" in msg, msg
            break
    s.close()


def assert_reclaimed(d, sid, pid, inode):
    wait_for(lambda: not pid_alive(pid), 15, "the stopped QEMU to be gone")
    wait_for(lambda: not netns_holders(inode), 15, "nothing to hold the sandbox's network namespace")
    sdir = d.sandbox_dir(sid)
    for name in ("ctl.sock", "con.sock", "qmp.sock"):
        assert not os.path.exists(os.path.join(d.vm_dir(sid), name)), name
    # The disk and the logs stay: recover can boot it again, inspect can say why.
    assert os.path.exists(os.path.join(d.vm_dir(sid), "disk.qcow2"))
    assert os.path.exists(os.path.join(sdir, "console.log"))


def test_stopped_vmm_is_killed_and_reclaimed(wd, api):
    victim = api.create_ok()
    other = api.create_ok()
    sid = victim["id"]
    pid = vmm_pid(wd, sid)
    inode = netns_inode(pid)
    assert netns_holders(inode) >= {pid, wd.proc.pid}, "the VMM and the daemon hold the namespace"
    kills0 = metric(api, "airlock_watchdog_kills_total", '{unresponsive="vmm"}') + \
        metric(api, "airlock_watchdog_kills_total", '{unresponsive="agent"}')

    os.kill(pid, signal.SIGSTOP)  # neither QMP nor the guest answers any more
    t0 = time.monotonic()
    try:
        sb = wait_for(lambda: (lambda s: s if s["state"] == "error" else None)(state(api, sid)), DETECT_S,
                      "the watchdog to put the sandbox in error")
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        raise
    took = time.monotonic() - t0
    assert took >= WATCHDOG_S - 1, f"killed after {took:.1f} s, before the threshold"
    assert "watchdog" in sb["error"] and "--watchdog-s" in sb["error"], sb["error"]
    assert "QMP" in sb["error"] or "agent" in sb["error"], sb["error"]
    assert_reclaimed(wd, sid, pid, inode)

    ev = events(api, sid, "sandbox.")
    wdev = [e for e in ev if e["type"] == "sandbox.watchdog"]
    assert len(wdev) == 1, ev
    assert wdev[0]["data"]["unresponsive"] in ("vmm", "agent"), wdev
    assert wdev[0]["data"]["silent_ms"] >= (WATCHDOG_S - 1) * 1000, wdev
    assert any(e["type"] == "sandbox.state" and e["data"]["state"] == "error" for e in ev), ev
    kills = metric(api, "airlock_watchdog_kills_total", '{unresponsive="vmm"}') + \
        metric(api, "airlock_watchdog_kills_total", '{unresponsive="agent"}')
    assert kills == kills0 + 1

    # It cannot be used; the other sandbox never noticed.
    assert api.exec(sid, ["true"]).status == 409
    assert state(api, other["id"])["state"] == "running"
    assert api.exec_ok(other["id"], ["echo", "still here"])["stdout"] == "still here\n"

    # What stayed is enough to bring it back.
    r = api.request("POST", f"/v1/sandboxes/{sid}/recover", body={"memory": False})
    assert r.status == 200 and r.json["state"] == "running", r
    assert api.exec_ok(sid, ["echo", "back"])["stdout"] == "back\n"
    api.delete_ok(sid)
    api.delete_ok(other["id"])


def test_unresponsive_agent_is_killed(wd, api):
    sb = api.create_ok()
    sid = sb["id"]
    pid = vmm_pid(wd, sid)
    inode = netns_inode(pid)
    # QEMU keeps answering QMP; the guest (its agent) does not run any more.
    qmp_stop(os.path.join(wd.vm_dir(sid), "qmp.sock"))
    sb = wait_for(lambda: (lambda s: s if s["state"] == "error" else None)(state(api, sid)), DETECT_S,
                  "the watchdog to notice the silent agent")
    assert "guest agent did not answer" in sb["error"], sb["error"]
    assert_reclaimed(wd, sid, pid, inode)
    ev = [e for e in events(api, sid, "sandbox.watchdog")]
    assert [e["data"]["unresponsive"] for e in ev] == ["agent"], ev
    api.delete_ok(sid)
    # The delete keeps the reason: its "stopping" state says it too (it
    # once said freed memory).
    stopping = [e for e in events(api, sid, "sandbox.state") if e["data"]["state"] == "stopping"]
    assert [e["data"].get("error") for e in stopping] == [sb["error"]], stopping


def cpu_cgroup(sid):
    """The cpu controller's directory of a sandbox's cgroup (airlockd's
    default --cgroup-parent), and whether it is cgroup v2 (cpu.max) or v1
    (cpu.cfs_quota_us)."""
    mount, version = cgroup_mounts()["cpu"]
    path = os.path.join(mount, "airlock", sid)
    assert os.path.isdir(path), path
    return path, version == "v2"


class cpu_starved:
    """Throttles a cgroup to 1 ms of CPU a second (the smallest quota the
    kernel takes): its threads are runnable, and wait. Restores the quota."""

    def __init__(self, cg):
        self.dir, self.v2 = cg

    def _rw(self, name, value=None):
        with open(os.path.join(self.dir, name), "r" if value is None else "w") as f:
            return f.read().strip() if value is None else f.write(value)

    def __enter__(self):
        if self.v2:
            self.saved = [("cpu.max", self._rw("cpu.max"))]
            self._rw("cpu.max", "1000 1000000")
        else:
            self.saved = [("cpu.cfs_quota_us", self._rw("cpu.cfs_quota_us")),
                          ("cpu.cfs_period_us", self._rw("cpu.cfs_period_us"))]
            self._rw("cpu.cfs_quota_us", "1000")
            self._rw("cpu.cfs_period_us", "1000000")
        return self

    def __exit__(self, *exc):
        if self.v2:
            self._rw("cpu.max", self.saved[0][1])
        else:  # a quota larger than the new period is refused: quota last
            self._rw("cpu.cfs_period_us", self.saved[1][1])
            self._rw("cpu.cfs_quota_us", self.saved[0][1])


def test_starved_vmm_is_not_killed(wd, api):
    """A VMM that is runnable but gets no CPU (an overloaded host; here its
    cgroup's quota cut to 0.1 %) is slow, not hung: the watchdog does not
    count the time it waited for a CPU (schedstat's run_delay), up to four
    times --watchdog-s of silence. The stopped VMM and the stopped vCPUs of
    the tests above wait for nothing, and are killed at --watchdog-s."""
    sb = api.create_ok()
    sid = sb["id"]
    assert api.exec_ok(sid, ["echo", "before"])["stdout"] == "before\n"
    reprieves = metric(api, "airlock_watchdog_reprieves_total")
    with cpu_starved(cpu_cgroup(sid)):
        # Longer than --watchdog-s plus a look, shorter than four times it.
        time.sleep(2 * WATCHDOG_S + 2)
        st = state(api, sid)
        spared = metric(api, "airlock_watchdog_reprieves_total")
    assert st["state"] == "running", st
    assert spared > reprieves, "the VMM was never silent past --watchdog-s: the test starved nothing"
    assert "for a CPU (an overloaded host, or its CPU quota)" in wd.log(tail_lines=2000)
    assert api.exec_ok(sid, ["echo", "after"])["stdout"] == "after\n"
    assert not events(api, sid, "sandbox.watchdog")
    api.delete_ok(sid)


def test_paused_sandbox_is_not_killed(wd, api):
    sb = api.create_ok()
    sid = sb["id"]
    pid = vmm_pid(wd, sid)
    r = api.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200 and r.json["state"] == "paused", r
    # A paused guest cannot answer, and its VMM need not either.
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(2 * WATCHDOG_S + 2)
        assert state(api, sid)["state"] == "paused"
        assert pid_alive(pid)
    finally:
        os.kill(pid, signal.SIGCONT)
    r = api.request("POST", f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    # Resumed, it is watched again from zero: not killed for the time it was paused.
    time.sleep(WATCHDOG_S + 2)
    assert state(api, sid)["state"] == "running"
    assert api.exec_ok(sid, ["echo", "ok"])["stdout"] == "ok\n"
    assert not events(api, sid, "sandbox.watchdog")
    api.delete_ok(sid)


def test_watchdog_off(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("watchdog-off"), extra_args=["--watchdog-s", "0"]).start()
    try:
        sb = d.api.create_ok()
        sid = sb["id"]
        pid = vmm_pid(d, sid)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(2 * WATCHDOG_S + 2)
            assert state(d.api, sid)["state"] == "running"
            assert pid_alive(pid)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert d.api.exec_ok(sid, ["echo", "ok"])["stdout"] == "ok\n"
        assert not events(d.api, sid, "sandbox.watchdog")
        d.api.delete_ok(sid)
    finally:
        leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}"
