# SPDX-License-Identifier: Apache-2.0
"""Tenants, tokens and quotas over the TCP listener; the event log; the
Prometheus endpoint; metadata filters (docs/api.md). One daemon with
`--listen 127.0.0.1:PORT` (loopback only) for the module."""
import json
import re

import pytest

from apiutil import ListeningDaemon, Stream, TcpApi, free_port
from conftest import _report_on_failure

UNKNOWN_ID = "sb-0123456789abcdef"


@pytest.fixture(scope="module")
def ld(tmp_path_factory):
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-tcp"), free_port()).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def admin(ld, request):
    """The unix socket: the admin interface."""
    yield ld.api
    _report_on_failure(request, ld)


@pytest.fixture(scope="module")
def tokens(ld):
    out = {}
    for tenant in ("a", "b"):
        r = ld.api.request("POST", "/v1/tokens", body={"tenant": tenant, "description": f"test {tenant}"})
        assert r.status == 201, r
        assert re.fullmatch(r"alk_[A-Za-z0-9_-]{43}", r.json["token"]), r
        assert r.json["tenant"] == tenant and r.json["id"].startswith("tok-") and r.json["revoked_at"] is None, r
        out[tenant] = r.json
    return out


@pytest.fixture(scope="module")
def meta_sandbox(ld):
    """A sandbox of tenant default with metadata, created over the unix socket."""
    sb = ld.api.create_ok(metadata={"team": "blue", "stage": "ci"})
    yield sb
    ld.api.delete(sb["id"])


def tcp(ld, tokens, tenant):
    return TcpApi(ld.port, tokens[tenant]["token"])


def check_error(r, status, code=None):
    assert r.status == status, r
    assert isinstance(r.json, dict) and set(r.json) == {"error"}, r
    if code:
        assert r.json["error"]["code"] == code, r
    assert r.json["error"]["message"].strip(), r


def events(api, query=""):
    r = api.request("GET", "/v1/events" + query)
    assert r.status == 200, r
    assert r.headers.get("Content-Type", "").startswith("application/x-ndjson"), r.headers
    return [json.loads(l) for l in r.raw.splitlines() if l.strip()]


def last_seq(api):
    ev = events(api)
    return ev[-1]["seq"] if ev else 0


# ------------------------------------------------------------------ tenants and auth

def test_tenants_and_auth(ld, admin, tokens):
    a, b = tcp(ld, tokens, "a"), tcp(ld, tokens, "b")
    seq0 = last_seq(admin)

    # A creates a sandbox over TCP; it belongs to tenant a.
    r = a.request("POST", "/v1/sandboxes", body={"template": "minimal", "vcpus": 1, "memory_mib": 256})
    assert r.status == 201, r
    sb = r.json
    sid = sb["id"]
    assert sb["tenant"] == "a" and sb["state"] == "running", sb
    assert a.request("GET", f"/v1/sandboxes/{sid}").status == 200
    assert [s["id"] for s in a.request("GET", "/v1/sandboxes").json["sandboxes"]] == [sid]
    r = a.request("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": ["echo", "mine"]})
    assert r.status == 200 and r.json["stdout"] == "mine\n", r

    # B cannot see, list, exec in, start processes in, read files of, or delete it.
    check_error(b.request("GET", f"/v1/sandboxes/{sid}"), 404, "not_found")
    assert sid not in [s["id"] for s in b.request("GET", "/v1/sandboxes?all=true").json["sandboxes"]]
    check_error(b.request("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": ["true"]}), 404, "not_found")
    check_error(b.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["true"]}), 404, "not_found")
    check_error(b.request("GET", f"/v1/sandboxes/{sid}/files/stat?path=/"), 404, "not_found")
    check_error(b.request("GET", f"/v1/sandboxes/{sid}/metrics"), 404, "not_found")
    check_error(b.request("DELETE", f"/v1/sandboxes/{sid}"), 404, "not_found")
    # B's 404 is the same as for a sandbox that does not exist.
    check_error(b.request("GET", f"/v1/sandboxes/{UNKNOWN_ID}"), 404, "not_found")
    assert admin.get(sid).json["state"] == "running"
    # B sees none of A's events.
    assert all(e["tenant"] == "b" for e in events(b)), events(b)
    assert not [e for e in events(b) if e["sandbox"] == sid]
    # A token cannot create for another tenant.
    check_error(a.request("POST", "/v1/sandboxes", body={"tenant": "b"}), 403, "forbidden")

    # No token, a malformed one, an unknown one, a revoked one: 401 and an event each.
    check_error(TcpApi(ld.port).request("GET", "/v1/sandboxes"), 401, "unauthorized")
    check_error(TcpApi(ld.port).request("GET", "/healthz"), 401, "unauthorized")
    check_error(a.request("GET", "/v1/sandboxes", headers={"Authorization": "Basic YTpi"}), 401, "unauthorized")
    check_error(TcpApi(ld.port, "alk_" + "x" * 43).request("GET", "/v1/sandboxes"), 401, "unauthorized")
    extra = admin.request("POST", "/v1/tokens", body={"tenant": "a", "description": "to revoke"}).json
    revoked = TcpApi(ld.port, extra["token"])
    assert revoked.request("GET", "/v1/sandboxes").status == 200
    assert admin.request("DELETE", f"/v1/tokens/{extra['id']}").status == 204
    check_error(revoked.request("GET", "/v1/sandboxes"), 401, "unauthorized")
    check_error(admin.request("DELETE", f"/v1/tokens/{extra['id']}"), 404, "not_found")
    listed = {t["id"]: t for t in admin.request("GET", "/v1/tokens").json["tokens"]}
    assert listed[extra["id"]]["revoked_at"] and "token" not in listed[extra["id"]], listed
    failures = events(admin, f"?type=auth.failure&since={seq0}")
    reasons = [e["data"]["reason"] for e in failures]
    assert reasons.count("missing") >= 2 and "malformed" in reasons and "revoked" in reasons, failures
    assert "unknown" in reasons, failures
    assert all(e["data"]["remote"] == "127.0.0.1" for e in failures), failures

    # Admin-only routes over TCP: 403, whatever the token.
    for method, path, body in [("POST", "/v1/tokens", {"tenant": "a"}), ("GET", "/v1/tokens", None),
                               ("DELETE", f"/v1/tokens/{tokens['b']['id']}", None),
                               ("PUT", "/v1/tenants/a", {"max_sandboxes": 100})]:
        check_error(a.request(method, path, body=body), 403, "forbidden")
    assert b.request("GET", "/v1/sandboxes").status == 200  # b's token still works

    # Quotas: a may have one sandbox; the second create is 429 with a clear message.
    r = admin.request("PUT", "/v1/tenants/a", body={"max_sandboxes": 1})
    assert r.status == 200 and r.json["quotas"]["max_sandboxes"] == 1, r
    before = len(admin.list(all=True))
    r = a.request("POST", "/v1/sandboxes", body={"template": "minimal"})
    check_error(r, 429, "quota_exceeded")
    msg = r.json["error"]["message"]
    assert "1" in msg and "sandbox" in msg, msg
    assert len(admin.list(all=True)) == before, "a refused create left a record"
    r = admin.request("POST", "/v1/sandboxes", body={"tenant": "a"})
    check_error(r, 429, "quota_exceeded")
    t = admin.request("GET", "/v1/tenants/a")
    assert t.status == 200, t
    assert t.json == {"name": "a", "quotas": {"max_sandboxes": 1, "max_vcpus": 0, "max_memory_mib": 0,
                                               "max_snapshot_mib": 0},
                      "usage": {"sandboxes": 1, "vcpus": 1, "memory_mib": 256}}, t
    assert a.request("GET", "/v1/tenants/a").json == t.json  # its own, over TCP
    check_error(a.request("GET", "/v1/tenants/b"), 404, "not_found")
    check_error(admin.request("PUT", "/v1/tenants/a", body={"max_sandboxes": -1}), 400, "invalid_argument")
    check_error(admin.request("PUT", "/v1/tenants/a", body={"max_cpus": 1}), 400, "invalid_argument")
    check_error(admin.request("PUT", "/v1/tenants/Not_Valid", body={}), 400, "invalid_argument")
    check_error(admin.request("POST", "/v1/tokens", body={"tenant": "BAD NAME"}), 400, "invalid_argument")
    check_error(admin.request("POST", "/v1/tokens", body={}), 400, "invalid_argument")

    # A deletes its own; usage drops; the quota lets it create again (not done: a boot).
    r = a.request("DELETE", f"/v1/sandboxes/{sid}")
    assert r.status == 200 and r.json["state"] == "deleted", r
    assert admin.request("GET", "/v1/tenants/a").json["usage"]["sandboxes"] == 0
    assert admin.request("PUT", "/v1/tenants/a", body={}).json["quotas"]["max_sandboxes"] == 0

    # One token.created and one token.revoked event per token.
    created = [e for e in events(admin, "?type=token.created") if extra["id"] in json.dumps(e["data"])]
    revoked_ev = [e for e in events(admin, "?type=token.revoked") if extra["id"] in json.dumps(e["data"])]
    assert len(created) == 1 and len(revoked_ev) == 1, (created, revoked_ev)


# ------------------------------------------------------------------ metadata filters

def test_metadata_filters(ld, admin, meta_sandbox):
    sid = meta_sandbox["id"]
    assert meta_sandbox["metadata"] == {"team": "blue", "stage": "ci"}
    ids = lambda q: [s["id"] for s in admin.request("GET", "/v1/sandboxes" + q).json["sandboxes"]]
    assert sid in ids("?metadata.team=blue")
    assert sid in ids("?metadata.team=blue&metadata.stage=ci")
    assert sid in ids("?metadata.team=blue&all=true")
    assert ids("?metadata.team=red") == []
    assert ids("?metadata.team=blue&metadata.stage=prod") == []
    assert ids("?metadata.owner=blue") == []
    assert all(s["metadata"].get("team") == "blue"
               for s in admin.request("GET", "/v1/sandboxes?metadata.team=blue").json["sandboxes"])
    for q in ["?bogus=1", "?metadata.=x", "?metadata." + "k" * 65 + "=v", "?meta.team=blue",
              "?" + "&".join(f"metadata.k{i}=v" for i in range(17))]:
        check_error(admin.request("GET", "/v1/sandboxes" + q), 400, "invalid_argument")


# ------------------------------------------------------------------ events

def test_events(ld, admin, meta_sandbox):
    sid = meta_sandbox["id"]
    # Follow mode: a new event arrives while the request is open.
    since = last_seq(admin)
    follow = Stream(ld.socket, "GET", f"/v1/events?sandbox={sid}&follow=true&since={since}")
    try:
        assert follow.status == 200, follow.error_body()
        r = admin.exec_ok(sid, ["sh", "-c", "exit 4"])
        ev = follow.read_until(lambda e: e["type"] == "exec.exit", "the exec.exit event")
        assert ev["sandbox"] == sid and ev["data"]["exit_code"] == 4 and ev["data"]["signal"] is None, ev
        assert ev["data"]["process_id"] == r["process_id"] and isinstance(ev["data"]["duration_ms"], int), (ev, r)
        assert all(e["seq"] > since for e in follow.lines), follow.lines
    finally:
        follow.close()

    admin.delete_ok(sid)
    mine = events(admin, f"?sandbox={sid}")
    seqs = [e["seq"] for e in mine]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    for e in mine:
        assert set(e) == {"seq", "time", "type", "tenant", "sandbox", "data"}, e
        assert e["sandbox"] == sid and e["tenant"] == "default", e

    # Filters: type prefix, since, bad arguments.
    only_state = events(admin, f"?sandbox={sid}&type=sandbox.")
    assert only_state == [e for e in mine if e["type"] == "sandbox.state"], only_state
    only_exec = events(admin, f"?sandbox={sid}&type=exec.")
    assert only_exec and only_exec == [e for e in mine if e["type"].startswith("exec.")], only_exec
    assert events(admin, f"?sandbox={sid}&type=exec.exit") == [e for e in mine if e["type"] == "exec.exit"]
    running = [e for e in mine if e["type"] == "sandbox.state" and e["data"]["state"] == "running"][0]
    after = events(admin, f"?sandbox={sid}&since={running['seq']}")
    assert after == [e for e in mine if e["seq"] > running["seq"]], after
    assert events(admin, f"?sandbox={sid}&since={mine[-1]['seq']}") == []
    # since=now: none of the history, and what happens later (a token's event here).
    assert events(admin, f"?sandbox={sid}&since=now") == []
    assert events(admin, "?since=now") == []
    assert events(admin, f"?sandbox={UNKNOWN_ID}") == []
    for q in ["?since=abc", "?since=-1", "?since=NOW", "?since=now1", "?follow=maybe", "?type=Bad!", "?sandbox=a/b", "?type=" + "a" * 65]:
        check_error(admin.request("GET", "/v1/events" + q), 400, "invalid_argument")

    # The lifecycle, in order: every state change, and the exec's start and exit.
    states = [e["data"]["state"] for e in mine if e["type"] == "sandbox.state"]
    assert states == ["creating", "running", "stopping", "deleted"], states
    kinds = [e["type"] if e["type"] != "sandbox.state" else e["data"]["state"] for e in mine]
    assert "exec.start" in kinds, f"no exec.start event for the exec: {kinds}"
    assert kinds.index("running") < kinds.index("exec.start") < kinds.index("exec.exit") < kinds.index("stopping"), \
        kinds
    start = [e for e in mine if e["type"] == "exec.start"][0]
    assert start["data"] == {"process_id": r["process_id"], "cmd": ["sh", "-c", "exit 4"]}, start


# ------------------------------------------------------------------ /metrics

def parse_prometheus(text):
    types, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return types, samples


def test_prometheus_metrics(ld, admin, tokens):
    r = admin.request("GET", "/metrics")
    assert r.status == 200, r
    assert r.headers.get("Content-Type", "").startswith("text/plain"), r.headers
    assert "version=0.0.4" in r.headers["Content-Type"], r.headers
    types, s1 = parse_prometheus(r.raw.decode())
    assert types == {**types, "airlock_sandboxes": "gauge", "airlock_sandbox_create_seconds": "histogram",
                     "airlock_exec_seconds": "histogram", "airlock_api_requests_total": "counter",
                     "airlock_errors_total": "counter", "airlock_boot_failures_total": "counter"}, types
    for state in ("creating", "running", "stopping", "stopped", "error", "deleted"):
        assert f'airlock_sandboxes{{state="{state}"}}' in s1, state
    for h in ("airlock_sandbox_create_seconds", "airlock_exec_seconds"):
        assert f'{h}_bucket{{le="+Inf"}}' in s1 and f"{h}_count" in s1 and f"{h}_sum" in s1, h
        assert s1[f'{h}_bucket{{le="+Inf"}}'] == s1[f"{h}_count"], h
    assert s1['airlock_sandbox_create_seconds_count'] >= 2  # the sandboxes of this module
    assert "airlock_boot_failures_total" in s1

    # Counters move: a 404 and an error code, 200s.
    check_error(admin.request("GET", f"/v1/sandboxes/{UNKNOWN_ID}"), 404, "not_found")
    admin.healthz()
    _, s2 = parse_prometheus(admin.request("GET", "/metrics").raw.decode())
    assert s2['airlock_api_requests_total{code="404"}'] >= s1.get('airlock_api_requests_total{code="404"}', 0) + 1
    assert s2['airlock_api_requests_total{code="200"}'] >= s1['airlock_api_requests_total{code="200"}'] + 2
    assert s2['airlock_errors_total{code="not_found"}'] == s1['airlock_errors_total{code="not_found"}'] + 1
    # /metrics is the operator's (host-wide numbers of every tenant): a token gets 403, and nothing of it.
    r = tcp(ld, tokens, "b").request("GET", "/metrics")
    assert r.status == 403 and r.json["error"]["code"] == "forbidden", r
    assert b"airlock_" not in r.raw, r
