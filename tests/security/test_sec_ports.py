# SPDX-License-Identifier: Apache-2.0
"""Category 17: sandbox ports from outside (issue 22). A hostile tenant
(mallory, over TCP) at the victim's ports, through the API's tunnel
(`port-forward`); a hostile guest at the namespace's new rules (host-side
sockets may now connect to the guest, and the guest's replies are let in).

Containment is read from the victim's side: what its listener received
(/tmp/got in the `peer`), its record, the events, the namespace's dropped
counter."""
import json
import re
import socket
import time

import pytest

import secutil as su
from secutil import attempt

CONNECT_HEADERS = {"Connection": "Upgrade", "Upgrade": "airlock-tcp/1"}


def peer_got(api, peer):
    return su.sh_ok(api, peer["id"], "cat /tmp/got 2>/dev/null; true")


def tunnel_status(tcp_api, sid, port):
    """Asks for a tunnel with a raw request; the status and what came back."""
    s = tcp_api.raw_socket()
    try:
        auth = f"Authorization: Bearer {tcp_api.token}\r\n" if tcp_api.token else ""
        s.sendall(f"GET /v1/sandboxes/{sid}/ports/{port}/connect HTTP/1.1\r\nHost: x\r\n{auth}"
                  "Connection: Upgrade\r\nUpgrade: airlock-tcp/1\r\n\r\n".encode())
        status, raw = su.read_http_response(s)
        if status == 101:
            s.sendall(b"HELLO-FROM-MALLORY\n")
            time.sleep(0.5)
        return status, raw
    finally:
        s.close()


def test_another_tenants_ports(api, tcp, peer):
    sid = peer["id"]
    before = peer_got(api, peer)

    with attempt("ports", "portfwd-other-tenant", "open a port-forward tunnel to another tenant's port 8080"):
        status, raw = tunnel_status(tcp["mallory"], sid, 8080)
        assert status == 404, raw
        assert peer_got(api, peer) == before

    with attempt("ports", "portfwd-no-token", "open a port-forward tunnel without a token"):
        status, raw = tunnel_status(tcp[None], sid, 8080)
        assert status == 401, raw
        assert peer_got(api, peer) == before

    with attempt("ports", "expose-other-tenant", "expose another tenant's port 8080 as public"):
        r = tcp["mallory"].request("PUT", f"/v1/sandboxes/{sid}/ports/8080", body={"public": True})
        assert r.status == 404, r
        got = api.request("GET", f"/v1/sandboxes/{sid}").json
        assert got["ports"] == [], got

    with attempt("ports", "ports-token-other-tenant", "read another tenant's traffic token from its ports list"):
        for method in ("GET", "DELETE"):
            path = f"/v1/sandboxes/{sid}/ports" + ("/8080" if method == "DELETE" else "")
            r = tcp["mallory"].request(method, path)
            assert r.status == 404, r
            assert b"att_" not in (r.raw or b""), r

    with attempt("ports", "portfwd-bad-ports", "tunnels to ports 0, 65536, -1, 80a, 1e3 and a 20-digit port"):
        for port in ("0", "65536", "-1", "80a", "1e3", "9" * 20):
            status, raw = tunnel_status(tcp["victim"], sid, port)
            assert status in (400, 404), (port, raw)
        assert peer_got(api, peer) == before


def test_guest_cannot_use_the_tunnels_path(api, attacker, watch):
    """The namespace lets marked host sockets connect to the guest and the
    guest's replies in (`ct direction reply`): a guest that learns a
    tunnel's host-side port must still not begin a connection of its own."""
    sid = attacker["id"]
    # A server in the attacker guest that reports the peer of what it accepts.
    server = ("import socket,json\n"
              "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "s.bind(('0.0.0.0', 9911)); s.listen(4)\n"
              "while True:\n"
              "    c,a=s.accept(); open('/tmp/peer','w').write(json.dumps(a)); c.sendall(b'hi\\n')\n")
    su.put_file(api, sid, "/tmp/srv.py", server)
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["python3", "/tmp/srv.py"],
                                                                     "tag": "sec-ports"})
    assert r.status == 201, r
    proc = r.json["id"]
    try:
        deadline = time.time() + 20
        s = None
        while time.time() < deadline:
            s = su.unix_socket(api.socket_path)
            s.sendall(f"GET /v1/sandboxes/{sid}/ports/9911/connect HTTP/1.1\r\nHost: x\r\n"
                      "Connection: Upgrade\r\nUpgrade: airlock-tcp/1\r\n\r\n".encode())
            status, raw = su.read_http_response(s)
            if status == 101:
                break
            s.close()
            s = None
            time.sleep(0.5)
        assert s is not None, "the guest's server never answered through the tunnel"
        try:
            peer_ip, peer_port = json.loads(su.sh_ok(api, sid, "cat /tmp/peer"))
            assert peer_ip == "10.0.2.2", peer_ip

            with attempt("ports", "ct-reply-abuse",
                         "while a tunnel is open, connect from the guest to its host-side port and its neighbours"):
                m = watch.mark()
                rs = su.probe_many(api, sid, [["tcp", "10.0.2.2", p, su.b64("INJECTED\r\n\r\n"), "0.5"]
                                              for p in (peer_port, peer_port + 1, peer_port - 1)])
                # New connections from the guest go where all its TCP goes (the gateway, which
                # refuses 10.0.2.2), never to the daemon's end of the tunnel.
                assert all(r.get("status") in (None, 403) for r in rs), rs
                s.settimeout(1.0)
                got = b""
                try:
                    while True:
                        c = s.recv(65536)
                        if not c:
                            break
                        got += c
                except OSError:
                    pass
                assert b"INJECTED" not in got, got
                watch.nothing_left(m)
        finally:
            s.close()
    finally:
        api.request("POST", f"/v1/sandboxes/{sid}/processes/{proc}/signal", body={"signal": "KILL"})


def test_marks_do_not_cross_the_tap(api, attacker, watch):
    sid = attacker["id"]
    with attempt("ports", "guest-so-mark", "mark the guest's own sockets with the host's port mark and connect to "
                 "10.0.2.2 on 22, 80, 8080, 15002"):
        m = watch.mark()
        script = ("import socket,json\nres={}\n"
                  "for p in (22, 80, 8080, 15002):\n"
                  "    s=socket.socket(); s.settimeout(2)\n"
                  "    s.setsockopt(socket.SOL_SOCKET, 36, 0x41a1)\n"
                  "    try:\n"
                  "        s.connect(('10.0.2.2', p)); s.sendall(b'GET / HTTP/1.1\\r\\nHost: 10.0.2.2\\r\\n\\r\\n')\n"
                  "        res[p]=s.recv(64).decode('latin-1')[:12]\n"
                  "    except OSError as e:\n        res[p]=type(e).__name__\n"
                  "print(json.dumps(res))\n")
        out = su.py(api, sid, script)
        # Every connect lands on the gateway (all guest TCP does), which refuses 10.0.2.2 (403,
        # or a closed connection): the host's mark means nothing in the guest and never crosses
        # the tap; nothing reached the host's own services (the canary).
        assert all(v in ("", "HTTP/1.1 403") or not v.startswith("HTTP") for v in out.values()), out
        watch.nothing_left(m)


# ------------------------------------------------------------------ the proxy (--proxy-listen)

class Proxy:
    """Raw HTTP/1.1 to airlockd's proxy listener, from the fake internet's
    host namespace (where the daemon runs), by IP; the sandbox is named in
    the path (`/sandbox/<id>/<port>/`) or in an explicit Host."""

    def __init__(self, net, port, domain):
        self.net, self.port, self.domain = net, port, domain

    def host(self, sid, port=8080):
        return f"{port}-{sid}.{self.domain}"

    def socket(self, timeout=10):
        return self.net.in_host(socket.create_connection, ("127.0.0.1", self.port), timeout)

    def exchange(self, data, wait_s=3.0):
        """Sends bytes as they are; the status of the first answer and what
        came back until the proxy closed or wait_s passed with nothing."""
        s = self.socket()
        try:
            s.sendall(data if isinstance(data, bytes) else data.encode())
            s.settimeout(wait_s)
            buf = b""
            try:
                while True:
                    c = s.recv(65536)
                    if not c:
                        break
                    buf += c
            except OSError:
                pass
        finally:
            s.close()
        m = re.match(rb"HTTP/1\.[01] (\d{3})", buf)
        return (int(m.group(1)) if m else None), buf


def request(target, host="x", headers=(), method="GET", body=b""):
    head = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


@pytest.fixture(scope="module")
def px(secd, fakenet):
    return Proxy(fakenet, secd.proxy_port, secd.proxy_domain)


@pytest.fixture(scope="module")
def keys(secd, world, attacker, peer):
    """The traffic tokens of the peer (victim's) and of the attacker
    (tenant default, its own guest could learn it), the tenants' tokens."""
    api, out = secd.api, {}
    for who, sb in (("peer", peer), ("attacker", attacker)):
        r = api.request("GET", f"/v1/sandboxes/{sb['id']}/ports")
        assert r.status == 200 and r.json["proxy"] is True, r
        out[who] = r.json["traffic_token"]
        assert out[who].startswith("att_"), r
    out["victim"] = world["tokens"]["victim"]["token"]
    out["mallory"] = world["tokens"]["mallory"]["token"]
    assert out["victim"].startswith("alk_"), out
    return out


def got_since(api, peer, before, marker, wait_s=0.0):
    """What reached the peer since `before`, polled until `marker` shows up
    or wait_s passed (0: one read after a short settle)."""
    deadline = time.monotonic() + wait_s
    time.sleep(0.5)
    while True:
        got = peer_got(api, peer)
        new = got[len(before):] if got.startswith(before) else got
        if marker in new or time.monotonic() >= deadline:
            return new
        time.sleep(0.5)


def reach_peer(api, px, peer, data, marker, tries=4):
    """A request the peer should receive: its listener (nc, restarted by a
    shell loop) takes one connection at a time and never answers, so the
    proxy's answer is a 502 or nothing; what counts is /tmp/got."""
    before = peer_got(api, peer)
    for _ in range(tries):
        px.exchange(data, wait_s=2.0)
        new = got_since(api, peer, before, marker, wait_s=4.0)
        if marker in new:
            return new
        time.sleep(1.0)
    raise AssertionError(f"a legitimate request never reached the peer: {new!r}")


def assert_nothing_reached(api, peer, before, *markers):
    new = got_since(api, peer, before, "", wait_s=0)
    for m in markers:
        assert m not in new, (m, new)
    return new


def test_proxy_access(api, px, peer, keys):
    sid = peer["id"]
    path = f"/sandbox/{sid}/8080/"
    before = peer_got(api, peer)

    with attempt("ports", "proxy-no-credential", "a request to the peer's port through the proxy without any "
                 "credential, in the path and the host form"):
        for data in (request(path + "nocred-path"), request("/nocred-host", host=px.host(sid))):
            status, raw = px.exchange(data)
            assert status == 401, raw
        assert_nothing_reached(api, peer, before, "nocred")

    with attempt("ports", "proxy-other-tenant-token", "mallory's tenant token (Authorization: Bearer) on the "
                 "victim's port"):
        status, raw = px.exchange(request(path + "mallory-bearer",
                                          headers=[("Authorization", f"Bearer {keys['mallory']}")]))
        assert status == 403, raw
        assert_nothing_reached(api, peer, before, "mallory-bearer")

    with attempt("ports", "proxy-other-sandbox-traffic-token", "the attacker sandbox's own traffic token (its "
                 "ports list) in every place the proxy reads one, for the peer's port"):
        tok = keys["attacker"]
        for i, hdrs in enumerate(([("X-Airlock-Traffic-Token", tok)], [("e2b-traffic-access-token", tok)],
                                  [("Cookie", f"airlock_token={tok}")], [("Authorization", f"Bearer {tok}")])):
            status, raw = px.exchange(request(f"{path}attacker-tok-{i}", headers=hdrs))
            assert status == 401, (hdrs, raw)
        status, raw = px.exchange(request(f"{path}attacker-tok-q?airlock_token={tok}"))
        assert status == 401, raw
        assert_nothing_reached(api, peer, before, "attacker-tok")

    with attempt("ports", "proxy-forged-traffic-token", "forged traffic tokens for the peer: zeros, truncated, "
                 "one more digit, upper case, ATT_, another digit at the end, the sandbox id"):
        v = keys["peer"]
        last = "0" if v[-1] != "0" else "1"
        for i, forged in enumerate(("att_" + "0" * (len(v) - 4), v[:-1], v[:-8], v + "0", "att_" + v[4:].upper(),
                                    "ATT_" + v[4:], v[:-1] + last, "att_" + sid, "att_")):
            assert forged != v
            status, raw = px.exchange(request(f"{path}forged-{i}", headers=[("X-Airlock-Traffic-Token", forged)]))
            assert status == 401, (forged, raw)
        assert_nothing_reached(api, peer, before, "forged-")


def test_proxy_strips_credentials(api, px, peer, keys):
    sid = peer["id"]
    path = f"/sandbox/{sid}/8080/"
    tok = keys["peer"]

    with attempt("ports", "proxy-strip-header", "the peer's traffic token in X-Airlock-Traffic-Token and its "
                 "spellings (e2b-traffic-access-token, X_Airlock_Traffic_Token): the guest must not see it"):
        new = reach_peer(api, px, peer, request(path + "strip-header", host=px.host(sid), headers=[
            ("X_Airlock_Traffic_Token", tok), ("e2b-traffic-access-token", tok), ("X-Airlock-Traffic-Token", tok)]),
            "strip-header")
        assert "att_" not in new and "alk_" not in new, new
        assert "raffic" not in new.split("strip-header", 1)[1], new

    with attempt("ports", "proxy-strip-cookie", "the peer's traffic token as the airlock_token cookie among "
                 "other cookies (two Cookie fields): the guest sees the others, not it"):
        new = reach_peer(api, px, peer, request(path + "strip-cookie", headers=[
            ("Cookie", f"session=keep-me-1; airlock_token={tok}; theme=dark"), ("Cookie", "other=keep-me-2")]),
            "strip-cookie")
        assert "att_" not in new and "alk_" not in new, new
        assert "keep-me-1" in new and "keep-me-2" in new and "theme=dark" in new, new
        assert "airlock_token" not in new, new

    with attempt("ports", "proxy-strip-bearer", "the victim's tenant token (Authorization: Bearer alk_...), and "
                 "again beside a second Authorization field: the guest sees neither"):
        for marker, hdrs in (("strip-bearer-1", [("Authorization", f"Bearer {keys['victim']}")]),
                             ("strip-bearer-2", [("X-Airlock-Traffic-Token", tok),
                                                 ("Authorization", f"Bearer {keys['victim']}"),
                                                 ("Authorization", "Basic eDp5")])):
            new = reach_peer(api, px, peer, request(path + marker, headers=hdrs), marker)
            assert "att_" not in new and "alk_" not in new, new
            assert "uthorization" not in new.split(marker, 1)[1], new


SMUGGLED = "GET /smuggled-{0} HTTP/1.1\r\nHost: x\r\n\r\n"


def test_proxy_request_smuggling(api, px, peer, keys):
    sid = peer["id"]
    tok = keys["peer"]
    first = f"POST /sandbox/{sid}/8080/smuggle-{{0}} HTTP/1.1\r\nHost: x\r\nX-Airlock-Traffic-Token: {tok}\r\n"

    def head(name, fields):
        return first.format(name) + fields

    cases = (
        ("proxy-smuggle-cl-te", "Content-Length and Transfer-Encoding: chunked, a request after the chunks",
         "cl-te", head("cl-te", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n") + "0\r\n\r\n"
         + SMUGGLED.format("cl-te")),
        ("proxy-smuggle-te-cl", "Transfer-Encoding: chunked before a Content-Length, a request after the chunks",
         "te-cl", head("te-cl", "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n") + "0\r\n\r\n"
         + SMUGGLED.format("te-cl")),
        ("proxy-smuggle-two-cl", "two Content-Length fields (0 and the smuggled request's length)", "two-cl",
         head("two-cl", f"Content-Length: 0\r\nContent-Length: {len(SMUGGLED.format('two-cl'))}\r\n\r\n")
         + SMUGGLED.format("two-cl")),
        ("proxy-smuggle-cl-list", "a Content-Length that is a list (0, 40)", "cl-list",
         head("cl-list", "Content-Length: 0, 40\r\n\r\n") + SMUGGLED.format("cl-list")),
        ("proxy-smuggle-te-list", "Transfer-Encoding: chunked, identity, a request after the chunks",
         "te-obf", head("te-obf", "Transfer-Encoding: chunked, identity\r\n\r\n") + "0\r\n\r\n"
         + SMUGGLED.format("te-obf")),
        ("proxy-smuggle-obs-fold", "obsolete line folding: a continuation line carrying Transfer-Encoding",
         "obs-fold", head("obs-fold", "X-Pad: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")
         + "0\r\n\r\n" + SMUGGLED.format("obs-fold")),
        ("proxy-smuggle-bare-lf", "bare LF line ends in the head (a Content-Length a lenient parser would miss)",
         "bare-lf", (head("bare-lf", "") + "Content-Length: 0\nX-Hidden: 1\r\n\r\n" + SMUGGLED.format("bare-lf"))),
    )
    for name, what, marker, data in cases:
        with attempt("ports", name, what):
            before = peer_got(api, peer)
            status, raw = px.exchange(data)
            assert status == 400, (marker, raw)
            assert_nothing_reached(api, peer, before, f"smuggle-{marker}", f"smuggled-{marker}")

    with attempt("ports", "proxy-smuggle-te-more-variants", "Transfer-Encoding: xchunked, a space before the colon, "
                 "TE: chunked in HTTP/1.0, a chunk size past 64 bits"):
        before = peer_got(api, peer)
        for i, data in enumerate((
                head("var0", "Transfer-Encoding: xchunked\r\n\r\n") + "0\r\n\r\n" + SMUGGLED.format("var0"),
                head("var1", "Transfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\n") + "0\r\n\r\n"
                + SMUGGLED.format("var1"),
                head("var2", "Transfer-Encoding: chunked\r\n\r\n").replace("HTTP/1.1", "HTTP/1.0", 1) + "0\r\n\r\n"
                + SMUGGLED.format("var2"))):
            status, raw = px.exchange(data)
            assert status == 400, (i, raw)
        assert_nothing_reached(api, peer, before, "smuggle-var", "smuggled-var")
        # A chunk size that overflows: the proxy may relay the head, never what follows the bogus chunk.
        data = head("var3", "Transfer-Encoding: chunked\r\n\r\n") + "1" + "0" * 16 + "5\r\nhello\r\n0\r\n\r\n" \
            + SMUGGLED.format("var3")
        status, raw = px.exchange(data)
        assert status in (None, 400, 502), raw
        assert_nothing_reached(api, peer, before, "smuggled-var3")

    with attempt("ports", "proxy-smuggle-chunked-body", "a legitimate chunked request to the peer, then a second "
                 "request without a token right after its last chunk: the guest gets the first only"):
        data = head("chunked", "Transfer-Encoding: chunked\r\n\r\n") + "5\r\nhello\r\n0\r\n\r\n" \
            + SMUGGLED.format("chunked")
        new = reach_peer(api, px, peer, data, "smuggle-chunked")
        assert "hello" in new, new
        assert "smuggled-chunked" not in got_since(api, peer, "", "", wait_s=0), new


def test_proxy_host_and_path_confusion(api, px, peer, attacker, keys):
    sid, aid = peer["id"], attacker["id"]
    before = peer_got(api, peer)

    with attempt("ports", "proxy-host-vs-path", "Host naming the attacker's sandbox, path naming the peer's "
                 "port (/sandbox/<peer>/8080/), the attacker's traffic token; and the reverse"):
        status, raw = px.exchange(request(f"/sandbox/{sid}/8080/confuse-a", host=px.host(aid),
                                          headers=[("X-Airlock-Traffic-Token", keys["attacker"])]))
        # The Host decides: the attacker's own 8080, where nothing listens.
        assert status in (502, 504), raw
        status, raw = px.exchange(request(f"/sandbox/{aid}/8080/confuse-b", host=px.host(sid),
                                          headers=[("X-Airlock-Traffic-Token", keys["attacker"])]))
        assert status == 401, raw
        assert_nothing_reached(api, peer, before, "confuse-")

    with attempt("ports", "proxy-forwarded-host", "Host of the peer with X-Forwarded-Host / X-Original-Host / "
                 "Forwarded naming the attacker, the attacker's token"):
        for hdr, val in (("X-Forwarded-Host", px.host(aid)), ("X-Original-Host", px.host(aid)),
                         ("Forwarded", f"host={px.host(aid)}"), ("X-Forwarded-Prefix", f"/sandbox/{aid}/8080")):
            status, raw = px.exchange(request("/fwd-host", host=px.host(sid),
                                              headers=[(hdr, val), ("X-Airlock-Traffic-Token", keys["attacker"])]))
            assert status == 401, (hdr, raw)
        assert_nothing_reached(api, peer, before, "fwd-host")

    with attempt("ports", "proxy-absolute-form", "absolute-form targets naming the attacker (Host the peer) and "
                 "the peer (Host the attacker), the attacker's token"):
        for target, host in ((f"http://{px.host(aid)}/abs-a", px.host(sid)),
                             (f"http://{px.host(sid)}/abs-b", px.host(aid)),
                             (f"http://{px.host(sid)}/sandbox/{sid}/8080/abs-c", "x")):
            status, raw = px.exchange(request(target, host=host,
                                              headers=[("X-Airlock-Traffic-Token", keys["attacker"])]))
            assert status in (400, 404), (target, raw)
        assert_nothing_reached(api, peer, before, "abs-")

    with attempt("ports", "proxy-domain-suffix", "Host with the proxy's domain as a suffix of another domain "
                 "(8080-<peer>.<domain>.evil.test, 8080-<peer>.evil<domain>), the victim's own token"):
        for host in (f"{px.host(sid)}.evil.test", f"8080-{sid}.evil{px.domain}", f"8080-{sid}{px.domain}",
                     f"8080-{sid}.{px.domain}.", f"x.8080-{sid}.{px.domain}", f"8080-{sid}.{px.domain}evil.test"):
            status, raw = px.exchange(request("/suffix", host=host,
                                              headers=[("X-Airlock-Traffic-Token", keys["peer"])]))
            assert status == 404, (host, raw)
        assert_nothing_reached(api, peer, before, "suffix")


def proxy_requests_total(api):
    m = api.request("GET", "/metrics").raw.decode()
    return sum(int(x) for x in re.findall(r"^airlock_proxy_requests_total\{[^}]*\} (\d+)$", m, re.M))


def test_guest_cannot_reach_the_proxy(api, secd, attacker, peer, watch):
    """The proxy listens on the host (0.0.0.0 here): a guest that reached
    it could name any sandbox. All guest TCP goes to the egress gateway,
    which dials only public addresses."""
    sid, pid = attacker["id"], peer["id"]
    su.set_policy(api, sid, allow=[su.fn.WWW_ALLOWED])
    port, host = secd.proxy_port, f"8080-{pid}.{secd.proxy_domain}"
    before = peer_got(api, peer)
    req = su.b64(f"GET /sandbox/{pid}/8080/from-guest HTTP/1.1\r\nHost: {host}\r\n\r\n")
    for name, ip in (("proxy-guest-host-ip", su.fn.HOST_IP), ("proxy-guest-gateway", "10.0.2.2"),
                     ("proxy-guest-loopback", "127.0.0.1")):
        with attempt("ports", name, f"reach airlockd's proxy listener at {ip} from the guest"):
            m, em, n = watch.mark(), su.EventMark(api), proxy_requests_total(api)
            r = su.probe(api, sid, "tcp", ip, port, req)
            assert r.get("status") in (None, 403), r
            assert "sandbox" not in (r.get("reply") or ""), r
            assert proxy_requests_total(api) == n, "the guest's request reached the proxy"
            assert not em.since(api, type_prefix="auth.failure"), "the guest's request reached the proxy"
            watch.nothing_left(m)

    with attempt("ports", "proxy-guest-by-name", "the proxy's host form from the guest: the name resolved to the "
                 "host (--resolve) and as Host through an allowed address"):
        m, n = watch.mark(), proxy_requests_total(api)
        (_, s1), (_, s2) = su.curls(api, sid, [
            f"--resolve {host}:{port}:{su.fn.HOST_IP} http://{host}:{port}/from-guest",
            f"-H 'Host: {host}' http://{su.fn.ALLOWED_IP}/from-guest"])
        assert s1 in (0, 403) and s2 in (0, 403), (s1, s2)
        assert proxy_requests_total(api) == n
        watch.nothing_left(m)
    assert "from-guest" not in got_since(api, peer, before, "", wait_s=0)


def test_paused_victim_stays_paused(api, tcp, px, peer, keys):
    sid = peer["id"]
    path = f"/sandbox/{sid}/8080/paused"
    sb = api.get(sid).json
    assert sb["state"] == "running" and sb.get("auto_resume") is False, sb
    r = api.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200, r
    try:
        with attempt("ports", "proxy-paused-not-resumed", "the victim's sandbox paused without auto_resume: "
                     "mallory's token, no token, the attacker's traffic token, a tunnel, and turning auto_resume on"):
            em = su.EventMark(api)
            for data, want in ((request(path, headers=[("Authorization", f"Bearer {keys['mallory']}")]), 403),
                               (request("/paused", host=px.host(sid),
                                        headers=[("Authorization", f"Bearer {keys['mallory']}")]), 403),
                               (request(path), 401),
                               (request(path, headers=[("X-Airlock-Traffic-Token", keys["attacker"])]), 401)):
                status, raw = px.exchange(data)
                assert status == want, raw
            status, raw = tunnel_status(tcp["mallory"], sid, 8080)
            assert status == 404, raw
            r = tcp["mallory"].request("POST", f"/v1/sandboxes/{sid}/timeout", body={"auto_resume": True})
            assert r.status == 404, r
            # The victim's own token gets 409 and does not resume it either.
            status, raw = px.exchange(request(path, headers=[("X-Airlock-Traffic-Token", keys["peer"])]))
            assert status == 409 and b"auto_resume" in raw, raw
            time.sleep(1.0)
            sb = api.get(sid).json
            assert sb["state"] == "paused" and sb.get("auto_resume") is False, sb
            assert not [e for e in em.since(api, sid=sid) if "resume" in e["type"]], em.since(api, sid=sid)
    finally:
        r = api.request("POST", f"/v1/sandboxes/{sid}/resume")
        assert r.status == 200, r


def test_proxy_slowloris(api, px, peer, keys):
    """The proxy admits connections as the API's TCP listener does
    (--api-max-connections-per-client, 64 by default, per client address):
    a connection still sending its head is idle and gives way to a new one,
    so half-sent heads cannot fill the slots; each also gets 408 after
    --proxy-header-timeout-s (10 s)."""
    sid = peer["id"]
    half = (f"GET /sandbox/{sid}/8080/half-head HTTP/1.1\r\nHost: x\r\n"
            f"X-Airlock-Traffic-Token: {keys['peer']}\r\nX-Slow: ")
    with attempt("ports", "proxy-slowloris", "200 connections holding half-sent heads from one address, then a "
                 "legitimate request with the peer's token from the same address"):
        socks = []
        try:
            for _ in range(200):
                s = px.socket()
                socks.append(s)
                s.sendall(half.encode())
            t0 = time.monotonic()
            new = reach_peer(api, px, peer, request(f"/sandbox/{sid}/8080/after-slowloris",
                                                    headers=[("X-Airlock-Traffic-Token", keys["peer"])]),
                             "after-slowloris")
            assert time.monotonic() - t0 < 30, time.monotonic() - t0
            assert "half-head" not in new, new
            # The half-heads beyond the per-client cap were shed (closed by the proxy), not queued.
            still_open = 0
            for s in socks:
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        continue
                except BlockingIOError:
                    still_open += 1
                except OSError:
                    continue
            assert still_open <= 64, still_open
        finally:
            for s in socks:
                s.close()
