# SPDX-License-Identifier: Apache-2.0
"""Category 5: control-API abuse, as a hostile client. Over the TCP
listener with tenant mallory's token (or none), and over the unix socket
where the attack is on the server itself (sizes, parsers, connections).
Each refusal must change nothing: no record, no file, no VMM, no lost
service for the other clients."""
import json
import os
import resource
import socket
import threading
import time

import pytest

import secutil as su
from secutil import attempt

MIB = 1024 * 1024


def state(secd):
    """What a refused request must not change."""
    api = secd.api
    return {"sandboxes": sorted((s["id"], s["state"]) for s in api.list(all=True)),
            "snapshots": sorted(os.listdir(os.path.join(secd.state_dir, "snapshots")))
            if os.path.isdir(os.path.join(secd.state_dir, "snapshots")) else [],
            "dirs": secd.sandbox_dirs(), "qemus": sorted(secd.qemus())}


def healthy(api, within_s=5.0):
    t0 = time.monotonic()
    r = api.request("GET", "/healthz", timeout=within_s + 5)
    took = time.monotonic() - t0
    assert r.status == 200 and took < within_s, (r, took)
    return took


# ------------------------------------------------------------------ names that could become paths

def test_path_tricks_in_names(api, secd, peer, tcp):
    pid = peer["id"]

    def snap(name):
        return api.request("POST", f"/v1/sandboxes/{pid}/snapshots", body={"name": name})

    for slug, name, what in (("snapshot-name-dotdot", "../../../../tmp/airlock-sec-snap", "../ in a snapshot name"),
                             ("snapshot-name-absolute", "/etc/airlock-sec-snap", "an absolute path as a snapshot name")):
        with attempt("api", slug, what):
            r = snap(name)
            assert r.status in (201, 400), r
            if r.status == 201:  # a label: the files live under snapshots/<id>, the name is never a path
                sdir = os.path.join(secd.state_dir, "snapshots", r.json["id"])
                try:
                    assert os.path.isdir(sdir) and r.json["name"] == name, r
                    assert not os.path.lexists("/tmp/airlock-sec-snap") and not os.path.lexists("/etc/airlock-sec-snap")
                    assert all(e.startswith("snap-") for e in os.listdir(os.path.dirname(sdir)))
                finally:
                    assert api.request("DELETE", f"/v1/snapshots/{r.json['id']}").status == 204

    with attempt("api", "snapshot-name-bad", "snapshot names with NUL, control characters, 10000 bytes"):
        before = state(secd)
        for name in ("a\u0000b", "x\n\r\u001b[31m", "n" * 10000, ""):
            r = snap(name)
            assert r.status == 400, (name[:20], r)
        assert state(secd) == before

    with attempt("api", "template-names", "template names that are paths: ../, absolute, NUL, upper case, 300 bytes, ."):
        before = state(secd)
        for t in ("../minimal", "/work/main/build/images/templates/minimal", "minimal/../base", "minimal\u0000",
                  "MINIMAL", "m" * 300, ".", "..", "%2e%2e", "minimal\n", " minimal", "templates/minimal"):
            r = api.create(template=t)
            assert r.status == 400, (t, r)
        assert state(secd) == before

    with attempt("api", "snapshot-ids", "snapshot ids that are paths, in restores and in URLs"):
        before = state(secd)
        for sid in ("snap-../../../../etc", "snap-0123456789abcdeg", "../snapshots/x", "snap-" + "0" * 200):
            r = api.create(snapshot=sid)
            assert r.status == 400, (sid, r)
        for path in ("/v1/snapshots/..%2F..%2Fetc", "/v1/snapshots/snap-0123456789abcdef/../../tokens",
                     "/v1/snapshots/%2e%2e", "/v1/snapshots/snap-0123456789abcdef%00"):
            r = api.request("GET", path)
            assert r.status in (400, 404), (path, r)
        assert state(secd) == before

    with attempt("api", "url-traversal-to-admin", "as tenant mallory: admin routes reached through ../, //, %2e%2e, ./"):
        mal = tcp["mallory"]
        for path in ("/v1/sandboxes/../tokens", "/v1/sandboxes/%2e%2e/tokens", "//v1/tokens", "/v1/./tokens",
                     "/v1/tokens/", "/v1/sandboxes/..%2Ftokens", "/v1//tokens", "/V1/TOKENS"):
            r = mal.request("GET", path)
            assert r.status in (400, 403, 404), (path, r)
            assert b"alk_" not in r.raw and b"tok-" not in r.raw, (path, r)


# ------------------------------------------------------------------ sizes and parsers

def test_oversize_and_malformed_bodies(api, secd, peer):
    pid = peer["id"]

    def raw(method, path, data, headers=None):
        return api.request(method, path, raw=data, headers={"Content-Type": "application/json", **(headers or {})})

    cases = (
        ("oversize-create", "a 1 MiB + 10 byte create body", "POST", "/v1/sandboxes",
         json.dumps({"metadata": {"k": "v" * (MIB + 10)}}).encode(), 413),
        ("oversize-secret", "a 300 KiB secret body", "POST", "/v1/secrets",
         json.dumps({"name": "big", "value": "v", "hosts": ["a.test"] * 40000}).encode(), 413),
        ("oversize-network", "a 300 KiB policy", "PUT", f"/v1/sandboxes/{pid}/network",
         json.dumps({"allow": ["a" * 60 + ".test"] * 5000}).encode(), 413),
        ("oversize-exec", "a 17 MiB exec body", "POST", f"/v1/sandboxes/{pid}/exec",
         json.dumps({"cmd": ["cat"], "stdin": "x" * (17 * MIB)}).encode(), 413),
    )
    for slug, what, method, path, data, want in cases:
        with attempt("api", slug, what):
            before = state(secd)
            r = raw(method, path, data)
            assert r.status == want, r
            assert state(secd) == before
            assert api.get(pid).json["network"] == {"allow": [], "deny": []}

    with attempt("api", "oversize-chunked", "a 2 MiB create body, chunked, without Content-Length"):
        before = state(secd)
        s = su.unix_socket(secd.socket, timeout=30)
        try:
            s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            chunk = b"{" + b" " * 65534 + b"\n"
            try:
                for _ in range(32):
                    s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                s.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # refused before the end
            status, head = su.read_http_response(s, timeout=30)
        finally:
            s.close()
        assert status == 413, head[:300]
        assert state(secd) == before

    with attempt("api", "oversize-declared", "Content-Length: 10 GiB with a few bytes behind it"):
        s = su.unix_socket(secd.socket, timeout=15)
        try:
            s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 10737418240\r\n\r\n{}")
            status, head = su.read_http_response(s, timeout=15)
        finally:
            s.close()
        assert status == 413, head[:300]
        healthy(api)

    with attempt("api", "malformed-json", "truncated, nested 100000 deep, invalid UTF-8, NaN, a BOM, a 1000-digit number"):
        before = state(secd)
        for data in (b'{"template": "min', b"[" * 100000 + b"]" * 100000, b'{"template": "\xc3\x28"}',
                     b'{"vcpus": NaN}', b'\xef\xbb\xbf{"vcpus": 1}', b'{"vcpus": 1' + b"0" * 1000 + b"}",
                     b'{"env": {"A": "\\ud800"}}', b"null", b'{"template": "minimal"}' + b"\x00"):
            r = raw("POST", "/v1/sandboxes", data)
            assert r.status == 400, (data[:30], r)
            assert r.json and r.json["error"]["code"] == "invalid_argument", r
        assert state(secd) == before
        healthy(api)

    with attempt("api", "wrong-content-types", "JSON bodies sent as text/plain, multipart, form-urlencoded, application/jsonx"):
        before = state(secd)
        for ctype in ("text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded",
                      "application/jsonx", "application/json-seq", "text/json"):
            r = api.request("POST", "/v1/sandboxes", raw=b'{"template": "minimal"}', headers={"Content-Type": ctype})
            assert r.status == 415, (ctype, r)
        assert state(secd) == before

    with attempt("api", "huge-headers", "one 100 KiB header, then 5000 headers"):
        for head in (b"X-Big: " + b"a" * (100 * 1024) + b"\r\n", b"".join(b"X-%d: y\r\n" % i for i in range(5000))):
            s = su.unix_socket(secd.socket, timeout=15)
            try:
                try:
                    s.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
                except OSError:
                    pass
                status, resp = su.read_http_response(s, timeout=15)
            finally:
                s.close()
            assert status in (None, 400, 413, 431), resp[:200]
        healthy(api)


# ------------------------------------------------------------------ connections

def test_connection_abuse(api, secd, tcp, fakenet):
    with attempt("api", "slow-loris-unix", "a client sending its request head one byte per 0.2 s on the unix socket"):
        s = su.unix_socket(secd.socket, timeout=30)
        req = b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 10 + b"\r\n\r\n"
        done = threading.Event()

        def slow():
            try:
                for b in req:
                    s.send(bytes([b]))
                    time.sleep(0.2)
            except OSError:
                pass
            done.set()
        t = threading.Thread(target=slow, daemon=True)
        t.start()
        time.sleep(0.5)
        for _ in range(5):
            healthy(api, 2.0)
            time.sleep(0.3)
        assert not done.is_set(), "the slow client finished before the others were checked"
        t.join(30)
        s.close()

    with attempt("api", "slow-loris-tcp", "slow clients on the TCP listener (head and body one byte at a time)"):
        socks = []
        for req in (b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                    b"POST /v1/secrets HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                    b"Content-Type: application/json\r\n\r\n{"):
            s = tcp[None].raw_socket()
            s.sendall(req)
            socks.append(s)
        for _ in range(4):
            for s in socks:
                try:
                    s.send(b"a")
                except OSError:
                    pass
            t0 = time.monotonic()
            r = tcp["victim"].request("GET", "/v1/sandboxes", timeout=10)
            assert r.status == 200 and time.monotonic() - t0 < 2.0, r
            healthy(api, 2.0)
            time.sleep(0.3)
        for s in socks:
            s.close()

    with attempt("api", "many-connections", "300 clients at once on the unix socket, each with a request"):
        results = []
        lock = threading.Lock()

        def one():
            try:
                r = api.request("GET", "/healthz", timeout=60)
                st = r.status
            except OSError as e:
                st = repr(e)
            with lock:
                results.append(st)
        threads = [threading.Thread(target=one) for _ in range(300)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert results.count(200) == 300, [r for r in results if r != 200][:5]
        healthy(api)


def test_idle_connections_cannot_starve_the_api(api, secd, tcp):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    socks = []
    try:
        with attempt("api", "idle-connection-exhaustion", "1100 idle unauthenticated TCP connections, then the operator's request"):
            def open_all():
                for _ in range(1100):
                    try:
                        socks.append(socket.create_connection(("127.0.0.1", secd.port), timeout=5))
                    except OSError:
                        break
            tcp[None].net.in_host(open_all)
            time.sleep(1)
            healthy(api, 5.0)
            r = tcp["victim"].request("GET", "/v1/sandboxes", timeout=10)
            assert r.status == 200, r
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        su.wait_for(lambda: api.request("GET", "/healthz", timeout=5).status == 200, 30, "the API to recover")


def test_unauthenticated_clients_cannot_flush_the_audit_log(api, secd, tcp):
    n = 2000
    with attempt("api", "audit-log-flush", f"{n} requests with unknown tokens as fast as one client can: the event log must not take them all"):
        m = su.EventMark(api)
        req = b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alk_" + b"q" * 43 + b"\r\n\r\n"

        def flood():
            for _ in range(n):
                s = socket.create_connection(("127.0.0.1", secd.port), timeout=10)
                try:
                    s.sendall(req)
                    s.recv(4096)
                finally:
                    s.close()
        tcp[None].net.in_host(flood)
        added = len(m.since(api, type_prefix="auth.failure"))
        # Coalesced or rate-limited: a bounded number of records, not one per request.
        assert added <= n // 4, f"{added} auth.failure events for {n} requests"


# ------------------------------------------------------------------ tokens and tenants

def test_tokens(api, secd, tcp, world, peer):
    base = tcp[None]
    mal = tcp["mallory"]

    with attempt("api", "invalid-tokens", "no token, Basic, a bare Bearer, an unknown alk_ token, a token in the query, lower-case scheme"):
        m = su.EventMark(api)
        good = world["tokens"]["mallory"]["token"]
        for hdrs, query in (({}, ""), ({"Authorization": "Basic YTpi"}, ""), ({"Authorization": "Bearer"}, ""),
                            ({"Authorization": "Bearer alk_" + "x" * 43}, ""), ({}, f"?token={good}"),
                            ({"Authorization": f"Bearer {good}x"}, ""), ({"Authorization": f"Bearer  {good[:-1]}"}, "")):
            r = base.request("GET", "/v1/sandboxes" + query, headers=hdrs)
            assert r.status == 401 and r.json["error"]["code"] == "unauthorized", (hdrs, r)
        fails = m.since(api, type_prefix="auth.failure")
        assert len(fails) >= 7, fails
        assert {e["data"]["reason"] for e in fails} >= {"missing", "malformed", "unknown"}, fails

    with attempt("api", "revoked-token", "a token used after it was revoked"):
        t = api.request("POST", "/v1/tokens", body={"tenant": "mallory", "description": "to revoke"}).json
        c = base.with_token(t["token"])
        assert c.request("GET", "/v1/sandboxes").status == 200
        assert api.request("DELETE", f"/v1/tokens/{t['id']}").status == 204
        m = su.EventMark(api)
        assert c.request("GET", "/v1/sandboxes").status == 401
        assert [e for e in m.since(api, type_prefix="auth.failure") if e["data"]["reason"] == "revoked"]

    with attempt("api", "auth-per-request", "a kept-alive connection: an authenticated request, then one without a token"):
        s = base.raw_socket()
        tok = world["tokens"]["mallory"]["token"]
        s.sendall(f"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n\r\n"
                  "GET /v1/tokens HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        s.settimeout(5)
        try:
            while data.count(b"HTTP/1.1 ") < 2:
                c = s.recv(65536)
                if not c:
                    break
                data += c
        except OSError:
            pass
        s.close()
        statuses = [int(x[:3]) for x in data.split(b"HTTP/1.1 ")[1:]]
        assert statuses[:1] == [200] and all(st in (401, 403) for st in statuses[1:]), data[:600]
        assert b"alk_" not in data and b'"tokens"' not in data

    with attempt("api", "smuggling-to-the-api", "CL+TE request smuggling on the TCP listener, smuggling an admin request"):
        s = base.raw_socket()
        tok = world["tokens"]["mallory"]["token"]
        smuggled = b"GET /v1/tokens HTTP/1.1\r\nHost: x\r\n\r\n"
        body = b"0\r\n\r\n" + smuggled
        s.sendall(b"POST /v1/secrets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
                  % len(body) + body)
        data = b""
        s.settimeout(5)
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    break
                data += c
        except OSError:
            pass
        s.close()
        assert b"alk_" not in data and b'"tokens"' not in data, data[:600]
        assert b"HTTP/1.1 200" not in data, data[:600]

    with attempt("api", "token-admin-routes", "as tenant mallory: create tokens, list tokens, raise its own quota, revoke another's token"):
        for method, path, body in (("POST", "/v1/tokens", {"tenant": "mallory"}), ("GET", "/v1/tokens", None),
                                   ("PUT", "/v1/tenants/mallory", {"max_sandboxes": 1000}),
                                   ("DELETE", f"/v1/tokens/{world['tokens']['victim']['id']}", None)):
            r = mal.request(method, path, body=body)
            assert r.status == 403, (method, path, r)
        assert tcp["victim"].request("GET", "/v1/sandboxes").status == 200

    with attempt("api", "tenant-in-body", "as tenant mallory: create a sandbox for tenant victim"):
        before = state(secd)
        r = mal.request("POST", "/v1/sandboxes", body={"template": "minimal", "tenant": "victim"})
        assert r.status == 403, r
        assert state(secd) == before

    with attempt("api", "tenant-processes", "as tenant mallory: another tenant's process (get, output, signal, stdin, wait, attach)"):
        b = f"/v1/sandboxes/{peer['id']}/processes/{peer['process']}"
        for method, path, body in (("GET", b, None), ("GET", f"{b}/output?from=start", None),
                                   ("POST", f"{b}/signal", {"signal": "KILL"}), ("POST", f"{b}/stdin", None),
                                   ("GET", f"{b}/wait?timeout_s=1", None), ("GET", f"/v1/sandboxes/{peer['id']}/processes", None)):
            r = mal.request(method, path, body=body)
            assert r.status == 404, (method, path, r)
        r = mal.request("GET", f"{b}/attach", headers={"Connection": "Upgrade", "Upgrade": "airlock-pty/1"})
        assert r.status == 404, r
        proc = api.request("GET", b).json
        assert proc["state"] == "running", proc

    with attempt("api", "tenant-events-and-quota", "as tenant mallory: tenant victim's events and quota"):
        r = mal.request("GET", f"/v1/events?sandbox={peer['id']}")
        assert r.status == 200 and peer["id"].encode() not in r.raw, r
        r = mal.request("GET", "/v1/events?type=sandbox.")
        assert r.status == 200 and b'"victim"' not in r.raw and b'"default"' not in r.raw, r
        assert mal.request("GET", "/v1/tenants/victim").status in (403, 404)

    with attempt("api", "method-override", "X-HTTP-Method-Override and _method tricks to turn a GET into a DELETE"):
        pid = peer["id"]
        api.request("GET", f"/v1/sandboxes/{pid}", headers={"X-HTTP-Method-Override": "DELETE"})
        api.request("GET", f"/v1/sandboxes/{pid}?_method=DELETE", headers={"X-Method-Override": "DELETE"})
        assert api.get(pid).json["state"] == "running"
