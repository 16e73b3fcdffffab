# SPDX-License-Identifier: Apache-2.0
"""`airlock mcp` on the wire, without a daemon or a VM: JSON-RPC over stdio and
streamable HTTP by hand (version negotiation, the error codes, the size limit,
sessions, Origin), and the rule that every MCP tool maps to documented API
routes and every route of docs/api/openapi.yaml is a tool's or listed in
docs/mcp.md with a reason. (tests/integration/test_mcp.py drives it with the
official client against a real daemon.)"""
import http.client
import json
import os
import re
import subprocess
import time

import pytest

from conftest import AIRLOCK, AIRLOCKD, ROOT

NO_DAEMON = {"AIRLOCK_SOCKET": "/nonexistent/airlockd.sock", "PATH": os.environ.get("PATH", "")}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def stdio_exchange(lines):
    """Sends raw lines (str or dict) to `airlock mcp`; answers, one per line out."""
    data = "".join((json.dumps(m) if isinstance(m, dict) else m) + "\n" for m in lines)
    r = subprocess.run([AIRLOCK, "mcp"], input=data.encode(), env=NO_DAEMON, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(l) for l in r.stdout.decode().splitlines()]


def call(i, name, args):
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}}


def test_stdio_protocol():
    out = stdio_exchange([
        call(0, "list_sandboxes", {}),  # before initialize
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        "not json",
        '[{"jsonrpc":"2.0","id":3,"method":"ping"}]',
        {"jsonrpc": "2.0", "id": 4, "method": "no/such/method"},
        call(5, "no_such_tool", {}),
        call(6, "read_file", {"sandbox_id": "sb-1"}),
        call(7, "read_file", {"sandbox_id": "sb-1", "path": "/x", "extra": 1}),
        call(8, "list_sandboxes", {}),
        {"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 10, "result": {}},  # a response: ignored
        {"jsonrpc": "2.0", "id": 11, "method": "resources/read", "params": {"uri": "file:///etc/passwd"}},
    ])
    by_id = {json.dumps(m.get("id")): m for m in out}
    assert by_id["0"]["error"]["code"] == -32600
    assert by_id["1"]["result"]["protocolVersion"] == "2025-06-18"
    assert by_id["1"]["result"]["capabilities"]["tools"] is not None
    assert by_id["2"]["result"] == {}
    nulls = [m for m in out if m["id"] is None]
    assert [m["error"]["code"] for m in nulls] == [-32700, -32600]
    assert by_id["4"]["error"]["code"] == -32601
    assert by_id["5"]["error"]["code"] == -32602 and "Unknown tool" in by_id["5"]["error"]["message"]
    # 2025-06-18: arguments that do not match the schema are a protocol error.
    assert by_id["6"]["error"]["code"] == -32602 and '"path"' in by_id["6"]["error"]["message"]
    assert by_id["7"]["error"]["code"] == -32602 and "extra" in by_id["7"]["error"]["message"]
    # The daemon is unreachable: a tool error the model can read.
    r8 = by_id["8"]["result"]
    assert r8["isError"] is True and "cannot reach airlockd" in r8["content"][0]["text"]
    names = {t["name"] for t in by_id["9"]["result"]["tools"]}
    assert {"run_command", "expose_port", "list_ports"} <= names
    assert by_id["11"]["error"]["code"] == -32002
    assert "10" not in by_id  # nothing answers a response or a notification
    assert len(out) == 12


def test_stdio_negotiation_and_new_revision():
    init = dict(INIT, params=dict(INIT["params"], protocolVersion="2025-11-25"))
    out = stdio_exchange([init, call(2, "read_file", {"sandbox_id": "sb-1"})])
    assert out[0]["result"]["protocolVersion"] == "2025-11-25"
    # 2025-11-25: invalid arguments are a tool error.
    assert out[1]["result"]["isError"] is True
    unknown = dict(INIT, params=dict(INIT["params"], protocolVersion="1999-01-01"))
    assert stdio_exchange([unknown])[0]["result"]["protocolVersion"] == "2025-11-25"


def test_stdio_size_limit():
    big = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + "a" * (8 << 20) + '"}}'
    out = stdio_exchange([big, {"jsonrpc": "2.0", "id": 2, "method": "ping"}])
    assert out[0]["id"] is None and out[0]["error"]["code"] == -32600
    assert "8388608" in out[0]["error"]["message"]
    assert out[1]["id"] == 2  # the stream goes on after the long line


@pytest.fixture
def http_server():
    p = subprocess.Popen([AIRLOCK, "mcp", "--http", "127.0.0.1:0"], env=NO_DAEMON, stderr=subprocess.PIPE)
    line = p.stderr.readline().decode()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", line)
    assert m, line
    yield int(m.group(1))
    p.terminate()
    assert p.wait(timeout=10) == 0


def post(port, body, headers=None, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    c.request("POST", "/mcp", body=raw if raw is not None else json.dumps(body), headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r, (json.loads(data) if data and r.getheader("Content-Type", "").startswith("application/json") else data)


def test_http_sessions_and_errors(http_server):
    port = http_server
    r, body = post(port, INIT)
    assert r.status == 200 and body["result"]["protocolVersion"] == "2025-06-18"
    sid = r.getheader("Mcp-Session-Id")
    assert re.fullmatch(r"[0-9a-f]{32}", sid)
    s = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"}
    r, _ = post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, s)
    assert r.status == 202
    r, body = post(port, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, s)
    assert r.status == 200 and body["id"] == 2 and body["result"]["tools"]
    r, body = post(port, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert r.status == 400 and body["error"]["code"] == -32600
    r, _ = post(port, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, {"Mcp-Session-Id": "0" * 32})
    assert r.status == 404
    r, _ = post(port, {"jsonrpc": "2.0", "id": 5, "method": "ping"}, dict(s, **{"MCP-Protocol-Version": "1.0"}))
    assert r.status == 400
    r, body = post(port, None, s, raw="{not json")
    assert r.status == 400 and body["error"]["code"] == -32700 and body["id"] is None
    r, _ = post(port, None, dict(s, **{"Content-Type": "text/plain"}), raw="{}")
    assert r.status == 415
    r, _ = post(port, INIT, {"Origin": "http://evil.example"})
    assert r.status == 403
    r, body = post(port, INIT, {"Origin": "http://localhost:3000"})
    assert r.status == 200
    r, body = post(port, None, s, raw=json.dumps({"jsonrpc": "2.0", "id": 6, "method": "ping", "params": {
        "x": "a" * (8 << 20)}}))
    assert r.status == 413
    # A tools/call with a progress token answers an SSE stream (the daemon is down: one message).
    r, body = post(port, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "list_sandboxes", "arguments": {}, "_meta": {"progressToken": "t"}}}, s)
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    events = [json.loads(l[6:]) for l in body.decode().splitlines() if l.startswith("data: ")]
    assert events[-1]["id"] == 7 and events[-1]["result"]["isError"] is True
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/mcp", headers=s)
    assert c.getresponse().status == 405
    c.close()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("DELETE", "/mcp", headers=s)
    assert c.getresponse().status == 200
    c.close()
    r, _ = post(port, {"jsonrpc": "2.0", "id": 8, "method": "ping"}, s)
    assert r.status == 404


def test_http_loopback_only():
    r = subprocess.run([AIRLOCK, "mcp", "--http", "0.0.0.0:8765"], env=NO_DAEMON, stderr=subprocess.PIPE,
                       timeout=10)
    assert r.returncode == 2 and b"loopback" in r.stderr


# ------------------------------------------------------------ route coverage

def openapi_routes():
    routes, cur = set(), None
    for line in open(os.path.join(ROOT, "docs", "api", "openapi.yaml")):
        m = re.match(r"^  (/\S*):\s*$", line)
        if m:
            cur = m.group(1)
            continue
        m = re.match(r"^    (get|post|put|delete|patch):", line)
        if m and cur:
            routes.add(f"{m.group(1).upper()} {cur}")
    return routes


def daemon_routes():
    """The routes airlockd serves (--print-routes), less E2B's (/e2b/: not this API)."""
    out = subprocess.run([AIRLOCKD, "--print-routes"], stdout=subprocess.PIPE, check=True, timeout=30).stdout
    return {l.strip() for l in out.decode().splitlines() if l.strip() and " /e2b/" not in l}


def mcp_doc_tables():
    """docs/mcp.md: {tool: {routes}} from the tools table, {route: reason} of the exclusions."""
    text = open(os.path.join(ROOT, "docs", "mcp.md")).read()
    tools_part = text.split("## Tools", 1)[1].split("\n## ", 1)[0]
    excl_part = text.split("## API routes that are not tools", 1)[1].split("\n## ", 1)[0]
    route_re = r"`((?:GET|POST|PUT|DELETE|PATCH) /[^`]*)`"
    tools = {}
    for line in tools_part.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and re.fullmatch(r"`[a-z_]+`", cells[1]):
            tools[cells[1].strip("`")] = set(re.findall(route_re, cells[2]))
    excluded = {}
    for line in excl_part.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and re.fullmatch(route_re, cells[1]):
            excluded[cells[1].strip("`")] = cells[2]
    return tools, excluded


def test_every_tool_maps_to_documented_routes():
    out = stdio_exchange([INIT, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}])
    names = {t["name"] for t in out[1]["result"]["tools"]}
    tools, excluded = mcp_doc_tables()
    routes = openapi_routes()
    assert routes, "no routes parsed from openapi.yaml"
    assert daemon_routes() <= routes, f"airlockd serves routes openapi.yaml lacks: {daemon_routes() - routes}"
    assert names == set(tools), f"tools/list and docs/mcp.md differ: {names ^ set(tools)}"
    for name, rs in tools.items():
        assert rs, f"docs/mcp.md names no API route for the tool {name}"
        assert rs <= routes, f"{name}: routes not in openapi.yaml: {rs - routes}"
    covered = set().union(*tools.values())
    assert set(excluded) <= routes, f"docs/mcp.md excludes routes openapi.yaml lacks: {set(excluded) - routes}"
    assert all(excluded.values()), "every excluded route needs a reason"
    missing = routes - covered - set(excluded)
    assert not missing, f"routes neither a tool's nor excluded (with a reason) in docs/mcp.md: {sorted(missing)}"
    assert not (covered & set(excluded)), f"routes both a tool's and excluded: {covered & set(excluded)}"


def test_http_sessions_bounded(http_server):
    """At most 64 sessions: the least recently used one makes room for a new one."""
    ids = []
    for _ in range(65):
        r, _ = post(http_server, INIT)
        assert r.status == 200
        ids.append(r.getheader("Mcp-Session-Id"))
    assert len(set(ids)) == 65
    r, _ = post(http_server, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, {"Mcp-Session-Id": ids[0]})
    assert r.status == 404
    r, _ = post(http_server, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, {"Mcp-Session-Id": ids[-1]})
    assert r.status == 200


def test_http_bearer_token():
    env = dict(NO_DAEMON, AIRLOCK_MCP_HTTP_TOKEN="s3cret")
    p = subprocess.Popen([AIRLOCK, "mcp", "--http", "127.0.0.1:0"], env=env, stderr=subprocess.PIPE)
    try:
        port = int(re.search(r":(\d+)/mcp", p.stderr.readline().decode()).group(1))
        assert post(port, INIT)[0].status == 401
        assert post(port, INIT, {"Authorization": "Bearer s3cre"})[0].status == 401
        assert post(port, INIT, {"Authorization": "Bearer s3cret2"})[0].status == 401
        assert post(port, INIT, {"Authorization": "Basic s3cret"})[0].status == 401
        assert post(port, INIT, {"Authorization": "Bearer s3cret"})[0].status == 200
    finally:
        p.terminate()
        p.wait(timeout=10)
