# SPDX-License-Identifier: Apache-2.0
"""WATCH streams of the agent (proto.h, docs/guest.md), against
build/airlock-agent --channel-fd on this host (no VM): inotify events, the
recursive watch of new directories, cancellation, the end when the watched
directory goes, and the bounded queue (lost events are reported)."""
import json
import os
import shutil
import struct
import tempfile
import time

import pytest

import agent_harness as ah

pytestmark = pytest.mark.skipif(not os.path.exists(ah.AGENT), reason="build/airlock-agent not built")


@pytest.fixture
def agent():
    a = ah.LocalAgent()
    yield a
    a.close()


@pytest.fixture
def tree():
    d = tempfile.mkdtemp(prefix="airlock-watch-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def frames(conn, sid, until, timeout=10, credit=True):
    """WATCH_EVENTS of stream sid until until(events, frame) is true; returns
    the events seen and the last frame (type, payload)."""
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ftype, _, p = conn.recv(sid, deadline - time.monotonic())
        if ftype != ah.WATCH_EVENTS:
            return events, (ftype, json.loads(p))
        if credit:
            conn.credit(sid, len(p))
        msg = json.loads(p)
        events += [(e["op"], e["name"]) for e in msg["events"]]
        if until(events, msg):
            return events, (ftype, msg)
    raise TimeoutError(f"events so far: {events}")


def start(conn, sid, path, recursive=False):
    conn.send(ah.WATCH, sid, {"path": path, "recursive": recursive})
    ftype, _, p = conn.recv(sid, 10)
    assert ftype == ah.WATCH_EVENTS, (ftype, p)
    conn.credit(sid, len(p))
    msg = json.loads(p)
    assert msg["started"] is True and msg["events"] == []
    return msg


def test_events_of_files(agent, tree):
    c = agent.client
    start(c, 1, tree)
    with open(os.path.join(tree, "a.txt"), "w") as f:
        f.write("x")
    os.chmod(os.path.join(tree, "a.txt"), 0o600)
    os.rename(os.path.join(tree, "a.txt"), os.path.join(tree, "b.txt"))
    os.unlink(os.path.join(tree, "b.txt"))
    ev, _ = frames(c, 1, lambda ev, m: ("remove", "b.txt") in ev)
    for want in [("create", "a.txt"), ("write", "a.txt"), ("chmod", "a.txt"), ("rename", "a.txt"),
                 ("create", "b.txt"), ("remove", "b.txt")]:
        assert want in ev, ev
    c.send(ah.SIGNAL, 1, {})
    ev, (ftype, msg) = frames(c, 1, lambda ev, m: False)
    assert ftype == ah.OK and msg["reason"] == "cancelled"


def test_recursive_new_directory(agent, tree):
    c = agent.client
    os.mkdir(os.path.join(tree, "old"))
    msg = start(c, 2, tree, recursive=True)
    assert msg["watches"] == 2
    os.makedirs(os.path.join(tree, "new", "deep"))
    with open(os.path.join(tree, "new", "deep", "f"), "w") as f:
        f.write("1")
    with open(os.path.join(tree, "old", "g"), "w") as f:
        f.write("1")
    ev, _ = frames(c, 2, lambda ev, m: ("create", "new/deep/f") in ev and ("create", "old/g") in ev)
    assert ("create", "new") in ev
    # A directory moved away is not reported under its old name any more.
    os.rename(os.path.join(tree, "new"), os.path.join(tree, "moved"))
    with open(os.path.join(tree, "moved", "deep", "h"), "w") as f:
        f.write("1")
    ev, _ = frames(c, 2, lambda ev, m: ("create", "moved/deep/h") in ev)
    assert ("rename", "new") in ev and not any(n.startswith("new/") for _, n in ev), ev


def test_not_recursive_ignores_subdirectories(agent, tree):
    c = agent.client
    os.mkdir(os.path.join(tree, "sub"))
    start(c, 3, tree)
    with open(os.path.join(tree, "sub", "x"), "w") as f:
        f.write("1")
    with open(os.path.join(tree, "top"), "w") as f:
        f.write("1")
    ev, _ = frames(c, 3, lambda ev, m: ("create", "top") in ev)
    assert not any(n.startswith("sub/") for _, n in ev), ev


def test_missing_and_not_a_directory(agent, tree):
    c = agent.client
    c.send(ah.WATCH, 4, {"path": os.path.join(tree, "nope")})
    ftype, _, p = c.recv(4, 10)
    assert ftype == ah.ERROR and json.loads(p)["code"] == "enoent"
    open(os.path.join(tree, "file"), "w").close()
    c.send(ah.WATCH, 5, {"path": os.path.join(tree, "file")})
    ftype, _, p = c.recv(5, 10)
    assert ftype == ah.ERROR and json.loads(p)["code"] == "enotdir"
    for bad in [{"path": "rel"}, {"path": tree, "recursive": 1}, {}]:
        c.send(ah.WATCH, 6, bad)
        ftype, _, p = c.recv(6, 10)
        assert ftype == ah.ERROR and json.loads(p)["code"] == "einval", (bad, p)


def test_removed_directory_ends_the_watch(agent, tree):
    c = agent.client
    d = os.path.join(tree, "w")
    os.mkdir(d)
    start(c, 7, d)
    os.rmdir(d)
    ev, (ftype, msg) = frames(c, 7, lambda ev, m: False)
    assert ftype == ah.OK and msg["reason"] == "removed", (ftype, msg)


def test_flood_without_credit_is_bounded_and_reported(agent, tree):
    c = agent.client
    start(c, 8, tree)
    # More than the window (~35000 such events), the agent's queue (4096)
    # and the kernel's (16384 by default) hold.
    n = 90000
    for i in range(n):
        os.close(os.open(os.path.join(tree, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
    # Without credit the agent stops at the window; nothing beyond it comes.
    got, total, lost = 0, 0, 0
    deadline = time.monotonic() + 5
    try:
        while time.monotonic() < deadline:
            ftype, _, p = c.recv(8, max(0.1, deadline - time.monotonic()))
            assert ftype == ah.WATCH_EVENTS
            total += len(p)
            msg = json.loads(p)
            got += len(msg["events"])
            lost += msg.get("lost", 0)
    except TimeoutError:
        pass
    assert total <= ah.OUTPUT_WINDOW
    # Credit: what waited comes; what did not fit anywhere is counted as lost.
    c.credit(8, total)
    c.send(ah.SIGNAL, 8, {})
    while True:
        ftype, _, p = c.recv(8, 10)
        if ftype != ah.WATCH_EVENTS:
            break
        c.credit(8, len(p))
        msg = json.loads(p)
        got += len(msg["events"])
        lost += msg.get("lost", 0)
    assert ftype == ah.OK and json.loads(p)["reason"] == "cancelled"
    assert got < n and lost >= 1, (got, lost)


def test_watch_stream_limit(agent, tree):
    c = agent.client
    for i in range(32):
        start(c, 100 + i, tree)
    c.send(ah.WATCH, 200, {"path": tree})
    ftype, _, p = c.recv(200, 10)
    assert ftype == ah.ERROR and json.loads(p)["code"] == "emfile"


def test_entries(agent, tree):
    c = agent.client
    c.send(ah.WATCH, 9, {"path": tree, "entries": True})
    ftype, _, p = c.recv(9, 10)
    assert ftype == ah.WATCH_EVENTS and json.loads(p)["started"]
    with open(os.path.join(tree, "f"), "w") as f:
        f.write("12345")
    os.symlink("f", os.path.join(tree, "l"))
    os.unlink(os.path.join(tree, "f"))
    got = []
    deadline = time.monotonic() + 10
    while not any(e["op"] == "remove" for e in got):
        assert time.monotonic() < deadline, got
        ftype, _, p = c.recv(9, 10)
        assert ftype == ah.WATCH_EVENTS
        got += json.loads(p)["events"]
    # The entry is the path's stat when the event was sent: f may be gone by then.
    for e in got:
        if e["op"] == "remove" or e["name"] == "f":
            assert "entry" not in e or e["entry"]["name"] == "f", e
    link = [e for e in got if e["name"] == "l" and e["op"] == "create"]
    assert link and link[0]["entry"]["type"] == "symlink" and link[0]["entry"]["target"] == "f", got
    c.send(ah.WATCH, 10, {"path": tree, "entries": 1})
    ftype, _, p = c.recv(10, 10)
    assert ftype == ah.ERROR and json.loads(p)["code"] == "einval"


def test_recursive_stays_on_the_filesystem(agent):
    """A recursive watch does not walk into other filesystems: /dev's
    directories are watched, /dev/pts, /dev/shm, /dev/mqueue are not."""
    root_dev = os.lstat("/dev").st_dev
    others = [d for d in ("/dev/pts", "/dev/shm", "/dev/mqueue")
              if os.path.isdir(d) and os.lstat(d).st_dev != root_dev]
    if not others:
        pytest.skip("no other filesystem mounted below /dev here")
    same = 0
    for top, dirs, _ in os.walk("/dev"):
        keep = []
        for d in dirs:
            p = os.path.join(top, d)
            st = os.lstat(p)
            if not os.path.islink(p) and st.st_dev == root_dev:
                keep.append(d)
        dirs[:] = keep
        same += 1
    c = agent.client
    msg = start(c, 11, "/dev", recursive=True)
    assert msg["watches"] == same, (msg, same, others)
    c.send(ah.SIGNAL, 11, {})
    ev, (ftype, end) = frames(c, 11, lambda ev, m: False)
    assert ftype == ah.OK and end["reason"] == "cancelled"
