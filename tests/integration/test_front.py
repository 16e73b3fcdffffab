# SPDX-License-Identifier: Apache-2.0
"""airlock-api, the cluster's front (issue 24, docs/cluster.md), against a real
PostgreSQL (pgserver.py) and no node: what the front answers itself.

Authentication (401s in both error shapes, a token made on the operator's
socket then accepted, a revoked one refused, 403 for operator routes),
tenants and quotas (429 before any node is asked), placement with no node
(503), sandboxes the index knows but no node holds (a paused row's GET,
DELETE, 409s; another tenant's is 404 as an unknown one), malformed heads
(400, 431), the schema made idempotently by two fronts at once, and /healthz.
Forwarding to real nodes is tests/integration/test_cluster.py's.
"""
import http.client
import json
import os
import socket
import subprocess
import time

import pytest

from apihttp import UnixHTTPConnection, exchange
from pgserver import PgServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
FRONT = os.path.join(BUILD, "airlock-api")
TIMEOUT_S = 30

PAUSED_ID = "sb-00000000000000a1"
LOST_ID = "sb-00000000000000a2"
OTHER_ID = "sb-00000000000000b1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Front:
    """One airlock-api process: TCP on .port, the operator's socket at .sock."""

    def __init__(self, pg, tmp, name="front"):
        self.port = free_port()
        self.sock = os.path.join(tmp, f"{name}.sock")
        self.key = os.path.join(tmp, "cluster.key")
        if not os.path.exists(self.key):
            with open(self.key, "wb") as f:
                f.write(os.urandom(32))
            os.chmod(self.key, 0o600)
        self.log = open(os.path.join(tmp, f"{name}.log"), "w+")
        self.proc = subprocess.Popen(
            [FRONT, "--cluster-db", pg.conninfo, "--cluster-key-file", self.key, "--listen",
             f"127.0.0.1:{self.port}", "--socket", self.sock, "--reaper-interval-ms", "200"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + TIMEOUT_S
        while not os.path.exists(self.sock):
            assert self.proc.poll() is None, self.logs()
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.05)

    def logs(self):
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()

    def tcp(self, method, path, body=None, raw=None, headers=None, token=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT_S)
        return exchange(conn, method, path, body=body, raw=raw, headers=headers, token=token)

    def admin(self, method, path, body=None):
        return exchange(UnixHTTPConnection(self.sock, TIMEOUT_S), method, path, body=body)

    def raw(self, data):
        """Sends bytes as they are; the status of the answer and its body."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S) as s:
            s.sendall(data)
            got = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), body


@pytest.fixture(scope="module")
def pg():
    if not os.path.exists(FRONT):
        pytest.fail(f"{FRONT} is missing: make all")
    with PgServer() as server:
        yield server


@pytest.fixture(scope="module")
def front(pg, tmp_path_factory):
    f = Front(pg, str(tmp_path_factory.mktemp("front")))
    yield f
    f.stop()


def token_for(front, tenant):
    r = front.admin("POST", "/v1/tokens", {"tenant": tenant, "description": "test"})
    assert r.status == 201, r
    assert r.json["token"].startswith("alk_") and len(r.json["token"]) == 47
    return r.json


def add_row(pg, sid, tenant, state, snapshot="NULL", node="NULL"):
    record = json.dumps({"id": sid, "state": state, "template": "minimal", "vcpus": 1, "memory_mib": 256,
                         "tenant": tenant, "created_at": "2026-12-03T08:00:00.000Z"})
    pg.sql("INSERT INTO airlock_sandboxes (id, tenant, node, state, template, vcpus, memory_mib, record, snapshot)"
           f" VALUES ('{sid}', '{tenant}', {node}, '{state}', 'minimal', 1, 256, '{record}', {snapshot})")


def test_healthz_without_token(front, pg):
    r = front.tcp("GET", "/healthz")
    assert r.status == 200, r
    assert r.json == {"status": "ok", "role": "front", "nodes_up": 0}
    pg.sql("INSERT INTO airlock_nodes (name, url, epoch, state, lease_until)"
           " VALUES ('gone', 'http://127.0.0.1:1', 1, 'up', now() - interval '1 hour')")
    assert front.tcp("GET", "/healthz").json["nodes_up"] == 0  # a lapsed lease is not up


def test_unauthorized(front):
    for headers in ({}, {"Authorization": "Bearer alk_nope"}, {"Authorization": "Basic x"},
                    {"Authorization": "Bearer a b"}):
        r = front.tcp("GET", "/v1/sandboxes", headers=headers)
        assert r.status == 401, r
        assert r.error_code == "unauthorized" and r.error_message, r
    # E2B's control API: X-API-KEY, E2B's error body
    r = front.tcp("GET", "/e2b/v2/sandboxes", headers={"X-API-KEY": "e2b_nope"})
    assert r.status == 401, r
    assert r.json["code"] == 401 and "X-API-KEY" in r.json["message"], r


def test_token_lifecycle(front):
    t = token_for(front, "team-a")
    assert t["id"].startswith("tok-") and len(t["id"]) == 20
    assert t["tenant"] == "team-a" and t["revoked_at"] is None and t["created_at"].endswith("Z")
    r = front.tcp("GET", "/v1/tenants/team-a", token=t["token"])
    assert r.status == 200, r
    assert r.json["usage"] == {"sandboxes": 0, "vcpus": 0, "memory_mib": 0}
    listed = front.admin("GET", "/v1/tokens").json["tokens"]
    assert [x for x in listed if x["id"] == t["id"]][0].get("token") is None  # never the secret again
    # operator routes refuse tokens; another tenant is not found
    assert front.tcp("GET", "/v1/tokens", token=t["token"]).status == 403
    assert front.tcp("POST", "/v1/tokens", body={"tenant": "team-a"}, token=t["token"]).error_code == "forbidden"
    assert front.tcp("GET", "/v1/tenants/team-b", token=t["token"]).status == 404
    # revoked: 401 at once; a second revoke is 404
    assert front.admin("DELETE", f"/v1/tokens/{t['id']}").status == 204
    assert front.tcp("GET", "/v1/tenants/team-a", token=t["token"]).status == 401
    assert front.admin("DELETE", f"/v1/tokens/{t['id']}").status == 404


def test_websocket_subprotocol_token(front):
    """A browser's PTY attach carries its token as a subprotocol (docs/api.md)."""
    t = token_for(front, "team-w")
    path = "/v1/sandboxes/sb-0000000000000fff/processes/p-1/attach"
    ws = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
          "Sec-WebSocket-Version": "13"}
    r = front.tcp("GET", path, headers=dict(ws, **{"Sec-WebSocket-Protocol": "airlock.pty.v1, airlock.bearer.alk_x"}))
    assert r.status == 401 and "subprotocol" in r.error_message, r
    good = dict(ws, **{"Sec-WebSocket-Protocol": f"airlock.pty.v1, airlock.bearer.{t['token']}"})
    assert front.tcp("GET", path, headers=good).status == 404  # authenticated: an unknown sandbox
    # only on the attach: elsewhere the subprotocol is no credential
    r = front.tcp("GET", "/v1/sandboxes/sb-0000000000000fff/ports/80/connect", headers=good)
    assert r.status == 401, r


def test_reaper_takes_sandboxes_off_a_lost_node(front, pg):
    pg.sql("INSERT INTO airlock_nodes (name, url, epoch, state, lease_until)"
           " VALUES ('dead', 'http://127.0.0.1:1', 7, 'up', now() - interval '1 minute')")
    add_row(pg, "sb-00000000000000f1", "team-z", "running", snapshot="'cs-f1'", node="'dead'")
    add_row(pg, "sb-00000000000000f2", "team-z", "running", node="'dead'")
    add_row(pg, "sb-00000000000000f3", "team-z", "deleted", node="'dead'")
    deadline = time.monotonic() + TIMEOUT_S
    while pg.sql("SELECT state FROM airlock_nodes WHERE name = 'dead'") != ["lost"]:
        assert time.monotonic() < deadline, front.logs()
        time.sleep(0.1)
    assert pg.sql("SELECT epoch FROM airlock_nodes WHERE name = 'dead'") == ["8"]
    rows = pg.sql("SELECT id, coalesce(node, '-'), state, record->>'state' FROM airlock_sandboxes"
                  " WHERE tenant = 'team-z' ORDER BY id")
    # with a snapshot: recovering (no node is up to adopt it, so it stays so); without: lost
    assert rows == ["sb-00000000000000f1|-|recovering|recovering", "sb-00000000000000f2|-|lost|lost",
                    "sb-00000000000000f3|dead|deleted|deleted"]
    events = pg.sql("SELECT coalesce(sandbox, '-'), type FROM airlock_events WHERE node = 'dead' ORDER BY seq")
    assert sorted(events) == ["-|node.lost", "sb-00000000000000f1|sandbox.recovering",
                              "sb-00000000000000f2|sandbox.lost"]


def test_token_request_checked(front):
    for body in ({}, {"tenant": "Bad Name"}, {"tenant": "a", "x": 1}, {"tenant": "a", "description": "\n"}):
        r = front.admin("POST", "/v1/tokens", body)
        assert r.status == 400 and r.error_code == "invalid_argument", r
    r = exchange(UnixHTTPConnection(front.sock, TIMEOUT_S), "POST", "/v1/tokens", raw=b"{not json",
                 headers={"Content-Type": "application/json"})
    assert r.status == 400 and "not valid JSON" in r.error_message, r


def test_tenants_and_quota(front, pg):
    t = token_for(front, "quota-a")
    r = front.admin("PUT", "/v1/tenants/quota-a", {"max_sandboxes": 1, "max_memory_mib": 1024})
    assert r.status == 200, r
    assert r.json["quotas"] == {"max_sandboxes": 1, "max_vcpus": 0, "max_memory_mib": 1024, "max_snapshot_mib": 0}
    assert front.admin("PUT", "/v1/tenants/quota-a", {"max_sandboxes": -1}).status == 400
    assert front.admin("PUT", "/v1/tenants/BAD", {}).status == 400
    # memory: 2048 > 1024, refused before any node is asked
    r = front.tcp("POST", "/v1/sandboxes", body={"memory_mib": 2048}, token=t["token"])
    assert r.status == 429 and r.error_code == "quota_exceeded", r
    assert "1024 MiB" in r.error_message
    # one sandbox (paused, on no node) counts; a deleted or lost one does not
    add_row(pg, "sb-00000000000000c1", "quota-a", "paused", snapshot="'cs-x'")
    add_row(pg, "sb-00000000000000c2", "quota-a", "deleted")
    add_row(pg, "sb-00000000000000c3", "quota-a", "lost")
    r = front.tcp("POST", "/v1/sandboxes", body={}, token=t["token"])
    assert r.status == 429 and "at most 1 sandboxes and has 1" in r.error_message, r
    u = front.tcp("GET", "/v1/tenants/quota-a", token=t["token"]).json["usage"]
    assert u == {"sandboxes": 1, "vcpus": 1, "memory_mib": 256}


def test_no_node_is_503(front):
    t = token_for(front, "team-n")
    r = front.tcp("POST", "/v1/sandboxes", body={"template": "minimal"}, token=t["token"])
    assert r.status == 503 and r.error_code == "unavailable", r
    assert "minimal" in r.error_message
    r = front.tcp("POST", "/e2b/v2/sandboxes", body={}, headers={"X-API-KEY": t["token"]})
    assert r.status == 503 and r.json["code"] == 503 and "base" in r.json["message"], r
    r = front.tcp("POST", "/v1/sandboxes", body={"template": "../x"}, token=t["token"])
    assert r.status == 400, r
    r = front.tcp("POST", "/v1/sandboxes", raw=b"[1]", headers={"Content-Type": "application/json"},
                  token=t["token"])
    assert r.status == 400, r


def test_unknown_and_other_tenants_sandbox(front, pg):
    t = token_for(front, "team-s")
    add_row(pg, OTHER_ID, "someone-else", "paused", snapshot="'cs-y'")
    for sid in ("sb-0000000000000fff", OTHER_ID):
        r = front.tcp("GET", f"/v1/sandboxes/{sid}", token=t["token"])
        assert r.status == 404 and r.error_message == f'no sandbox with id "{sid}"', r
        r = front.tcp("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": ["true"]}, token=t["token"])
        assert r.status == 404, r
        r = front.tcp("GET", f"/e2b/sandboxes/{sid}", headers={"X-API-KEY": t["token"]})
        assert r.status == 404 and r.json["code"] == 404, r
    assert front.tcp("GET", "/v1/sandboxes/not-an-id", token=t["token"]).status == 404
    # the ports proxy's forms and envd need no token here (the node checks theirs): unknown is 404
    r = front.tcp("GET", "/", headers={"Host": "8000-sb-0000000000000fff.sandboxes.example"})
    assert r.status == 404, r
    assert front.tcp("GET", "/sandbox/sb-0000000000000fff/8000/").status == 404
    r = front.tcp("GET", "/e2b/envd/health", headers={"E2b-Sandbox-Id": "sb-0000000000000fff"})
    assert r.status == 404 and r.json["code"] == 404, r
    # the operator sees every tenant's
    assert front.admin("GET", f"/v1/sandboxes/{OTHER_ID}").status == 200


def test_paused_row(front, pg):
    t = token_for(front, "team-p")
    add_row(pg, PAUSED_ID, "team-p", "paused", snapshot="'cs-p'")
    add_row(pg, LOST_ID, "team-p", "lost")
    r = front.tcp("GET", f"/v1/sandboxes/{PAUSED_ID}", token=t["token"])
    assert r.status == 200 and r.json["id"] == PAUSED_ID and r.json["state"] == "paused", r
    r = front.tcp("GET", f"/e2b/sandboxes/{PAUSED_ID}", headers={"X-API-KEY": t["token"]})
    assert r.status == 200 and r.json["sandboxID"] == PAUSED_ID and r.json["state"] == "paused", r
    r = front.tcp("POST", f"/v1/sandboxes/{PAUSED_ID}/exec", body={"cmd": ["true"]}, token=t["token"])
    assert r.status == 409 and r.error_message == f"sandbox {PAUSED_ID} is paused: resume it first", r
    r = front.tcp("POST", f"/v1/sandboxes/{LOST_ID}/exec", body={"cmd": ["true"]}, token=t["token"])
    assert r.status == 409 and "was lost with its node and had no snapshot" in r.error_message, r
    # a resume with no node up to adopt it: 503, and the row stays as it was
    r = front.tcp("POST", f"/v1/sandboxes/{PAUSED_ID}/resume", token=t["token"])
    assert r.status == 503 and r.error_code == "unavailable", r
    # listed with the nodes' (none here)
    r = front.tcp("GET", "/v1/sandboxes", token=t["token"])
    assert r.status == 200, r
    assert {s["id"] for s in r.json["sandboxes"]} == {PAUSED_ID, LOST_ID}
    r = front.tcp("GET", "/e2b/v2/sandboxes", headers={"X-API-KEY": t["token"]})
    assert r.status == 200 and [s["sandboxID"] for s in r.json] == [PAUSED_ID], r
    # E2B: the state filter, and v1 lists running ones only
    r = front.tcp("GET", "/e2b/v2/sandboxes?state=running", headers={"X-API-KEY": t["token"]})
    assert r.status == 200 and r.json == [], r
    assert front.tcp("GET", "/e2b/sandboxes", headers={"X-API-KEY": t["token"]}).json == []
    # delete: the row is marked deleted, answered as airlockd does
    r = front.tcp("DELETE", f"/v1/sandboxes/{PAUSED_ID}", token=t["token"])
    assert r.status == 200 and r.json["state"] == "deleted", r
    assert pg.sql(f"SELECT state FROM airlock_sandboxes WHERE id = '{PAUSED_ID}'") == ["deleted"]
    assert front.tcp("GET", f"/v1/sandboxes/{PAUSED_ID}", token=t["token"]).json["state"] == "deleted"
    assert front.tcp("DELETE", f"/e2b/sandboxes/{PAUSED_ID}", headers={"X-API-KEY": t["token"]}).status == 404


def test_not_clustered_and_unknown_routes(front):
    t = token_for(front, "team-r")
    for method, path in (("GET", "/v1/pools"),):
        r = front.tcp(method, path, token=t["token"])
        assert r.status == 400 and "not available in cluster mode yet" in r.error_message, r
    # Secrets are a node's (kept in PostgreSQL): with no node up, 503.
    assert front.tcp("GET", "/v1/secrets", token=t["token"]).status == 503
    assert front.tcp("GET", "/v1/nothing", token=t["token"]).status == 404
    r = front.tcp("PUT", "/v1/sandboxes", token=t["token"])
    assert r.status == 405 and r.error_code == "method_not_allowed", r
    r = front.admin("GET", "/e2b/v2/sandboxes")
    assert r.status == 404 and "TCP listener" in r.json["message"], r  # E2B's error body


@pytest.mark.parametrize("head", [
    b"GET /healthz HTTP/1.1\nHost: x\n\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
    b"GET http://x/healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
    b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
])
def test_malformed_head(front, head):
    status, body = front.raw(head)
    assert status == 400, body
    assert json.loads(body)["error"]["code"] == "invalid_argument"


def test_head_limits(front):
    status, _ = front.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 17000 + b"\r\n\r\n")
    assert status == 431
    fields = b"".join(b"X-%d: v\r\n" % i for i in range(101))
    status, _ = front.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
    assert status == 431


def test_two_fronts_make_the_schema_once(pg, tmp_path):
    pg.sql("DROP TABLE IF EXISTS airlock_nodes, airlock_sandboxes, airlock_snapshots, airlock_tenants,"
           " airlock_tokens, airlock_secrets, airlock_templates, airlock_events")
    fronts = []
    try:
        procs_tmp = [str(tmp_path / "a"), str(tmp_path / "b")]
        for d in procs_tmp:
            os.mkdir(d)
        # both at once: the advisory lock orders them; both must come up
        fronts = [Front(pg, d, name) for d, name in zip(procs_tmp, ("a", "b"))]
        for f in fronts:
            assert f.tcp("GET", "/healthz").status == 200, f.logs()
        tables = pg.sql("SELECT tablename FROM pg_tables WHERE tablename LIKE 'airlock_%' ORDER BY 1")
        assert tables == ["airlock_events", "airlock_nodes", "airlock_sandboxes", "airlock_secrets",
                          "airlock_snapshots", "airlock_templates", "airlock_tenants", "airlock_tokens"]
        # a token made through one front works through the other
        t = token_for(fronts[0], "team-x")
        assert fronts[1].tcp("GET", "/v1/tenants/team-x", token=t["token"]).status == 200
    finally:
        for f in fronts:
            f.stop()


def test_healthz_503_without_database(tmp_path):
    pg = PgServer().start()
    f = Front(pg, str(tmp_path))
    try:
        assert f.tcp("GET", "/healthz").status == 200
        pg.stop()
        r = f.tcp("GET", "/healthz")
        assert r.status == 503 and r.error_code == "unavailable", r
    finally:
        f.stop()
        pg.stop()


def test_flags(tmp_path):
    r = subprocess.run([FRONT, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--cluster-db" in r.stdout
    r = subprocess.run([FRONT, "--listen", "127.0.0.1:1"], capture_output=True, text=True)
    assert r.returncode == 2 and "required" in r.stderr
    # the cluster key: 32+ bytes, a regular file others cannot read (as airlockd checks it)
    short, shared, link = tmp_path / "short.key", tmp_path / "shared.key", tmp_path / "link.key"
    short.write_bytes(b"x" * 8)
    short.chmod(0o600)
    shared.write_bytes(b"x" * 32)
    shared.chmod(0o644)
    link.symlink_to(short)
    for key, why in ((short, "32 to 4096 bytes"), (shared, "others cannot read"), (link, "cannot open")):
        r = subprocess.run([FRONT, "--cluster-db", "host=/nonexistent", "--cluster-key-file", str(key), "--listen",
                            "127.0.0.1:1"], capture_output=True, text=True)
        assert r.returncode == 2 and why in r.stderr, r.stderr
