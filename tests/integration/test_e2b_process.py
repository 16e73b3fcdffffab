# SPDX-License-Identifier: Apache-2.0
"""E2B's process service (envd's process.Process, Connect protocol, JSON
codec) on the wire, what the SDK cannot show: a Start stream's envelopes and
its end-of-stream, malformed envelopes, unknown pids, wrong tokens, and a
process that outlives its stream (docs/e2b.md, "Processes (envd)"). One
daemon and one `base` sandbox for the module."""
import base64
import http.client
import json
import time

import pytest

from e2butil import (END_STREAM, STREAM_CT, ConnectStream, basic_auth, e2b_daemon_start, e2b_daemon_stop,
                     envd_headers, envd_token, envelope)


@pytest.fixture(scope="module")
def e2b(tmp_path_factory):
    d = e2b_daemon_start(tmp_path_factory, name="airlockd-e2b-process")
    yield d
    e2b_daemon_stop(d)


@pytest.fixture(scope="module")
def sb(e2b):
    rec = e2b.api.create_ok(template="base", vcpus=1, memory_mib=512)
    yield Envd(e2b.port, rec["id"], envd_token(e2b, rec))
    e2b.api.delete(rec["id"])


def b64(data):
    return base64.b64encode(data).decode()


class Call(ConnectStream):
    """A Start or Connect stream: envelopes of process events."""

    def event(self):
        flags, msg = self.next()
        assert flags == 0, (flags, msg)
        assert set(msg) == {"event"} and len(msg["event"]) == 1, msg
        (kind, value), = msg["event"].items()
        return kind, value

    def until_end(self):
        """Events up to the end event (keepalives dropped), then the end-of-stream."""
        events = []
        while True:
            flags, msg = self.next()
            if flags & END_STREAM:
                return events, msg
            (kind, value), = msg["event"].items()
            if kind != "keepalive":
                events.append((kind, value))


class Envd:
    def __init__(self, port, sid, token):
        self.port, self.sid, self.token = port, sid, token

    def headers(self, content_type, extra=None, token=None):
        return envd_headers(self.sid, token or self.token, content_type, extra)

    def unary(self, rpc, msg, headers=None, raw=None, token=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("POST", f"/e2b/envd/process.Process/{rpc}",
                         body=raw if raw is not None else json.dumps(msg).encode(),
                         headers=self.headers("application/json", headers, token))
            r = conn.getresponse()
            body = r.read()
            return r.status, json.loads(body) if body.strip() else None
        finally:
            conn.close()

    def stream(self, rpc, msg, headers=None, raw=None, token=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", f"/e2b/envd/process.Process/{rpc}", body=raw if raw is not None else envelope(msg),
                     headers=self.headers(STREAM_CT, headers, token))
        return Call(conn, conn.getresponse())

    def run(self, script, headers=None, **fields):
        """Start, read to the end: (stdout, stderr, end event, end-of-stream)."""
        msg = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", script]}}
        msg.update(fields)
        c = self.stream("Start", msg, headers=headers)
        try:
            assert c.status == 200 and c.content_type.startswith(STREAM_CT), (c.status, c.content_type)
            kind, start = c.event()
            assert kind == "start" and set(start) == {"pid"} and start["pid"] > 0, (kind, start)
            events, eos = c.until_end()
        finally:
            c.close()
        out = b"".join(base64.b64decode(v["stdout"]) for k, v in events if k == "data" and "stdout" in v)
        err = b"".join(base64.b64decode(v["stderr"]) for k, v in events if k == "data" and "stderr" in v)
        ends = [v for k, v in events if k == "end"]
        assert len(ends) == 1 and events[-1][0] == "end", events
        return out.decode(), err.decode(), ends[0], eos

    def running(self):
        status, body = self.unary("List", {})
        assert status == 200, body
        return {p["pid"]: p for p in body["processes"]}


def test_start_stream_envelopes(sb):
    out, err, end, eos = sb.run("echo out; echo err >&2; exit 3")
    assert (out, err) == ("out\n", "err\n")
    assert end == {"exitCode": 3, "exited": True, "status": "exit status 3", "error": "exit status 3"}, end
    assert eos == {}, eos
    out, _, end, _ = sb.run("printf ok")
    assert out == "ok" and end == {"exitCode": 0, "exited": True, "status": "exit status 0"}, end


def test_user_cwd_env(sb):
    out, _, _, _ = sb.run("whoami; pwd; echo $HOME $USER $GREETING")
    assert out == "user\n/home/user\n/home/user user\n", out
    out, _, _, _ = sb.run("whoami; pwd; echo $HOME $GREETING", headers=basic_auth("root"),
                          process={"cmd": "/bin/bash", "args": ["-l", "-c", "whoami; pwd; echo $HOME $GREETING"],
                                   "envs": {"GREETING": "hi"}, "cwd": "/tmp"})
    assert out == "root\n/tmp\n/root hi\n", out
    # A relative cwd is under the user's home.
    out, _, _, _ = sb.run("", process={"cmd": "pwd", "cwd": "."})
    assert out == "/home/user\n", out


def test_malformed_requests(sb):
    # A stream's errors come as 200 and an end-of-stream envelope.
    for raw in (b"\x00\x00\x00", envelope(b"{not json"), envelope({"process": {}}, flags=1),
                envelope({}) + envelope({})):
        c = sb.stream("Start", None, raw=raw)
        try:
            assert c.status == 200 and c.content_type.startswith(STREAM_CT), c.status
            flags, msg = c.next()
            assert flags == END_STREAM and msg["error"]["code"] == "invalid_argument", (raw, msg)
            assert msg["error"]["message"], msg
        finally:
            c.close()
    c = sb.stream("Start", {"process": {"args": ["x"]}})
    flags, msg = c.next()
    c.close()
    assert flags == END_STREAM and msg["error"]["code"] == "invalid_argument" and "cmd" in msg["error"]["message"]
    for timeout in ("soon", "86400001"):
        c = sb.stream("Start", {"process": {"cmd": "true"}}, headers={"Connect-Timeout-Ms": timeout})
        flags, msg = c.next()
        c.close()
        assert flags == END_STREAM and msg["error"]["code"] == "invalid_argument", (timeout, msg)
        assert "Connect-Timeout-Ms" in msg["error"]["message"], msg
    # A unary call's errors are a Connect error body with the code's status.
    status, body = sb.unary("SendSignal", None, raw=b"{nope")
    assert status == 400 and body["code"] == "invalid_argument", (status, body)
    status, body = sb.unary("SendSignal", {"process": {"pid": 1}, "signal": "SIGNAL_SIGHUP"})
    assert status == 400 and body["code"] == "invalid_argument", (status, body)
    # StreamInput (client streaming) is not served, and says so.
    c = sb.stream("StreamInput", {"start": {"process": {"pid": 1}}})
    flags, msg = c.next()
    c.close()
    assert flags == END_STREAM and msg["error"]["code"] == "unimplemented" and "SendInput" in msg["error"]["message"]


def test_start_that_cannot_run(sb):
    # The process never ran (no such cwd): its stream says why.
    c = sb.stream("Start", {"process": {"cmd": "pwd", "cwd": "/no/such/dir"}})
    try:
        events, eos = c.until_end()
        assert [k for k, _ in events] == ["start"], events
        assert eos["error"]["code"] == "invalid_argument" and "/no/such/dir" in eos["error"]["message"], eos
    finally:
        c.close()
    # A user the guest does not have is refused before anything runs.
    c = sb.stream("Start", {"process": {"cmd": "true"}}, headers=basic_auth("nobody-here"))
    try:
        flags, msg = c.next()
        assert flags == END_STREAM and msg["error"]["code"] == "invalid_argument", msg
    finally:
        c.close()


def test_unknown_pid(sb):
    status, body = sb.unary("SendSignal", {"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"})
    assert status == 404 and body["code"] == "not_found", (status, body)
    status, body = sb.unary("SendInput", {"process": {"tag": "nope"}, "input": {"stdin": b64(b"x")}})
    assert status == 404 and body["code"] == "not_found", (status, body)
    c = sb.stream("Connect", {"process": {"pid": 999999}})
    flags, msg = c.next()
    c.close()
    assert flags == END_STREAM and msg["error"]["code"] == "not_found", msg


def test_wrong_token(sb):
    status, body = sb.unary("List", {}, token="ea_" + "0" * 64)
    assert status == 401 and body["code"] == "unauthenticated", (status, body)
    c = sb.stream("Start", {"process": {"cmd": "true"}}, token="wrong")
    try:
        flags, msg = c.next()
        assert flags == END_STREAM and msg["error"]["code"] == "unauthenticated", msg
    finally:
        c.close()


def test_disconnect_leaves_it_running_and_connect_reattaches(sb):
    c = sb.stream("Start", {"process": {"cmd": "cat", "envs": {"MARK": "m"}}, "stdin": True, "tag": "the-cat"})
    kind, start = c.event()
    assert kind == "start"
    pid = start["pid"]
    c.close()  # the client goes away: the process stays
    time.sleep(1)
    procs = sb.running()
    assert pid in procs and procs[pid]["tag"] == "the-cat", procs
    config = procs[pid]["config"]
    assert set(config) == {"cmd", "args", "envs", "cwd"}, config
    assert config["cmd"] == "cat" and config["args"] == [] and config["cwd"] == "/home/user", config
    assert config["envs"]["MARK"] == "m", config
    c = sb.stream("Connect", {"process": {"tag": "the-cat"}}, headers={"Keepalive-Ping-Interval": "1"})
    try:
        assert c.event() == ("start", {"pid": pid})
        status, body = sb.unary("SendInput", {"process": {"pid": pid}, "input": {"stdin": b64(b"hello\n")}})
        assert status == 200 and body == {}, (status, body)
        kind, value = c.event()
        while kind == "keepalive":
            kind, value = c.event()
        assert (kind, value) == ("data", {"stdout": b64(b"hello\n")})
        # Quiet: keepalives come at the client's interval.
        kind, value = c.event()
        assert (kind, value) == ("keepalive", {}), (kind, value)
        status, body = sb.unary("CloseStdin", {"process": {"pid": pid}})
        assert status == 200, body
        events, eos = c.until_end()
        assert events == [("end", {"exitCode": 0, "exited": True, "status": "exit status 0"})], events
        assert eos == {}
    finally:
        c.close()
    assert pid not in sb.running()
    # An ended process takes no more input and no signal.
    status, body = sb.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    assert status == 404 and body["code"] == "not_found", (status, body)


def test_signal_and_call_timeout(sb):
    c = sb.stream("Start", {"process": {"cmd": "sleep", "args": ["600"]}})
    kind, start = c.event()
    c.close()
    pid = start["pid"]
    # A Connect's timeout ends the stream, not the process.
    c = sb.stream("Connect", {"process": {"pid": pid}}, headers={"Connect-Timeout-Ms": "1500"})
    try:
        assert c.event() == ("start", {"pid": pid})
        events, eos = c.until_end()
        assert events == [] and eos["error"]["code"] == "deadline_exceeded", (events, eos)
    finally:
        c.close()
    assert pid in sb.running()
    c = sb.stream("Connect", {"process": {"pid": pid}})
    try:
        c.event()
        status, body = sb.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"})
        assert status == 200 and body == {}, (status, body)
        events, eos = c.until_end()
        end = {"exitCode": -1, "exited": False, "status": "signal: terminated", "error": "signal: terminated"}
        assert events == [("end", end)] and eos == {}, events
    finally:
        c.close()
    # A Start's timeout (E2B's timeoutMs) ends the process, as envd's does.
    out, _, end, _ = sb.run("echo begun; sleep 600", headers={"Connect-Timeout-Ms": "2000"})
    assert out == "begun\n" and end["exitCode"] == -1 and end["status"] == "signal: killed", end


def test_pty(sb):
    c = sb.stream("Start", {"process": {"cmd": "/bin/bash", "args": ["-i", "-l"], "envs": {"TERM": "xterm"}},
                            "pty": {"size": {"cols": 80, "rows": 24}}})
    try:
        kind, start = c.event()
        pid = start["pid"]
        status, body = sb.unary("SendInput", {"process": {"pid": pid}, "input": {"pty": b64(b"echo hi$((1+1))\n")}})
        assert status == 200, body
        seen = b""
        while b"hi2" not in seen:
            kind, value = c.event()
            if kind == "data":
                assert set(value) == {"pty"}, value
                seen += base64.b64decode(value["pty"])
        status, body = sb.unary("Update", {"process": {"pid": pid}, "pty": {"size": {"cols": 100, "rows": 30}}})
        assert status == 200 and body == {}, (status, body)
        sb.unary("SendInput", {"process": {"pid": pid}, "input": {"pty": b64(b"stty size\n")}})
        while b"30 100" not in seen:
            kind, value = c.event()
            if kind == "data":
                seen += base64.b64decode(value["pty"])
        status, body = sb.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        assert status == 200, body
        events, eos = c.until_end()
        assert events[-1][0] == "end" and events[-1][1]["status"] == "signal: killed" and eos == {}, events
    finally:
        c.close()


def test_much_output_in_order(sb):
    # More than the 1 MiB log: the stream is flow-controlled, nothing is lost.
    out, _, end, eos = sb.run("seq 1 400000")
    assert end["exitCode"] == 0 and eos == {}, end
    assert out == "".join(f"{i}\n" for i in range(1, 400001)), len(out)


def test_sandbox_deleted_under_a_stream(e2b, sb):
    # Last: a stream open while its sandbox goes ends with `unavailable` (the
    # SDK's "sandbox is probably not running anymore"), and the delete does
    # not wait for the stream.
    c = sb.stream("Start", {"process": {"cmd": "sleep", "args": ["600"]}})
    try:
        assert c.event()[0] == "start"
        t0 = time.monotonic()
        r = e2b.api.delete(sb.sid)
        assert r.status == 200, r
        events, eos = c.until_end()
        assert events == [] and eos["error"]["code"] == "unavailable", (events, eos)
        assert time.monotonic() - t0 < 30
    finally:
        c.close()
