# SPDX-License-Identifier: Apache-2.0
"""Streaming exec, background processes, back-pressure, PTY attach, sandbox
metrics and bad input for those endpoints, against a real daemon and one
shared VM (docs/api.md: "Streaming exec", "Background processes", "The PTY
protocol", "Metrics of a sandbox"). Ordering and flags are asserted, never
wall-clock times."""
import http.client
import json
import threading
import time

import pytest

from apiutil import (MIB, PtySession, Stream, guest_pids, output_bytes, rss_kib, wait_until)
from conftest import UnixHTTPConnection


def base(sandbox):
    return f"/v1/sandboxes/{sandbox['id']}"


def start_process(api, sandbox, **body):
    r = api.request("POST", f"{base(sandbox)}/processes", body=body)
    assert r.status == 201, r
    assert r.json["cmd"] == body["cmd"] and r.json["id"].startswith("p-"), r
    return r.json


def get_process(api, sandbox, pid):
    r = api.request("GET", f"{base(sandbox)}/processes/{pid}")
    assert r.status == 200, r
    return r.json


def wait_process(api, sandbox, pid, timeout_s=60):
    r = api.request("GET", f"{base(sandbox)}/processes/{pid}/wait?timeout_s={timeout_s}")
    assert r.status == 200, r
    assert r.json["state"] == "exited", r
    return r.json


def ndjson(r):
    assert r.status == 200, r
    assert r.headers.get("Content-Type", "").startswith("application/x-ndjson"), r.headers
    return [json.loads(l) for l in r.raw.splitlines() if l.strip()]


def check_error(r, status, code=None):
    assert r.status == status, r
    assert isinstance(r.json, dict) and set(r.json) == {"error"}, r
    if code:
        assert r.json["error"]["code"] == code, r
    assert r.json["error"]["message"].strip(), r


# ------------------------------------------------------------------ 1. streaming exec

def test_streaming_exec(daemon, api, sandbox):
    # Output arrives while the process still runs.
    s = Stream(daemon.socket, "POST", f"{base(sandbox)}/exec",
               body={"cmd": ["sh", "-c", "echo first; sleep 3; echo second; exit 3"], "stream": True})
    try:
        assert s.status == 200, s.error_body()
        assert s.headers.get("Content-Type", "").startswith("application/x-ndjson"), s.headers
        assert s.headers.get("Transfer-Encoding") == "chunked", s.headers
        start = s.next_line()
        assert start["type"] == "start" and start["process_id"].startswith("p-"), start
        pid = start["process_id"]
        first = s.read_until(lambda l: l["type"] == "stdout", "the first stdout line")
        assert first == {"type": "stdout", "data": "first\n", "encoding": "utf8"}, first
        # The `sleep 3` is still running: the line came before the end.
        assert get_process(api, sandbox, pid)["state"] == "running"
        assert not any(l["type"] == "exit" for l in s.lines)
        rest = s.read_all()
    finally:
        s.close()
    assert output_bytes(rest) == b"first\nsecond\n", rest
    assert rest[-1]["type"] == "exit", rest
    assert rest[-1]["exit_code"] == 3 and rest[-1]["signal"] is None and rest[-1]["timed_out"] is False, rest
    assert isinstance(rest[-1]["duration_ms"], int)
    assert [l["type"] for l in rest].count("exit") == 1
    assert get_process(api, sandbox, pid)["exit_code"] == 3

    # stdin_stream: stdin stays open for POST .../stdin.
    s = Stream(daemon.socket, "POST", f"{base(sandbox)}/exec",
               body={"cmd": ["sh", "-c", "while read l; do echo got-$l; done; echo bye"], "stream": True,
                     "stdin_stream": True})
    try:
        assert s.status == 200, s.error_body()
        pid = s.next_line()["process_id"]
        r = api.request("POST", f"{base(sandbox)}/processes/{pid}/stdin", raw=b"one\n",
                        headers={"Content-Type": "application/octet-stream"})
        assert r.status == 204, r
        line = s.read_until(lambda l: l["type"] == "stdout", "the echo of stdin")
        assert line["data"] == "got-one\n", line
        r = api.request("POST", f"{base(sandbox)}/processes/{pid}/stdin?eof=true", raw=b"two\n")
        assert r.status == 204, r
        rest = s.read_all()
    finally:
        s.close()
    assert output_bytes(s.lines) == b"got-one\ngot-two\nbye\n", s.lines
    assert rest[-1]["type"] == "exit" and rest[-1]["exit_code"] == 0, rest

    # Disconnecting from a streaming exec kills the process.
    s = Stream(daemon.socket, "POST", f"{base(sandbox)}/exec",
               body={"cmd": ["sh", "-c", "echo up; exec sleep 4321"], "stream": True})
    assert s.status == 200, s.error_body()
    pid = s.next_line()["process_id"]
    s.read_until(lambda l: l["type"] == "stdout", "up")
    assert guest_pids(api, sandbox["id"], "sleep 4321"), "the streamed process is not running"
    s.close()
    p = wait_until(lambda: (lambda p: p if p["state"] == "exited" else None)(get_process(api, sandbox, pid)),
                   60, f"process {pid} to end after the client went away")
    assert p["signal"] == 9 and p["exit_code"] is None, p
    assert not guest_pids(api, sandbox["id"], "sleep 4321")


# ------------------------------------------------------------------ 2. background processes

def test_background_processes(daemon, api, sandbox):
    # The script waits for a line of stdin between its two outputs, so that
    # "during" and "after" are decided by the test, not by a clock.
    cmd = ["sh", "-c", "echo one; read x; echo two; exit 7"]
    p = start_process(api, sandbox, cmd=cmd, tag="bg-test", stdin_stream=True)
    pid = p["id"]
    # It outlived the request that started it.
    assert p["state"] == "running" and p["tag"] == "bg-test" and p["pty"] is False, p
    assert p["exit_code"] is None and p["ended_at"] is None and p["started_at"], p

    listed = api.request("GET", f"{base(sandbox)}/processes")
    assert listed.status == 200, listed
    mine = [x for x in listed.json["processes"] if x["id"] == pid]
    assert len(mine) == 1 and mine[0]["cmd"] == cmd and mine[0]["state"] == "running", listed

    # wait with a timeout on a running process: 408 with the object.
    r = api.request("GET", f"{base(sandbox)}/processes/{pid}/wait?timeout_s=1")
    assert r.status == 408, r
    assert r.json["id"] == pid and r.json["state"] == "running", r

    # from=start without follow: what is there now ("one"), then the end.
    wait_until(lambda: get_process(api, sandbox, pid)["output_bytes"] >= 4, 30, "the first output")
    lines = ndjson(api.request("GET", f"{base(sandbox)}/processes/{pid}/output?from=start"))
    assert output_bytes(lines) == b"one\n", lines
    assert not any(l["type"] in ("start", "exit") for l in lines), lines

    # from=now with follow: only what comes next, ending with the exit line.
    follower = Stream(daemon.socket, "GET", f"{base(sandbox)}/processes/{pid}/output?from=now&follow=true")
    try:
        assert follower.status == 200, follower.error_body()
        r = api.request("POST", f"{base(sandbox)}/processes/{pid}/stdin?eof=true", raw=b"go\n")
        assert r.status == 204, r
        now_lines = follower.read_all()
    finally:
        follower.close()
    assert output_bytes(now_lines) == b"two\n", now_lines
    assert now_lines[-1]["type"] == "exit" and now_lines[-1]["exit_code"] == 7, now_lines

    done = wait_process(api, sandbox, pid)
    assert done["exit_code"] == 7 and done["signal"] is None and done["ended_at"], done
    # from=start&follow=true on an exited process: everything, then exit.
    lines = ndjson(api.request("GET", f"{base(sandbox)}/processes/{pid}/output?from=start&follow=true"))
    assert output_bytes(lines) == b"one\ntwo\n" and lines[-1]["type"] == "exit", lines
    assert lines[-1]["exit_code"] == 7, lines
    listed = api.request("GET", f"{base(sandbox)}/processes").json["processes"]
    mine = [x for x in listed if x["id"] == pid]
    assert mine[0]["state"] == "exited" and mine[0]["exit_code"] == 7, mine

    # follow until exit, for a process that ends by itself.
    p2 = start_process(api, sandbox, cmd=["sh", "-c", "for i in 1 2 3; do echo n$i; sleep 0.2; done"])
    lines = ndjson(api.request("GET", f"{base(sandbox)}/processes/{p2['id']}/output?from=start&follow=true"))
    assert output_bytes(lines) == b"n1\nn2\nn3\n" and lines[-1]["type"] == "exit", lines

    # signal TERM.
    p3 = start_process(api, sandbox, cmd=["sleep", "1000"])
    r = api.request("POST", f"{base(sandbox)}/processes/{p3['id']}/signal", body={"signal": "TERM"})
    assert r.status == 204, r
    done = wait_process(api, sandbox, p3["id"])
    assert done["signal"] == 15 and done["exit_code"] is None, done
    r = api.request("POST", f"{base(sandbox)}/processes/{p3['id']}/signal", body={"signal": "TERM"})
    check_error(r, 409, "conflict")

    # Unknown process ids.
    for method, suffix, body in [("GET", "", None), ("GET", "/wait?timeout_s=1", None),
                                 ("GET", "/output", None), ("POST", "/signal", {"signal": "TERM"}),
                                 ("POST", "/resize", {"rows": 10, "cols": 10})]:
        for unknown in ("p-999999", "nope"):
            r = api.request(method, f"{base(sandbox)}/processes/{unknown}{suffix}", body=body)
            check_error(r, 404, "not_found")
    r = api.request("POST", f"{base(sandbox)}/processes/p-999999/stdin", raw=b"x")
    check_error(r, 404, "not_found")


# ------------------------------------------------------------------ 3. back-pressure

def test_back_pressure(daemon, api, sandbox):
    """A guest flooding output to a slow follow reader: the daemon's memory
    stays bounded and the follower loses nothing."""
    total = 56 * MIB
    line = "0123456789abcdef" * 4  # `yes` adds "\n": 65 bytes a line
    # The producer waits for a line on stdin, so that the follower is attached
    # from its first byte.
    p = start_process(api, sandbox, stdin_stream=True,
                      cmd=["sh", "-c", f"read go; yes {line} | head -c {total}"])
    pid = p["id"]
    follower = Stream(daemon.socket, "GET", f"{base(sandbox)}/processes/{pid}/output?from=start&follow=true")
    assert follower.status == 200, follower.error_body()
    before = rss_kib(daemon.proc.pid)
    peak = before
    r = api.request("POST", f"{base(sandbox)}/processes/{pid}/stdin?eof=true", raw=b"go\n")
    assert r.status == 204, r
    got = 0
    dropped = 0
    pauses = 0
    exit_line = None
    n_lines = 0
    try:
        while True:
            l = follower.next_line()
            assert l is not None, "the follow stream ended without an exit line"
            if l["type"] == "stdout":
                assert l["encoding"] == "utf8", l["encoding"]
                got += len(l["data"])
            elif l["type"] == "dropped":
                dropped += l["bytes"]
            elif l["type"] in ("exit", "error"):
                exit_line = l
                break
            # The slow phase: stop reading for a while, three times, once a few
            # MiB have passed; the guest keeps writing meanwhile.
            if pauses < 3 and got >= (pauses + 1) * 4 * MIB:
                pauses += 1
                for _ in range(10):
                    time.sleep(0.2)
                    peak = max(peak, rss_kib(daemon.proc.pid))
            n_lines += 1
            if n_lines % 64 == 0:
                peak = max(peak, rss_kib(daemon.proc.pid))
    finally:
        follower.close()
    peak = max(peak, rss_kib(daemon.proc.pid))
    assert exit_line["type"] == "exit" and exit_line["exit_code"] == 0, exit_line
    assert dropped == 0, f"the follower lost {dropped} bytes"
    assert got == total, f"the follower got {got} bytes of {total}"
    growth_mib = (peak - before) / 1024
    assert growth_mib < 64, f"the daemon's RSS grew by {growth_mib:.1f} MiB while {total // MIB} MiB passed"
    print(f"back-pressure: RSS {before // 1024} MiB -> peak {peak // 1024} MiB")


# ------------------------------------------------------------------ 4. PTY

def test_pty_attach(daemon, api, sandbox):
    p = start_process(api, sandbox, cmd=["sh"], pty={"rows": 24, "cols": 80})
    assert p["pty"] is True, p
    pty = PtySession(daemon.socket, sandbox["id"], p["id"])
    try:
        assert pty.status == 101, pty.head
        assert pty.headers.get("upgrade") == "airlock-pty/1", pty.head
        pty.keys("echo h''i\r")  # the echoed command line does not contain "hi"
        pty.read_until("hi\r\n")
        pty.resize(33, 111)
        pty.keys("stty size\r")
        pty.read_until("33 111")
        pty.keys("sleep 101; echo slept-$((1+1))\r")
        # ^C once sleep runs (before it, the shell could take it instead).
        wait_until(lambda: guest_pids(api, sandbox["id"], "sleep 101"), 60, "sleep 101 in the PTY")
        pty.keys("\x03")
        pty.keys("echo after-$?\r")
        screen = pty.read_until("after-130")
        assert "slept-2" not in screen.decode("utf-8", "replace")  # the list was interrupted
        pty.keys("exit 5\r")
        ex = pty.wait_exit()
        assert ex["type"] == "exit" and ex["exit_code"] == 5, ex
    finally:
        pty.close()
    done = wait_process(api, sandbox, p["id"])
    assert done["exit_code"] == 5, done


# ------------------------------------------------------------------ 5. metrics of a sandbox

def test_sandbox_metrics(api, sandbox):
    r1 = api.request("GET", f"{base(sandbox)}/metrics")
    assert r1.status == 200, r1
    m = r1.json
    fields = ["cpu_usage_usec", "cpus", "mem_total_kib", "mem_available_kib", "disk_total_bytes",
              "disk_used_bytes", "uptime_ms", "processes"]
    assert set(fields) <= set(m), m
    for f in fields:
        assert isinstance(m[f], int) and m[f] >= 0, (f, m)
    assert m["cpus"] == sandbox["vcpus"], m
    assert 64 * 1024 < m["mem_total_kib"] <= sandbox["memory_mib"] * 1024, m
    assert 0 < m["mem_available_kib"] <= m["mem_total_kib"], m
    assert 0 < m["disk_used_bytes"] <= m["disk_total_bytes"], m
    assert m["uptime_ms"] > 0 and m["cpu_usage_usec"] > 0 and m["processes"] >= 1, m
    api.exec_ok(sandbox["id"], ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"])
    m2 = api.request("GET", f"{base(sandbox)}/metrics").json
    assert m2["uptime_ms"] > m["uptime_ms"] and m2["cpu_usage_usec"] > m["cpu_usage_usec"], (m, m2)
    check_error(api.request("GET", "/v1/sandboxes/sb-0123456789abcdef/metrics"), 404, "not_found")


# ------------------------------------------------------------------ 6. bad input

def declared_only(daemon, method, path, length, content_type="application/json"):
    """A request that declares a body of `length` bytes and sends none: the
    daemon must answer from the headers."""
    conn = UnixHTTPConnection(daemon.socket, timeout=60)
    try:
        conn.putrequest(method, path)
        conn.putheader("Content-Type", content_type)
        conn.putheader("Content-Length", str(length))
        conn.endheaders()
        resp = conn.getresponse()
        from conftest import Response
        return Response(resp.status, dict(resp.getheaders()), resp.read(), method, path)
    finally:
        conn.close()


def test_bad_input(daemon, api, sandbox):
    b = base(sandbox)
    running = start_process(api, sandbox, cmd=["sleep", "1000"], stdin_stream=True)
    ppath = f"{b}/processes/{running['id']}"

    # Oversize bodies: 413 from the declared length, before any of it is read.
    for method, path, limit in [("POST", f"{b}/exec", 16 * MIB), ("POST", f"{b}/processes", 16 * MIB),
                                ("POST", f"{ppath}/signal", 64 * 1024), ("POST", f"{ppath}/resize", 64 * 1024),
                                ("POST", f"{b}/files/mkdir", 64 * 1024), ("POST", f"{ppath}/stdin", 16 * MIB),
                                ("POST", "/v1/tokens", 4096), ("PUT", "/v1/tenants/x", 4096)]:
        ct = "application/octet-stream" if path.endswith("/stdin") else "application/json"
        check_error(declared_only(daemon, method, path, limit + 1, ct), 413, "payload_too_large")
    # ... and a real oversize body, sent in full.
    check_error(api.request("POST", f"{ppath}/signal", raw=b'{"signal": "' + b"A" * (64 * 1024) + b'"}',
                            headers={"Content-Type": "application/json"}), 413, "payload_too_large")

    # Bad JSON, unknown fields, wrong types.
    for path, raw in [(f"{b}/processes", b'{"cmd": ['), (f"{ppath}/signal", b"TERM"),
                      (f"{ppath}/resize", b"[24, 80]"), (f"{b}/files/mkdir", b'{"path": "/x",}')]:
        check_error(api.request("POST", path, raw=raw, headers={"Content-Type": "application/json"}),
                    400, "invalid_argument")
    for path, body in [(f"{b}/processes", {"cmd": ["true"], "colour": "blue"}),
                       (f"{b}/processes", {"cmd": ["true"], "pty": {"rows": 10, "cols": 10, "depth": 3}}),
                       (f"{b}/processes", {"cmd": ["true"], "tag": "x" * 65}),
                       (f"{b}/processes", {"cmd": ["true"], "stream": True}),
                       (f"{b}/processes", {"cmd": ["true"], "stdin": "x", "stdin_stream": True}),
                       (f"{b}/exec", {"cmd": ["true"], "pty": {"rows": 10, "cols": 10}}),
                       (f"{b}/exec", {"cmd": ["true"], "stdin_stream": True}),
                       (f"{b}/exec", {"cmd": ["true"], "stream": "yes"}),
                       (f"{ppath}/signal", {"signal": "TERM", "pid": 1}),
                       (f"{ppath}/resize", {"rows": 10, "cols": 10, "x": 1}),
                       (f"{b}/files/remove", {"path": "/tmp", "force": True}),
                       (f"{b}/files/rename", {"path": "/tmp/a"})]:
        check_error(api.request("POST", path, body=body), 400, "invalid_argument")
    check_error(api.request("POST", f"{ppath}/signal", raw=b'{"signal": "TERM"}',
                            headers={"Content-Type": "text/plain"}), 415, "unsupported_media_type")

    # Bad signals and sizes.
    for sig in ["BOGUS", "term", "SIGBOGUS", 0, 65, -9, 15.5, None, [15], ""]:
        check_error(api.request("POST", f"{ppath}/signal", body={"signal": sig}), 400, "invalid_argument")
    check_error(api.request("POST", f"{ppath}/signal", body={}), 400, "invalid_argument")
    for size in [{"rows": 0, "cols": 80}, {"rows": 24, "cols": 1001}, {"rows": "24", "cols": 80},
                 {"rows": 24}, {"rows": -1, "cols": -1}, {"rows": 24.5, "cols": 80}]:
        check_error(api.request("POST", f"{ppath}/resize", body=size), 400, "invalid_argument")
    for pty in [{"rows": 0, "cols": 80}, {"rows": 24, "cols": 1001}, "24x80"]:
        check_error(api.request("POST", f"{b}/processes", body={"cmd": ["sh"], "pty": pty}), 400,
                    "invalid_argument")

    # Bad query arguments.
    for q in ["output?from=middle", "output?follow=yes", "output?from=", "wait?timeout_s=abc",
              "wait?timeout_s=-1", "wait?timeout_s=3601", "wait?timeout_s=1.5"]:
        check_error(api.request("GET", f"{ppath}/{q}"), 400, "invalid_argument")
    check_error(api.request("POST", f"{ppath}/stdin?eof=maybe", raw=b"x"), 400, "invalid_argument")

    # attach without the upgrade headers, or with another protocol.
    check_error(api.request("GET", f"{ppath}/attach"), 400, "invalid_argument")
    check_error(api.request("GET", f"{ppath}/attach", headers={"Connection": "Upgrade", "Upgrade": "websocket"}),
                400, "invalid_argument")

    # Bodies on routes that take none; wrong methods.
    check_error(api.request("GET", f"{ppath}/wait?timeout_s=1", raw=b"{}",
                            headers={"Content-Type": "application/json"}), 400, "invalid_argument")
    check_error(api.request("DELETE", f"{ppath}"), 405, "method_not_allowed")
    check_error(api.request("PUT", f"{b}/processes"), 405, "method_not_allowed")

    # Nothing of that touched the running process.
    assert get_process(api, sandbox, running["id"])["state"] == "running"
    r = api.request("POST", f"{ppath}/signal", body={"signal": "KILL"})
    assert r.status == 204, r
    assert wait_process(api, sandbox, running["id"])["signal"] == 9


def test_disconnects_leave_no_process(daemon, api, sandbox):
    """Clients that go away mid-stream: a streamed exec's process dies with
    its request; a follower of a background process does not kill it; an
    archive download that is cut stops its tar."""
    s = Stream(daemon.socket, "POST", f"{base(sandbox)}/exec",
               body={"cmd": ["sh", "-c", "while :; do echo tick-5150; sleep 0.1; done"], "stream": True})
    assert s.status == 200, s.error_body()
    pid = s.next_line()["process_id"]
    s.read_until(lambda l: l["type"] == "stdout", "a tick")
    s.close()
    wait_until(lambda: get_process(api, sandbox, pid)["state"] == "exited", 60, "the streamed exec to end")
    wait_until(lambda: not guest_pids(api, sandbox["id"], "tick-5150"), 30, "no leftover loop in the guest")

    bg = start_process(api, sandbox, cmd=["sh", "-c", "while :; do echo tock-6160; sleep 0.1; done"])
    f = Stream(daemon.socket, "GET", f"{base(sandbox)}/processes/{bg['id']}/output?follow=true")
    assert f.status == 200, f.error_body()
    f.read_until(lambda l: l["type"] == "stdout", "a tock")
    f.close()
    time.sleep(1)  # lets the daemon notice the disconnect; the check below is not timed
    assert get_process(api, sandbox, bg["id"])["state"] == "running"
    assert api.request("POST", f"{base(sandbox)}/processes/{bg['id']}/signal", body={"signal": 9}).status == 204
    wait_process(api, sandbox, bg["id"])

    # A cut archive download: tar of a big tree, closed after a few bytes.
    api.exec_ok(sandbox["id"], ["sh", "-c", "mkdir -p /dev/shm/cut && head -c 8388608 /dev/urandom > "
                                            "/dev/shm/cut/blob"])
    d = Stream(daemon.socket, "GET", f"{base(sandbox)}/archive?path=/dev/shm/cut")
    assert d.status == 200
    assert d.read_bytes(512)
    d.close()
    wait_until(lambda: not guest_pids(api, sandbox["id"], "tar -C /dev/shm"), 30, "the archive's tar to end")
    api.exec_ok(sandbox["id"], ["rm", "-rf", "/dev/shm/cut"])
