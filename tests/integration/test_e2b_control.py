# SPDX-License-Identifier: Apache-2.0
"""E2B's control API over raw HTTP (docs/e2b.md, "Control API"): what the
SDK cannot show. Authentication by X-API-KEY and {"code","message"} errors,
tenants kept apart, X-Next-Token pages and the twice-encoded metadata
filter, 409 for pausing a paused sandbox, the network mapping within the
operator's ceiling, unknown templates and unsupported options, quotas. One
daemon, two sandboxes of the `base` template."""
import time
import urllib.parse

import pytest

from apiutil import TcpApi
from conftest import _report_on_failure
from e2butil import TENANT, e2b_daemon_start, e2b_daemon_stop

TEMPLATE = "base"
UNKNOWN_ID = "sb-0123456789abcdef"
ENVD_VERSION = "0.6.4"


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    daemon = e2b_daemon_start(tmp_path_factory, "airlockd-e2b-control")
    yield daemon
    e2b_daemon_stop(daemon)


@pytest.fixture(autouse=True)
def report(d, request):
    yield
    _report_on_failure(request, d)


class E2b:
    """E2B's control API as the SDK calls it: /e2b + E2B's path, X-API-KEY."""

    def __init__(self, port, key):
        self.tcp = TcpApi(port)
        self.key = key

    def __call__(self, method, path, body=None, key=None, headers=None, timeout=300):
        h = dict(headers or {})
        if key is not False:
            h["X-API-KEY"] = key or self.key
        return self.tcp.request(method, "/e2b" + path, body=body, headers=h, timeout=timeout)


@pytest.fixture(scope="module")
def e2b(d):
    return E2b(d.port, d.key)


@pytest.fixture(scope="module")
def other(d):
    return E2b(d.port, d.other_key)


def check_error(r, status, *needles):
    assert r.status == status, r
    assert isinstance(r.json, dict) and set(r.json) == {"code", "message"}, r
    assert r.json["code"] == status and r.json["message"].strip(), r
    for n in needles:
        assert n in r.json["message"], r


def header(r, name):
    for k, v in r.headers.items():
        if k.lower() == name.lower():
            return v
    return None


def metadata_query(pairs):
    """What the SDK sends: each key and value encodeURIComponent'ed, the pairs
    as URLSearchParams, the whole as one query value."""
    inner = urllib.parse.urlencode({urllib.parse.quote(k, safe=""): urllib.parse.quote(v, safe="")
                                    for k, v in pairs.items()})
    return "metadata=" + urllib.parse.quote(inner, safe="")


@pytest.fixture(scope="module")
def sandboxes(d, e2b):
    """Two sandboxes of the tenant: the first with a closed-world network, the
    second with the operator's default. Killed at the end."""
    made = []
    first = e2b("POST", "/v2/sandboxes", body={
        "templateID": TEMPLATE, "metadata": {"suite": "control", "which": "first", "odd key": "a&b=c+d"},
        "envVars": {"GREETING": "hi"}, "timeout": 600,
        "network": {"allowOut": ["example.com"], "denyOut": ["0.0.0.0/0", "evil.example.org", "example.com"]}})
    assert first.status == 201, first
    made.append(first.json)
    time.sleep(0.01)  # distinct start times
    second = e2b("POST", "/v2/sandboxes", body={"templateID": TEMPLATE, "metadata": {"suite": "control",
                                                                                       "which": "second"},
                                                 "autoPause": True})
    assert second.status == 201, second
    made.append(second.json)
    yield made
    for sb in made:
        e2b("DELETE", f"/sandboxes/{sb['sandboxID']}")


# ------------------------------------------------------------------ authentication

def test_missing_or_wrong_key_is_401(d, e2b):
    for key in (False, "nope", "alk_" + "x" * 43):
        for method, path in (("GET", "/v2/sandboxes"), ("POST", "/v2/sandboxes"), ("GET", f"/sandboxes/{UNKNOWN_ID}")):
            r = e2b(method, path, body={"templateID": TEMPLATE} if method == "POST" else None, key=key)
            check_error(r, 401, "X-API-KEY")
    # An Airlock bearer token is not how the E2B routes authenticate.
    r = e2b("GET", "/v2/sandboxes", key=False, headers={"Authorization": f"Bearer {d.key}"})
    check_error(r, 401)


def test_unknown_sandbox_is_404(e2b):
    for method, path in (("GET", f"/sandboxes/{UNKNOWN_ID}"), ("DELETE", f"/sandboxes/{UNKNOWN_ID}"),
                         ("POST", f"/sandboxes/{UNKNOWN_ID}/pause"), ("POST", f"/v2/sandboxes/{UNKNOWN_ID}/connect"),
                         ("POST", f"/sandboxes/{UNKNOWN_ID}/timeout"), ("GET", "/sandboxes/not-an-id")):
        body = {"timeout": 30} if path.endswith(("timeout", "connect")) else None
        check_error(e2b(method, path, body=body), 404)


# ------------------------------------------------------------------ create refusals (nothing boots)

@pytest.mark.parametrize("body,needle", [
    ({}, "templateID"),
    ({"templateID": "no-such-template"}, "unknown template"),
    ({"templateID": "Not/A Name"}, "template"),
    ({"templateID": TEMPLATE, "bogus": 1}, "bogus"),
    ({"templateID": TEMPLATE, "timeout": 0}, "timeout"),
    ({"templateID": TEMPLATE, "envVars": {"1BAD": "x"}}, "env"),
    ({"templateID": TEMPLATE, "mcp": {"x": {}}}, "mcp"),
    ({"templateID": TEMPLATE, "autoResume": {"enabled": "yes"}}, "autoResume"),
    ({"templateID": TEMPLATE, "autoResume": {"enabled": True, "x": 1}}, "autoResume"),
    ({"templateID": TEMPLATE, "volumeMounts": [{"name": "v", "path": "/v"}]}, "volume"),
    # E2B opens the internet unless told otherwise; Airlock cannot.
    ({"templateID": TEMPLATE, "allow_internet_access": True}, "whole internet"),
    ({"templateID": TEMPLATE, "network": {"allowOut": ["example.com"]}}, "whole internet"),
    ({"templateID": TEMPLATE, "network": {"denyOut": ["evil.example.org"]}}, "whole internet"),
    # Within the operator's ceiling (public addresses only by default): 400, not less.
    ({"templateID": TEMPLATE, "network": {"allowOut": ["10.0.0.0/8"], "denyOut": ["0.0.0.0/0"]}}, "ceiling"),
    ({"templateID": TEMPLATE, "allow_internet_access": False, "network": {"allowOut": ["169.254.169.254"]}},
     "ceiling"),
    ({"templateID": TEMPLATE, "network": {"allowOut": ["0.0.0.0/0"], "denyOut": ["0.0.0.0/0"]}}, "ceiling"),
    ({"templateID": TEMPLATE, "network": {"allowOut": ["*bad"], "denyOut": ["0.0.0.0/0"]}}, "network"),
    ({"templateID": TEMPLATE, "network": {"egressProxy": {"address": "p:1080"}}}, "egressProxy"),
    ({"templateID": TEMPLATE, "network": {"rules": {"a.com": [{}]}}}, "rules"),
])
def test_create_refused(e2b, body, needle):
    check_error(e2b("POST", "/v2/sandboxes", body=body), 400, needle)


def test_unsupported_endpoints_say_so(e2b):
    for method, path in (("POST", f"/sandboxes/{UNKNOWN_ID}/fork"), ("POST", f"/sandboxes/{UNKNOWN_ID}/snapshots"),
                         ("GET", "/snapshots"), ("DELETE", "/templates/base")):
        check_error(e2b(method, path, body={} if method == "POST" else None), 400, "not supported")


# ------------------------------------------------------------------ with sandboxes

def test_create_answer(e2b, sandboxes):
    for sb in sandboxes:
        assert sb["sandboxID"].startswith("sb-") and sb["templateID"] == TEMPLATE, sb
        assert sb["envdVersion"] == ENVD_VERSION and sb["clientID"], sb
        assert sb["envdAccessToken"].startswith("ea_") and len(sb["envdAccessToken"]) == 67, sb
        # No ports proxy in this daemon: getHost has no domain; the traffic token is always given.
        assert sb["domain"] is None, sb
        assert sb["trafficAccessToken"].startswith("att_") and len(sb["trafficAccessToken"]) == 68, sb
    assert sandboxes[0]["envdAccessToken"] != sandboxes[1]["envdAccessToken"]


def test_get(d, e2b, sandboxes):
    first = sandboxes[0]
    r = e2b("GET", f"/sandboxes/{first['sandboxID']}")
    assert r.status == 200, r
    j = r.json
    assert j["sandboxID"] == first["sandboxID"] and j["templateID"] == TEMPLATE and j["state"] == "running", j
    assert j["envdAccessToken"] == first["envdAccessToken"] and j["envdVersion"] == ENVD_VERSION, j
    assert j["cpuCount"] == 1 and j["memoryMB"] == 512 and j["diskSizeMB"] > 0, j
    assert j["metadata"] == {"suite": "control", "which": "first", "odd key": "a&b=c+d"}, j
    assert j["lifecycle"] == {"onTimeout": "kill", "autoResume": False}, j
    started, end = (time.mktime(time.strptime(j[k][:19], "%Y-%m-%dT%H:%M:%S")) for k in ("startedAt", "endAt"))
    assert 0 < end - time.mktime(time.gmtime()) <= 600, j
    assert end > started, j
    # The network mapping: allowOut wins over denyOut as in E2B; everything else is denied.
    assert j["network"] == {"allowOut": ["example.com"], "denyOut": ["0.0.0.0/0", "evil.example.org"]}, j
    native = d.api.request("GET", f"/v1/sandboxes/{first['sandboxID']}")
    assert native.status == 200, native
    assert native.json["network"] == {"allow": ["example.com"], "deny": ["evil.example.org"]}, native
    assert native.json["env"] == {"GREETING": "hi"} and native.json["tenant"] == TENANT, native
    assert native.json["timeout_s"] == 600, native
    second = e2b("GET", f"/sandboxes/{sandboxes[1]['sandboxID']}").json
    assert second["lifecycle"]["onTimeout"] == "pause", second
    # No network asked: the operator's default (deny everything here).
    assert second["network"] == {"allowOut": [], "denyOut": ["0.0.0.0/0"]}, second
    assert d.api.request("GET", f"/v1/sandboxes/{sandboxes[1]['sandboxID']}").json["timeout_s"] == 300


def test_list_pages_and_filters(e2b, sandboxes):
    ids = [sb["sandboxID"] for sb in sandboxes]
    r = e2b("GET", "/v2/sandboxes")
    assert r.status == 200 and isinstance(r.json, list), r
    assert [s["sandboxID"] for s in r.json] == ids[::-1], r  # newest first
    assert header(r, "X-Next-Token") is None, r.headers
    listed = r.json[0]
    for k in ("sandboxID", "templateID", "clientID", "cpuCount", "memoryMB", "diskSizeMB", "endAt", "envdVersion",
              "metadata", "startedAt", "state"):
        assert k in listed, listed
    assert "envdAccessToken" not in listed, listed

    seen, token, pages = [], None, 0
    while True:
        r = e2b("GET", "/v2/sandboxes?limit=1" + (f"&nextToken={urllib.parse.quote(token)}" if token else ""))
        assert r.status == 200 and len(r.json) == 1, r
        seen += [s["sandboxID"] for s in r.json]
        pages += 1
        token = header(r, "X-Next-Token")
        if not token:
            break
        assert pages < 5, "pagination does not end"
    assert seen == ids[::-1] and pages == 2, seen
    r = e2b("GET", "/v2/sandboxes?limit=1&order=asc")
    assert [s["sandboxID"] for s in r.json] == ids[:1] and header(r, "X-Next-Token"), r

    r = e2b("GET", "/v2/sandboxes?" + metadata_query({"which": "first"}))
    assert [s["sandboxID"] for s in r.json] == ids[:1], r
    r = e2b("GET", "/v2/sandboxes?" + metadata_query({"odd key": "a&b=c+d", "suite": "control"}))
    assert [s["sandboxID"] for s in r.json] == ids[:1], r
    r = e2b("GET", "/v2/sandboxes?" + metadata_query({"which": "third"}))
    assert r.status == 200 and r.json == [], r
    r = e2b("GET", "/v2/sandboxes?template=" + TEMPLATE)
    assert len(r.json) == 2, r
    r = e2b("GET", "/v2/sandboxes?template=minimal")
    assert r.json == [], r
    r = e2b("GET", "/v2/sandboxes?startedAfter=2099-01-01T00:00:00.000Z")
    assert r.json == [], r

    for q, needle in (("limit=0", "limit"), ("limit=101", "limit"), ("nextToken=forged", "nextToken"),
                      ("state=gone", "state"), ("order=up", "order"), ("startedAfter=yesterday", "startedAfter"),
                      ("metadata=novalue", "metadata"), ("metadata=" + urllib.parse.quote("k=%zz"), "metadata")):
        check_error(e2b("GET", "/v2/sandboxes?" + q), 400, needle)


def test_other_tenant_sees_nothing(e2b, other, sandboxes):
    sid = sandboxes[0]["sandboxID"]
    r = other("GET", "/v2/sandboxes")
    assert r.status == 200 and r.json == [], r
    assert other("GET", "/sandboxes").json == []
    for method, path, body in (("GET", f"/sandboxes/{sid}", None), ("DELETE", f"/sandboxes/{sid}", None),
                               ("POST", f"/sandboxes/{sid}/pause", None),
                               ("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 60}),
                               ("POST", f"/sandboxes/{sid}/timeout", {"timeout": 60}),
                               ("PUT", f"/sandboxes/{sid}/network", {"allow_internet_access": False}),
                               ("GET", f"/sandboxes/{sid}/metrics", None)):
        check_error(other(method, path, body=body), 404)
    assert e2b("GET", f"/sandboxes/{sid}").json["state"] == "running"


def test_timeout(e2b, sandboxes):
    sid = sandboxes[0]["sandboxID"]
    r = e2b("POST", f"/sandboxes/{sid}/timeout", body={"timeout": 1200})
    assert r.status == 204, r
    end = e2b("GET", f"/sandboxes/{sid}").json["endAt"]
    left = time.mktime(time.strptime(end[:19], "%Y-%m-%dT%H:%M:%S")) - time.mktime(time.gmtime())
    assert 1100 < left <= 1200, end
    check_error(e2b("POST", f"/sandboxes/{sid}/timeout", body={}), 400, "timeout")
    check_error(e2b("POST", f"/sandboxes/{sid}/timeout", body={"timeout": "soon"}), 400, "timeout")


def test_network_update(d, e2b, sandboxes):
    sid = sandboxes[0]["sandboxID"]
    r = e2b("PUT", f"/sandboxes/{sid}/network", body={"allowOut": ["api.example.net"], "denyOut": ["0.0.0.0/0"]})
    assert r.status == 204, r
    assert d.api.request("GET", f"/v1/sandboxes/{sid}").json["network"] == {"allow": ["api.example.net"],
                                                                           "deny": []}
    check_error(e2b("PUT", f"/sandboxes/{sid}/network", body={"allowOut": ["10.1.2.3"], "denyOut": ["0.0.0.0/0"]}),
                400, "ceiling")
    check_error(e2b("PUT", f"/sandboxes/{sid}/network", body={"allow_internet_access": True}), 400, "whole internet")
    assert d.api.request("GET", f"/v1/sandboxes/{sid}").json["network"]["allow"] == ["api.example.net"]
    r = e2b("PUT", f"/sandboxes/{sid}/network", body={"allow_internet_access": False})
    assert r.status == 204, r
    assert d.api.request("GET", f"/v1/sandboxes/{sid}").json["network"] == {"allow": [], "deny": []}


def test_metrics(e2b, sandboxes):
    r = e2b("GET", f"/sandboxes/{sandboxes[0]['sandboxID']}/metrics")
    assert r.status == 200 and isinstance(r.json, list) and len(r.json) == 1, r
    m = r.json[0]
    assert m["cpuCount"] == 1 and 0 <= m["cpuUsedPct"] <= 100, m
    assert 0 < m["memUsed"] < m["memTotal"] and 0 < m["diskUsed"] < m["diskTotal"], m


def test_pause_conflict_and_connect(d, e2b, sandboxes):
    sid = sandboxes[1]["sandboxID"]
    r = e2b("POST", f"/sandboxes/{sid}/pause")
    assert r.status == 204, r
    check_error(e2b("POST", f"/sandboxes/{sid}/pause"), 409, "already paused")
    assert e2b("GET", f"/sandboxes/{sid}").json["state"] == "paused"
    r = e2b("GET", "/v2/sandboxes?state=paused")
    assert [s["sandboxID"] for s in r.json] == [sid], r
    r = e2b("GET", "/v2/sandboxes?state=running")
    assert sid not in [s["sandboxID"] for s in r.json], r
    assert sid not in [s["sandboxID"] for s in e2b("GET", "/sandboxes").json]  # v1 lists running ones
    check_error(e2b("POST", f"/v2/sandboxes/{sid}/connect", body={"memory": False}), 400, "reboot")
    r = e2b("POST", f"/v2/sandboxes/{sid}/connect", body={"timeout": 900})
    assert r.status == 201, r
    assert r.json["sandboxID"] == sid and r.json["envdAccessToken"] == sandboxes[1]["envdAccessToken"], r
    assert e2b("GET", f"/sandboxes/{sid}").json["state"] == "running"
    assert d.api.request("GET", f"/v1/sandboxes/{sid}").json["timeout_s"] == 900
    # Running: 200, and a shorter timeout does not shorten it.
    r = e2b("POST", f"/v2/sandboxes/{sid}/connect", body={"timeout": 30})
    assert r.status == 200 and r.json["sandboxID"] == sid, r
    assert d.api.request("GET", f"/v1/sandboxes/{sid}").json["timeout_s"] == 900
    check_error(e2b("POST", f"/sandboxes/{sid}/resume", body={}), 409, "already running")


def test_quota(d, e2b, sandboxes):
    r = d.api.request("PUT", f"/v1/tenants/{TENANT}", body={"max_sandboxes": len(sandboxes)})
    assert r.status == 200, r
    try:
        check_error(e2b("POST", "/v2/sandboxes", body={"templateID": TEMPLATE}), 429, "at most")
    finally:
        assert d.api.request("PUT", f"/v1/tenants/{TENANT}", body={}).status == 200


def test_kill(e2b, other, sandboxes):
    sid = sandboxes[0]["sandboxID"]
    check_error(other("DELETE", f"/sandboxes/{sid}"), 404)
    r = e2b("DELETE", f"/sandboxes/{sid}")
    assert r.status == 204, r
    check_error(e2b("DELETE", f"/sandboxes/{sid}"), 404, "killed")
    check_error(e2b("GET", f"/sandboxes/{sid}"), 404)
    check_error(e2b("POST", f"/v2/sandboxes/{sid}/connect", body={}), 404)
    assert sid not in [s["sandboxID"] for s in e2b("GET", "/v2/sandboxes").json]
