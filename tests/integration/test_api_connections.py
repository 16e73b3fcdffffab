# SPDX-License-Identifier: Apache-2.0
"""The API listeners' own limits (docs/api.md, "Limits"), against a real
daemon: a connection that sends no request is closed after
--api-idle-timeout-s, a streamed answer or an upgraded connection is not,
however long it is silent; on TCP one client address holds at most
--api-max-connections-per-client connections, an idle one giving way to a
new one and a busy one never; failed authentications leave a bounded number
of auth.failure events (--auth-failure-burst, --auth-failure-per-min), the
rest in summaries, every one counted in /metrics."""
import http.client
import json
import select
import socket
import time

import pytest

from apiutil import ListeningDaemon, PtySession, Stream, TcpApi, free_port
from conftest import _report_on_failure, metrics

IDLE_S = 2
PER_CLIENT = 4
SILENCE_S = 2 * IDLE_S + 1  # longer than the idle timeout, with margin


@pytest.fixture(scope="module")
def ld(tmp_path_factory):
    d = ListeningDaemon(tmp_path_factory.mktemp("connections"), free_port(), extra_args=[
        "--api-idle-timeout-s", str(IDLE_S), "--api-max-connections", "32",
        "--api-max-connections-per-client", str(PER_CLIENT),
        "--auth-failure-burst", "5", "--auth-failure-per-min", "1"]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def api(ld, request):
    yield ld.api
    _report_on_failure(request, ld)


@pytest.fixture(scope="module")
def token(ld):
    r = ld.api.request("POST", "/v1/tokens", body={"tenant": "conn"})
    assert r.status == 201, r
    return r.json["token"]


@pytest.fixture(scope="module")
def sandbox(ld):
    sb = ld.api.create_ok(tenant="conn")
    yield sb
    ld.api.delete(sb["id"])


def events(api, query):
    r = api.request("GET", "/v1/events" + query)
    assert r.status == 200, r
    return [json.loads(line) for line in r.raw.splitlines() if line.strip()]


def last_seq(api):
    ev = events(api, "")
    return ev[-1]["seq"] if ev else 0


def seconds_until_closed(sock, limit_s):
    """How long until the peer closes sock (nothing is expected before)."""
    t0 = time.monotonic()
    sock.settimeout(limit_s)
    try:
        data = sock.recv(4096)
    except ConnectionResetError:
        data = b""
    except socket.timeout:
        raise AssertionError(f"the connection was still open after {limit_s} s")
    assert data == b"", data
    return time.monotonic() - t0


def is_open(sock):
    """Not closed by the peer (nothing to read, no EOF)."""
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return True
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except OSError:
        return False


def tcp_conn(ld, timeout=30):
    return http.client.HTTPConnection("127.0.0.1", ld.port, timeout=timeout)


def tcp_stream_exec(ld, token, sid, script):
    """A streamed exec over TCP; returns (connection, response) with the head read."""
    c = tcp_conn(ld, timeout=60)
    c.request("POST", f"/v1/sandboxes/{sid}/exec", body=json.dumps({"cmd": ["sh", "-c", script], "stream": True}),
              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    return c, r


def lines_of(resp):
    return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


# ------------------------------------------------------------------ idle timeout

def test_idle_connections_are_closed(ld, api, token):
    # A connection that never sends a request, on both listeners.
    s = socket.create_connection(("127.0.0.1", ld.port))
    took = seconds_until_closed(s, IDLE_S + 5)
    assert IDLE_S - 1 <= took <= IDLE_S + 3, took
    s.close()
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(ld.socket)
    took = seconds_until_closed(u, IDLE_S + 5)
    assert IDLE_S - 1 <= took <= IDLE_S + 3, took
    u.close()
    # A kept-alive connection after its request.
    c = tcp_conn(ld)
    c.request("GET", "/v1/sandboxes", headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Connection", "").lower() != "close", r.getheaders()
    r.read()
    took = seconds_until_closed(c.sock, IDLE_S + 5)
    assert took <= IDLE_S + 3, took
    c.close()


def test_streams_outlive_the_idle_timeout(ld, api, token, sandbox):
    script = f"echo before; sleep {SILENCE_S}; echo after"
    # Over TCP, with a token.
    c, r = tcp_stream_exec(ld, token, sandbox["id"], script)
    lines = lines_of(r)
    out = "".join(line.get("data", "") for line in lines if line["type"] == "stdout")
    assert out == "before\nafter\n" and lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0, lines
    # The same connection serves the next request at once, then idles out again.
    c.request("GET", "/v1/sandboxes", headers={"Authorization": f"Bearer {token}"})
    r2 = c.getresponse()
    assert r2.status == 200, r2.status
    r2.read()
    assert seconds_until_closed(c.sock, IDLE_S + 5) <= IDLE_S + 3
    c.close()
    # Over the unix socket.
    st = Stream(ld.socket, "POST", f"/v1/sandboxes/{sandbox['id']}/exec",
                body={"cmd": ["sh", "-c", script], "stream": True}, timeout=60)
    assert st.status == 200
    lines = st.read_all()
    st.close()
    assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0, lines
    assert [line["data"] for line in lines if line["type"] == "stdout"] == ["before\n", "after\n"], lines


def test_an_upgraded_connection_outlives_the_idle_timeout(ld, api, sandbox):
    r = api.request("POST", f"/v1/sandboxes/{sandbox['id']}/processes",
                    body={"cmd": ["sh"], "pty": {"rows": 24, "cols": 80}})
    assert r.status == 201, r
    pty = PtySession(ld.socket, sandbox["id"], r.json["id"])
    try:
        assert pty.status == 101, pty.head
        pty.keys("echo up-$((1+1))\r")
        pty.read_until("up-2")
        time.sleep(SILENCE_S)  # nothing either way
        pty.keys("echo still-$((2+2))\r")
        pty.read_until("still-4")
        pty.keys("exit 0\r")
        assert pty.wait_exit()["exit_code"] == 0
    finally:
        pty.close()


# ------------------------------------------------------------------ connections per client

def test_idle_connections_give_way(ld, api, token):
    before = metrics(api)
    idle = [socket.create_connection(("127.0.0.1", ld.port)) for _ in range(3 * PER_CLIENT)]
    try:
        time.sleep(0.3)
        # Another client behind the same address still gets in.
        r = TcpApi(ld.port, token).request("GET", "/v1/sandboxes", timeout=10)
        assert r.status == 200, r
        time.sleep(0.3)
        still = [s for s in idle if is_open(s)]
        assert len(still) <= PER_CLIENT, len(still)
        after = metrics(api)
        shed = 'airlock_api_connections_shed_total{listener="tcp"}'
        assert after[shed] - before[shed] >= 2 * PER_CLIENT + 1, (before[shed], after[shed])
        refused = 'airlock_api_connections_refused_total{listener="tcp"}'
        assert after[refused] == before[refused]
    finally:
        for s in idle:
            s.close()


def test_busy_connections_are_never_shed(ld, api, token, sandbox):
    before = metrics(api)
    streams = [tcp_stream_exec(ld, token, sandbox["id"], f"sleep {IDLE_S + 2}; echo done-{i}")
               for i in range(PER_CLIENT)]
    try:
        # Every connection of this address is answering a request: a new one is refused ...
        c = tcp_conn(ld, timeout=10)
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            c.request("GET", "/v1/sandboxes", headers={"Authorization": f"Bearer {token}"})
            c.getresponse().read()
        c.close()
        refused = 'airlock_api_connections_refused_total{listener="tcp"}'
        assert metrics(api)[refused] == before[refused] + 1
        # ... the operator's socket is not touched, and no stream was cut.
        assert api.healthz().status == 200
        for i, (conn, resp) in enumerate(streams):
            lines = lines_of(resp)
            assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0, lines
            assert [line["data"] for line in lines if line["type"] == "stdout"] == [f"done-{i}\n"], lines
    finally:
        for conn, _ in streams:
            conn.close()
    r = TcpApi(ld.port, token).request("GET", "/v1/sandboxes", timeout=10)
    assert r.status == 200, r


# ------------------------------------------------------------------ failed authentication

def test_failed_authentications_leave_bounded_events(ld, api):
    seq = last_seq(api)
    before = metrics(api)
    bad = TcpApi(ld.port, "alk_" + "q" * 43)
    # One client retrying the same bad request: one event, the rest counted.
    for _ in range(100):
        assert bad.request("GET", "/v1/sandboxes").status == 401
    # Another failure from the address is recorded, with the summary of the retries.
    assert TcpApi(ld.port).request("GET", "/v1/sandboxes").status == 401
    # Different tokens: the burst (5 an address: 2 used) is recorded, the rest counted.
    for i in range(10):
        assert TcpApi(ld.port, f"alk_{i:043d}").request("GET", "/v1/sandboxes").status == 401

    got = events(api, f"?type=auth.failure&since={seq}")
    plain = [e["data"] for e in got if "suppressed" not in e["data"]]
    summaries = [e["data"] for e in got if "suppressed" in e["data"]]
    assert [d["reason"] for d in plain] == ["unknown", "missing", "unknown", "unknown", "unknown"], got
    assert all(d["remote"] == "127.0.0.1" for d in plain), got
    assert summaries == [{"reason": "unknown", "remote": "127.0.0.1", "suppressed": 99,
                          "reasons": {"unknown": 99}}], got
    # The summary comes before the failure that carried it.
    assert "suppressed" in got[1]["data"] and got[2]["data"]["reason"] == "missing", got

    after = metrics(api)
    delta = {k: after[k] - before.get(k, 0) for k in after if k.startswith("airlock_auth_failures")}
    assert delta['airlock_auth_failures_total{reason="unknown"}'] == 110, delta
    assert delta['airlock_auth_failures_total{reason="missing"}'] == 1, delta
    assert delta["airlock_auth_failures_unrecorded_total"] == 99 + 7, delta
