#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of the egress gateway's fuzz targets
(tests/fuzz/corpus/fuzz-egress-{tls,http,host}/).

The seeds are committed; run this again only to change them. Each seed is
also a regression test: `make fuzz-smoke` replays every one.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def reset(target):
    shutil.rmtree(os.path.join(HERE, "corpus", target), ignore_errors=True)


# ------------------------------------------------------------ TLS

def ext(etype, body=b""):
    return struct.pack(">HH", etype, len(body)) + body


def sni(name, entries=1, ntype=0):
    if isinstance(name, str):
        name = name.encode()
    entry = struct.pack(">BH", ntype, len(name)) + name
    lst = entry * entries
    return ext(0, struct.pack(">H", len(lst)) + lst)


def client_hello(exts, with_block=True, session_id=bytes(range(32)), suites=(0x2a2a, 0x1301, 0x1302, 0xc02f)):
    body = struct.pack(">H", 0x0303) + bytes(range(32))
    body += bytes([len(session_id)]) + session_id
    body += struct.pack(">H", 2 * len(suites)) + b"".join(struct.pack(">H", s) for s in suites)
    body += b"\x01\x00"
    if with_block:
        block = b"".join(exts)
        body += struct.pack(">H", len(block)) + block
    return b"\x01" + struct.pack(">I", len(body))[1:] + body


def records(msg, size=16384):
    out = b""
    for off in range(0, len(msg), size):
        frag = msg[off:off + size]
        out += struct.pack(">BHH", 22, 0x0301, len(frag)) + frag
    return out


def tls():
    t = "fuzz-egress-tls"
    reset(t)
    versions = ext(0x002b, b"\x04\x3a\x3a\x03\x04")
    alpn = ext(0x0010, b"\x00\x0c\x02h2\x08http/1.1")
    groups = ext(0x000a, b"\x00\x04\x00\x1d\x00\x17")
    key_share = ext(0x0033, b"\x00\x24\x00\x1d\x00\x20" + bytes(32))
    typical = client_hello([ext(0x0a0a), sni("www.example.com"), groups, versions, alpn, key_share,
                            ext(0x1a1a, b"\x00")])
    seeds = {
        "typical": records(typical),
        "two-records": records(typical, 100),
        "small-records": records(typical, 7),
        "with-ccs-after": records(typical) + b"\x14\x03\x03\x00\x01\x01",
        "no-sni": records(client_hello([versions, alpn])),
        "no-extensions": records(client_hello([], with_block=False)),
        "ech": records(client_hello([sni("cloudflare-ech.com"), ext(0xfe0d, b"\x00\x00\x01\x00\x01\x07")])),
        "esni": records(client_hello([ext(0xffce, b"\x00" * 8)])),
        "duplicate-ext": records(client_hello([sni("a.example"), alpn, alpn])),
        "two-names": records(client_hello([sni("a.example", entries=2)])),
        "name-type-1": records(client_hello([sni("a.example", ntype=1)])),
        "sni-binary": records(client_hello([sni(b"a\x00\xff\n.example")])),
        "sni-idn": records(client_hello([sni("xn--bcher-kva.example")])),
        "oversize": records(client_hello([sni("big.example"), ext(0x0015, bytes(16500))]), 10000),
        # found by the fuzzer: refused from the first record's start, before it is complete
        "oversize-partial": records(client_hello([sni("big.example"), ext(0x0015, bytes(16500))]), 10000)[:300],
        "not-tls-http": b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
        "sslv2": b"\x80\x2e\x01\x03\x01\x00\x15\x00\x00\x00\x10",
        "truncated": records(typical)[:60],
        "alert-between": records(typical, 40)[:45] + b"\x15\x03\x03\x00\x02\x02\x28",
        "server-hello": records(b"\x02" + typical[1:]),
    }
    for name, data in seeds.items():
        write(t, name, b"\x00" + data)
    # mode 1: the fuzzer's bytes are the handshake message, wrapped by the target
    write(t, "msg-typical", b"\x01\x05" + typical)
    write(t, "msg-big-records", b"\x01\xff" + typical)
    write(t, "msg-ech", b"\x01\x03" + client_hello([ext(0xfe0d, b"\x00" * 4), sni("x.example")]))


# ------------------------------------------------------------ HTTP

def http():
    t = "fuzz-egress-http"
    reset(t)
    seeds = {
        "get": "GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n",
        "get-10": "GET /x?y=z HTTP/1.0\r\nHost: example.com:8080\r\n\r\n",
        "post-body": "POST /api HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}",
        "absolute": "GET http://example.com/p HTTP/1.1\r\nHost: example.com\r\n\r\n",
        "absolute-mismatch": "GET http://evil.test/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
        "userinfo": "GET http://example.com@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        "options-star": "OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n",
        "connect": "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
        "dup-host": "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
        "no-host": "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n",
        "obs-fold": "GET / HTTP/1.1\r\nHost: a.example\r\n b\r\n\r\n",
        "bare-lf": "GET / HTTP/1.1\nHost: a.example\n\n",
        "space-before-colon": "GET / HTTP/1.1\r\nHost : a.example\r\n\r\n",
        "ipv6-host": "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n",
        "idn-host": "GET / HTTP/1.1\r\nHost: b\u00fccher.example\r\n\r\n",
        "incomplete": "GET / HTTP/1.1\r\nHost: a.example\r\n",
        "nul-in-value": b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
        "http2-preface": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "long-line": "GET /" + "a" * 9000 + " HTTP/1.1\r\nHost: a\r\n\r\n",
        "many-headers": "GET / HTTP/1.1\r\nHost: a\r\n" + "".join("X-%d: v\r\n" % i for i in range(120)) + "\r\n",
        "tls": b"\x16\x03\x01\x00\x10\x01\x00\x00\x0c\x03\x03",
    }
    for name, data in seeds.items():
        write(t, name, data)


# ------------------------------------------------------------ host

def host():
    t = "fuzz-egress-host"
    reset(t)
    seeds = {
        "name": "example.com",
        "upper-dot": "WWW.Example.COM.",
        "idn": "b\u00fccher.example",
        "idn-cjk": "\u65e5\u672c\u8a9e.jp",
        "idn-cyrillic": "\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444",
        "alabel": "xn--bcher-kva.example",
        "alabel-bad": "xn--zz.example",
        "homograph": "\u0430pple.com",
        "ipv4": "203.0.113.7",
        "ipv4-octal": "0177.0.0.1",
        "ipv4-hex": "0x7f.1",
        "ipv4-short": "127.1",
        "ipv4-int": "2130706433",
        "ipv6": "[2001:db8:0:0:1:0:0:1]",
        "ipv6-mapped": "[::ffff:127.0.0.1]",
        "ipv6-zone": "[fe80::1%25eth0]",
        "host-port": "example.com:8443",
        "rule-exact": "example.com\nexample.com",
        "rule-wildcard": "*.example.com\nwww.example.com",
        "rule-wildcard-apex": "*.example.com\nexample.com",
        "rule-wildcard-evil": "*.example.com\nexample.com.evil.test",
        "rule-wildcard-evil2": "*.example.com\nevilexample.com",
        "rule-port": "example.com:22\nexample.com",
        "rule-cidr": "203.0.113.0/24\n203.0.113.9",
        "rule-cidr-port": "203.0.113.0/24:5432\n203.0.113.9",
        "rule-cidr6": "2001:db8::/32:443\n[2001:db8::5]",
        "rule-idn": "*.b\u00fccher.example\nshop.xn--bcher-kva.example",
        "long-label": "a" * 64 + ".example",
        "long-name": ".".join(["b" * 63] * 4),
    }
    for name, data in seeds.items():
        write(t, name, data)


if __name__ == "__main__":
    tls()
    http()
    host()
