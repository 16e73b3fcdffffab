# SPDX-License-Identifier: Apache-2.0
"""Issue 17, parts 4 and 5: what an HTTP request can still smuggle past the
gateway once the policy allowed its host. Three families, from the shared
attacker sandbox (conftest.py: TOK is bound to www.allowed.test, placeholder
mode, replaced in X-Key only, paths /v1/; API to api.allowed.test, header mode
Authorization: Bearer, GET and POST):

- header reflection and request hiding (category 4 "secrets" and 3 "egress"):
  the placeholder in headers the binding does not name (which servers echo
  back), and requests hidden in a GET/HEAD body or behind Expect;
- fronting under inspection (3 "egress"): HTTPS is intercepted by default, so
  Host, the absolute-form authority, ALPN and pipelining are checked on every
  request;
- reflected-secret redaction (4 "secrets"): a bound host that echoes the
  value back, in headers, in chunks, in tiny TLS records, compressed.

What a server received is read from the fake internet's log; what the guest
got is what its own client printed."""
import base64
import json

import pytest

import secutil as su
from secutil import attempt, fn

ALLOW = [fn.WWW_ALLOWED, fn.API_ALLOWED, fn.SUB_EXAMPLE]

# /tmp/req.py in the guest: one connection, raw bytes out, everything back.
GUEST_REQ = r'''
import base64, json, socket, ssl, sys
mode, ip, sni, data_b64 = sys.argv[1:5]
alpn = sys.argv[5] if len(sys.argv) > 5 else ""
s = socket.create_connection((ip, 443 if mode == "tls" else 80), timeout=10)
sel = issuer = None
if mode == "tls":
    ctx = ssl.create_default_context(cafile="/tmp/all.pem")
    ctx.check_hostname = False  # an IP-literal SNI is an attempt too
    if alpn:
        ctx.set_alpn_protocols(alpn.split(","))
    try:
        s = ctx.wrap_socket(s, server_hostname=sni)
    except OSError as e:
        print(json.dumps({"handshake": False, "error": str(e)[:200]}))
        sys.exit(0)
    sel = s.selected_alpn_protocol()
    issuer = dict(x[0] for x in s.getpeercert()["issuer"]).get("commonName")
s.sendall(base64.b64decode(data_b64))
data = b""
s.settimeout(6)
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
except OSError:
    pass
text = data.decode("latin-1")
statuses = [int(l[9:12]) for l in text.split("\n") if l.startswith("HTTP/1.") and l[9:12].isdigit()]
print(json.dumps({"handshake": True, "alpn": sel, "issuer": issuer, "statuses": statuses, "reply": text[:60000]}))
'''


@pytest.fixture
def sid(api, attacker):
    su.put_file(api, attacker["id"], "/tmp/req.py", GUEST_REQ)
    su.set_policy(api, attacker["id"], allow=ALLOW)
    yield attacker["id"]
    su.set_policy(api, attacker["id"], allow=[fn.WWW_ALLOWED])


@pytest.fixture(scope="module")
def values(world):
    return world["values"]


def raw(api, sid, mode, ip, sni, data, alpn=""):
    """One connection from the guest: data (bytes) out, the answer back."""
    b64 = base64.b64encode(data).decode()
    args = " ".join(f"'{a}'" for a in (mode, ip, sni, b64) + ((alpn,) if alpn else ()))
    code, out, err = su.sh(api, sid, f"python3 -S /tmp/req.py {args}", timeout=120)
    assert code == 0, (out[-2000:], err[-2000:])
    return json.loads(out.strip().splitlines()[-1])


def curl(api, sid, args):
    """curl in the guest (TOK and API in its environment): (rc, body)."""
    code, out, _ = su.sh(api, sid, f"{su.CURL} -s {args}; echo \" rc=$?\"", timeout=120)
    body, _, rc = out.rpartition(" rc=")
    return int(rc.strip() or 1), body


def received(fakenet, host=None, path=None):
    return [r for r in fakenet.http_requests()
            if (host is None or (r.get("host") or "").split(":")[0] == host)
            and (path is None or r["path"].split("?")[0].endswith(path))]


def header(req, name):
    vals = [v for k, v in req["headers"] if k.lower() == name.lower()]
    return vals[-1] if vals else None


def req(method, path, host, extra="", body=b""):
    return (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}").encode() + b"\r\n" + body


def events(api, sid, type_="network."):
    r = api.request("GET", f"/v1/events?sandbox={sid}&type={type_}")
    assert r.status == 200, r
    return [json.loads(line) for line in r.raw.decode().splitlines() if line.strip()]


# ------------------------------------------------------------------ header reflection

def test_placeholder_only_where_its_binding_says(api, sid, attacker, fakenet, values):
    tok, tok_v, api_v = attacker["tok"], values["tok"], values["api"]
    url = f"https://{fn.WWW_ALLOWED}/v1/echo-headers"
    for name, hdr in (("reflect-origin", f"Origin: https://{tok}.example"),
                      ("reflect-referer", f"Referer: https://app.example/?k={tok}"),
                      ("reflect-x-forwarded", f"X-Forwarded-For: {tok}"),
                      ("reflect-cookie", f"Cookie: session={tok}"),
                      ("reflect-custom-header", f"X-Debug-Echo: {tok}")):
        with attempt("requests", name, f"the placeholder in '{hdr.split(':')[0]}' (not the binding's X-Key) to "
                                      "its bound host, whose echo would hand the value back"):
            fakenet.clear_logs()
            rc, body = curl(api, sid, f"-H \"X-Key: $TOK\" -H '{hdr}' {url}")
            assert rc == 0, body
            r = received(fakenet, fn.WWW_ALLOWED, "/v1/echo-headers")[-1]
            field = hdr.split(":")[0]
            assert tok in header(r, field) and tok_v not in header(r, field), r
            assert header(r, "X-Key") == tok_v  # where the binding says: replaced
            assert tok_v not in body and api_v not in body
    with attempt("requests", "reflect-request-line", "the placeholder in the query string to its bound host"):
        fakenet.clear_logs()
        rc, body = curl(api, sid, f"\"{url}?k=$TOK\"")
        r = received(fakenet, fn.WWW_ALLOWED, "/v1/echo-headers")[-1]
        assert tok in r["path"] and tok_v not in json.dumps(r), r
    with attempt("requests", "reflect-header-mode-elsewhere", "API's placeholder (header mode: Authorization) "
                                                             "in X-Api and Cookie to its bound host"):
        fakenet.clear_logs()
        rc, body = curl(api, sid, f"-H \"X-Api: $API\" -H \"Cookie: a=$API\" https://{fn.API_ALLOWED}/echo-headers")
        r = received(fakenet, fn.API_ALLOWED)[-1]
        assert header(r, "X-Api") == attacker["api"] and api_v not in header(r, "Cookie"), r
        assert header(r, "Authorization") == f"Bearer {api_v}"  # the binding's own header
        assert api_v not in body
    ev = [e for e in events(api, sid, "network.secret") if e["data"].get("reason") == "header not bound"]
    assert ev, "no not-substituted event for a placeholder in an unbound header"


# ------------------------------------------------------------------ request hiding

HIDDEN = f"GET /admin HTTP/1.1\r\nHost: {fn.WWW_OTHER}\r\n\r\n".encode()


def test_requests_hidden_in_bodies_or_behind_expect(api, sid, fakenet):
    cases = (
        ("hide-get-body-https", "tls", "a GET whose Content-Length body is a second request (to /admin, Host "
         "www.other.test), intercepted HTTPS", req("GET", "/", fn.WWW_ALLOWED, f"Content-Length: {len(HIDDEN)}\r\n",
                                                   HIDDEN), 400),
        ("hide-get-body-http", "http", "the same over plain HTTP",
         req("GET", "/", fn.WWW_ALLOWED, f"Content-Length: {len(HIDDEN)}\r\n", HIDDEN), 400),
        ("hide-head-chunked", "tls", "a HEAD with a chunked body carrying a second request",
         req("HEAD", "/", fn.WWW_ALLOWED, "Transfer-Encoding: chunked\r\n",
             b"%x\r\n" % len(HIDDEN) + HIDDEN + b"\r\n0\r\n\r\n"), 400),
        ("hide-expect-continue", "tls", "Expect: 100-continue with a body that is a second request",
         req("POST", "/upload", fn.WWW_ALLOWED, f"Expect: 100-continue\r\nContent-Length: {len(HIDDEN)}\r\n",
             HIDDEN), 417),
        ("hide-expect-plain", "http", "Expect: 100-continue over plain HTTP",
         req("PUT", "/upload", fn.WWW_ALLOWED, f"Expect: 100-continue\r\nContent-Length: {len(HIDDEN)}\r\n",
             HIDDEN), 417),
        ("hide-get-body-pipelined", "tls", "an allowed GET, then a GET with a body hiding a request",
         req("GET", "/", fn.WWW_ALLOWED) + req("GET", "/x", fn.WWW_ALLOWED, f"Content-Length: {len(HIDDEN)}\r\n",
                                              HIDDEN), 400),
    )
    for name, mode, what, data, status in cases:
        with attempt("requests", name, what):
            fakenet.clear_logs()
            r = raw(api, sid, mode, fn.ALLOWED_IP, fn.WWW_ALLOWED, data)
            assert r["handshake"] and r["statuses"] and r["statuses"][-1] == status, r
            got = fakenet.http_requests()
            assert not [q for q in got if q["path"] in ("/admin", "/x", "/upload") or q["method"] == "HEAD"], got
            assert not [q for q in got if fn.WWW_OTHER in (q.get("host") or "")], got


# ------------------------------------------------------------------ fronting under inspection

def test_fronting_under_inspection(api, sid, attacker, fakenet):
    su.set_policy(api, sid, allow=[fn.SUB_EXAMPLE])  # the default: no "tls"
    try:
        with attempt("fronting", "front-host-not-sni", "SNI sub.example.test (allowed), Host www.allowed.test (same "
                                                     "server, not allowed now)"):
            fakenet.clear_logs()
            r = raw(api, sid, "tls", fn.ALLOWED_IP, fn.SUB_EXAMPLE, req("GET", "/", fn.WWW_ALLOWED,
                                                                           "Connection: close\r\n"))
            assert r["statuses"] == [421], r
            assert not fakenet.http_requests()
        with attempt("fronting", "front-absolute-form", "an absolute-form target naming www.other.test, Host the SNI"):
            fakenet.clear_logs()
            r = raw(api, sid, "tls", fn.ALLOWED_IP, fn.SUB_EXAMPLE,
                    f"GET https://{fn.WWW_OTHER}/ HTTP/1.1\r\nHost: {fn.SUB_EXAMPLE}\r\n\r\n".encode())
            assert r["statuses"] == [400], r
            assert not fakenet.http_requests()
        with attempt("fronting", "front-h2-only-alpn", "ALPN h2 only, then the HTTP/2 preface with a request inside"):
            fakenet.clear_logs()
            preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
            r = raw(api, sid, "tls", fn.ALLOWED_IP, fn.SUB_EXAMPLE, preface, alpn="h2")
            assert r["handshake"] and r["alpn"] is None, r  # h2 is never negotiated
            assert r["statuses"] in ([], [400]), r
            assert not fakenet.http_requests()
        with attempt("fronting", "front-pipelined-other-host", "an allowed request, then a pipelined one for "
                                                             "www.allowed.test on the same connection"):
            fakenet.clear_logs()
            r = raw(api, sid, "tls", fn.ALLOWED_IP, fn.SUB_EXAMPLE,
                    req("GET", "/", fn.SUB_EXAMPLE) + req("GET", "/second", fn.WWW_ALLOWED, "Connection: close\r\n"))
            assert r["statuses"] == [200, 421], r
            assert [q["path"] for q in fakenet.http_requests()] == ["/"]
        with attempt("fronting", "front-ip-literal-sni", "an IP-literal SNI (the allowed server's address, allowed "
                                                       "by an IP rule), Host www.other.test"):
            su.set_policy(api, sid, allow=[fn.SUB_EXAMPLE, fn.ALLOWED_IP])
            fakenet.clear_logs()
            r = raw(api, sid, "tls", fn.ALLOWED_IP, fn.ALLOWED_IP, req("GET", "/", fn.WWW_OTHER,
                                                                          "Connection: close\r\n"))
            assert not r["handshake"] or r["statuses"] in ([], [421]), r
            assert not fakenet.http_requests()
            su.set_policy(api, sid, allow=[fn.SUB_EXAMPLE])
        with attempt("fronting", "front-passthrough-default-gone", "no \"tls\" in the policy: the guest meets the "
                                                                 "Airlock CA, the audit says intercepted"):
            r = raw(api, sid, "tls", fn.ALLOWED_IP, fn.SUB_EXAMPLE, req("GET", "/", fn.SUB_EXAMPLE,
                                                                           "Connection: close\r\n"))
            assert r["statuses"] == [200] and r["issuer"].startswith("Airlock sandbox CA"), r
            allow = [e["data"] for e in events(api, sid, "network.allow")
                     if e["data"].get("host") == fn.SUB_EXAMPLE and e["data"].get("proto") == "tls"]
            assert allow and allow[-1]["tls"] == "intercepted" and allow[-1]["tls_reason"] == "inspect", allow[-3:]
    finally:
        su.set_policy(api, sid, allow=ALLOW)


# ------------------------------------------------------------------ reflected-secret redaction

def test_reflected_secrets_are_redacted(api, sid, attacker, fakenet, values):
    tok_v, api_v = values["tok"], values["api"]
    for name, what, args, value in (
            ("redact-echo-headers", "a bound host echoing the request's headers (X-Key's value) as JSON",
             f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/echo-headers", tok_v),
            ("redact-echo-chunked", "the echo in 5-byte chunks: the value split across chunks",
             f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/echo-chunked", tok_v),
            ("redact-echo-tls-records", "the echo written 3 bytes per TLS record: the value split across records",
             f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/echo-records", tok_v),
            ("redact-header-mode-echo", "API's Authorization (header mode) echoed back by its bound host",
             f"-H \"Authorization: Bearer $API\" https://{fn.API_ALLOWED}/echo-chunked", api_v)):
        with attempt("redaction", name, what):
            fakenet.clear_logs()
            rc, body = curl(api, sid, args)
            assert rc == 0, body
            got = fakenet.http_requests()
            assert value in json.dumps(got)  # the server did get (and echo) it
            assert value not in body and "*" * len(value) in body, body[-500:]
    with attempt("redaction", "redact-gzip-asked", "the guest asks for gzip and the bound host compresses its echo "
                                                 "anyway"):
        fakenet.clear_logs()
        rc, body = curl(api, sid, f"--compressed -H 'Accept-Encoding: gzip' -H \"X-Key: $TOK\" "
                                  f"https://{fn.WWW_ALLOWED}/v1/echo-gzip")
        assert rc != 0 and tok_v not in body, (rc, body[-500:])
        r = received(fakenet, fn.WWW_ALLOWED, "/v1/echo-gzip")[-1]
        assert header(r, "Accept-Encoding") == "identity", r  # what the gateway asked for
    with attempt("redaction", "redact-range-pieces", "the guest asks its bound echo host for a byte range (one "
                                                   "piece of the reflected value per response, each too short "
                                                   "to match)"):
        fakenet.clear_logs()
        rc, body = curl(api, sid, f"-H 'Range: bytes=0-4' -H 'If-Range: x' -H \"X-Key: $TOK\" "
                                  f"https://{fn.WWW_ALLOWED}/v1/echo-headers")
        assert rc == 0 and tok_v not in body, (rc, body[-500:])
        r = received(fakenet, fn.WWW_ALLOWED, "/v1/echo-headers")[-1]
        assert header(r, "Range") is None and header(r, "If-Range") is None, r
        assert header(r, "X-Key") == tok_v, r  # the request did carry the value
    ev = [e["data"] for e in events(api, sid, "network.secret") if e["data"].get("verdict") == "redacted"]
    assert ev and all(e["count"] >= 1 for e in ev), ev
