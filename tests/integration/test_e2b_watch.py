# SPDX-License-Identifier: Apache-2.0
"""envd's filesystem.Filesystem/WatchDir on the wire (docs/e2b.md, "Watching
directories (envd)"): the start event, create/write/remove/rename/chmod
events, recursive watches that pick up new subdirectories, a missing
directory (not_found), the guest's watch ending with the client, and a
flood that ends the stream with resource_exhausted instead of growing
anything. One daemon and one `base` sandbox for the module."""
import http.client
import socket
import time

import pytest

from e2butil import (END_STREAM, STREAM_CT, ConnectStream, e2b_daemon_start, e2b_daemon_stop, envd_headers,
                     envd_token, envelope)


@pytest.fixture(scope="module")
def e2b(tmp_path_factory):
    d = e2b_daemon_start(tmp_path_factory, name="airlockd-e2b-watch")
    yield d
    e2b_daemon_stop(d)


@pytest.fixture(scope="module")
def sb(e2b):
    rec = e2b.api.create_ok(template="base", vcpus=1, memory_mib=512)
    yield Envd(e2b, rec["id"], envd_token(e2b, rec))
    e2b.api.delete(rec["id"])


class Watch(ConnectStream):
    """A WatchDir stream, read envelope by envelope."""

    def events_until(self, pred, timeout=60):
        """(name, type) pairs until pred(events) holds; keepalives skipped."""
        events = []
        self.conn.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while not pred(events):
            assert time.monotonic() < deadline, events
            flags, msg = self.next()
            assert not flags & END_STREAM, (msg, events)
            if "filesystem" in msg:
                events.append((msg["filesystem"]["name"], msg["filesystem"]["type"]))
            else:
                assert msg == {"keepalive": {}}, msg
        return events

    def until_end(self, timeout=120):
        self.conn.sock.settimeout(timeout)
        n = 0
        while True:
            flags, msg = self.next()
            if flags & END_STREAM:
                return n, msg
            n += 1


class Envd:
    def __init__(self, e2b, sid, token):
        self.e2b, self.port, self.sid, self.token = e2b, e2b.port, sid, token

    def watch(self, msg, raw=None, token=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", "/e2b/envd/filesystem.Filesystem/WatchDir",
                     body=raw if raw is not None else envelope(msg),
                     headers=envd_headers(self.sid, token or self.token, STREAM_CT))
        return Watch(conn, conn.getresponse())

    def started(self, msg):
        w = self.watch(msg)
        assert w.status == 200 and w.content_type.startswith(STREAM_CT), (w.status, w.content_type)
        flags, first = w.next()
        assert (flags, first) == (0, {"start": {}}), (flags, first)
        return w

    def sh(self, script, user="root"):
        r = self.e2b.api.exec_ok(self.sid, ["/bin/sh", "-c", script])
        assert r["exit_code"] == 0, r
        return r["stdout"]

    def agent_inotify_fds(self):
        return int(self.sh("ls -l /proc/1/fd | grep -c inotify || true").strip())

    def no_watches_left(self, timeout=10):
        """Waits until the agent has no inotify instance (the watches of
        closed streams are cancelled within the daemon's poll interval)."""
        deadline = time.monotonic() + timeout
        while self.agent_inotify_fds() != 0:
            assert time.monotonic() < deadline, "the agent kept the watches of clients that went away"
            time.sleep(0.3)


def test_events_of_a_watched_directory(sb):
    sb.sh("rm -rf /tmp/w1 && mkdir /tmp/w1")
    w = sb.started({"path": "/tmp/w1"})
    try:
        sb.sh("cd /tmp/w1 && echo hi > a && echo more >> a && chmod 600 a && mv a b && rm b")
        ev = w.events_until(lambda ev: ("b", "EVENT_TYPE_REMOVE") in ev)
        for want in [("a", "EVENT_TYPE_CREATE"), ("a", "EVENT_TYPE_WRITE"), ("a", "EVENT_TYPE_CHMOD"),
                     ("a", "EVENT_TYPE_RENAME"), ("b", "EVENT_TYPE_CREATE"), ("b", "EVENT_TYPE_REMOVE")]:
            assert want in ev, ev
    finally:
        w.close()


def test_relative_path_is_under_the_home(sb):
    sb.sh("rm -rf /home/user/wrel && mkdir /home/user/wrel && chown user: /home/user/wrel")
    w = sb.started({"path": "wrel"})
    try:
        sb.sh("touch /home/user/wrel/x")
        assert ("x", "EVENT_TYPE_CREATE") in w.events_until(lambda ev: ev)
    finally:
        w.close()


def test_recursive_picks_up_new_subdirectories(sb):
    sb.sh("rm -rf /tmp/w2 && mkdir -p /tmp/w2/old")
    w = sb.started({"path": "/tmp/w2", "recursive": True})
    try:
        sb.sh("mkdir -p /tmp/w2/new/deep && echo 1 > /tmp/w2/new/deep/f && echo 2 > /tmp/w2/old/g")
        ev = w.events_until(lambda ev: ("new/deep/f", "EVENT_TYPE_CREATE") in ev and
                            ("old/g", "EVENT_TYPE_CREATE") in ev)
        assert ("new", "EVENT_TYPE_CREATE") in ev, ev
    finally:
        w.close()
    # Without recursive, a subdirectory's files are not reported.
    w = sb.started({"path": "/tmp/w2"})
    try:
        sb.sh("touch /tmp/w2/old/h /tmp/w2/top")
        ev = w.events_until(lambda ev: ("top", "EVENT_TYPE_CREATE") in ev)
        assert not any(n.startswith("old/") for n, _ in ev), ev
    finally:
        w.close()


def test_errors_before_the_stream(sb):
    for msg, code in [({"path": "/tmp/no/such/dir"}, "not_found"), ({"path": "/etc/hostname"}, "invalid_argument"),
                      ({"path": 3}, "invalid_argument"), ({"path": "/tmp", "recursive": "yes"}, "invalid_argument")]:
        w = sb.watch(msg)
        try:
            assert w.status == 200 and w.content_type.startswith(STREAM_CT), w.status
            flags, end = w.next()
            assert flags & END_STREAM and end["error"]["code"] == code, (msg, end)
        finally:
            w.close()
    w = sb.watch(None, raw=b"\x00\x00")
    try:
        flags, end = w.next()
        assert flags & END_STREAM and end["error"]["code"] == "invalid_argument", end
    finally:
        w.close()
    w = sb.watch({"path": "/tmp"}, token="ea_" + "0" * 64)
    try:
        assert w.status != 200 or w.next()[1]["error"]["code"] == "unauthenticated"
    finally:
        w.close()


def test_the_guest_watch_ends_with_the_client(sb):
    sb.sh("rm -rf /tmp/w3 && mkdir /tmp/w3")
    sb.no_watches_left()
    ws = [sb.started({"path": "/tmp/w3", "recursive": True}) for _ in range(3)]
    assert sb.agent_inotify_fds() == 3
    for w in ws:
        w.conn.sock.shutdown(socket.SHUT_RDWR)
        w.close()
    # The daemon notices within its poll interval and cancels each watch.
    sb.no_watches_left()


def test_removed_directory_ends_the_stream(sb):
    sb.sh("rm -rf /tmp/w4 && mkdir /tmp/w4")
    w = sb.started({"path": "/tmp/w4"})
    try:
        sb.sh("rmdir /tmp/w4")
        n, end = w.until_end(timeout=30)
        assert end == {}, end
    finally:
        w.close()


def test_flood_is_bounded_and_reported(sb):
    """A client that does not read while the guest changes a watched file a
    few hundred thousand times: the daemon keeps a bounded log, the agent a
    bounded queue; the loss is reported as resource_exhausted."""
    sb.sh("rm -rf /tmp/w5 && mkdir /tmp/w5 && touch /tmp/w5/a /tmp/w5/b")
    sb.no_watches_left()
    w = sb.started({"path": "/tmp/w5"})
    try:
        rss_before = rss_kib(sb.e2b.proc.pid)
        sb.sh("python3 -c \"import os\nfor i in range(150000): os.chmod('/tmp/w5/a' if i % 2 else '/tmp/w5/b', "
              "0o600 | (i & 1) << 2)\"")
        rss_after = rss_kib(sb.e2b.proc.pid)
        n, end = w.until_end(timeout=180)
        assert end.get("error", {}).get("code") == "resource_exhausted", end
        assert "lost" in end["error"]["message"], end
        assert n < 150000, n
        assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)
    finally:
        w.close()
    # The watch is gone from the guest after the end.
    sb.no_watches_left()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_sandbox_deleted_ends_the_stream(e2b, sb):
    """The sandbox goes away under a watch: the stream ends (unavailable),
    and the DELETE does not wait for the watch's reader."""
    rec = e2b.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    other = Envd(e2b, rec["id"], envd_token(e2b, rec))
    w = other.started({"path": "/tmp"})
    try:
        t0 = time.monotonic()
        r = e2b.api.delete(rec["id"])
        assert r.status == 200, r
        n, end = w.until_end(timeout=30)
        assert end.get("error", {}).get("code") == "unavailable", end
        assert time.monotonic() - t0 < 30
    finally:
        w.close()
