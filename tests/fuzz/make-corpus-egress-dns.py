#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of the egress gateway's DNS fuzz target
(tests/fuzz/corpus/fuzz-egress-dns/): DNS queries as a guest sends them to
the gateway's listener, well-formed ones and one of each kind the parser
must refuse.

The seeds are committed; run this again (with /usr/bin/python3) only to
change them. Each seed is also a regression test: `make fuzz-smoke`
replays every one.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "fuzz-egress-dns"

A, NS, TXT, AAAA, SRV, OPT, ANY = 1, 2, 16, 28, 33, 41, 255
RD, AD, CD = 0x0100, 0x0020, 0x0010


def name(n):
    if isinstance(n, str):
        n = n.encode()
    out = b""
    for label in n.split(b".") if n else []:
        out += bytes([len(label)]) + label
    return out + b"\x00"


def header(qid=0x1234, flags=RD, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", qid, flags, qd, an, ns, ar)


def question(n, qtype=A, qclass=1):
    return (n if isinstance(n, bytes) else name(n)) + struct.pack(">HH", qtype, qclass)


def opt(udp=1232, version=0, do=False, options=b""):
    return b"\x00" + struct.pack(">HHBBHH", OPT, udp, 0, version, 0x8000 if do else 0, len(options)) + options


def query(n, qtype=A, flags=RD, additional=b"", ar=None, qid=0x1234):
    if ar is None:
        ar = 1 if additional else 0
    return header(qid, flags, ar=ar) + question(n, qtype) + additional


def main():
    d = os.path.join(HERE, "corpus", TARGET)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cookie = struct.pack(">HH", 10, 8) + bytes(range(8))
    padding = struct.pack(">HH", 12, 4) + bytes(4)
    longest = ".".join(["a" * 63] * 3 + ["b" * 61])
    seeds = {
        "a": query("www.example.com"),
        "aaaa": query("ipv6.example.org", AAAA),
        "txt-underscore": query("_dmarc.example.com", TXT, flags=0),
        "srv": query("_https._tcp.Example.COM", SRV),
        "any": query("example.net", ANY),
        "root-ns": query("", NS, flags=0),
        "edns": query("www.example.com", A, additional=opt()),
        "edns-dig": query("example.com", AAAA, flags=RD | AD, additional=opt(4096, options=cookie + padding)),
        "edns-do-small": query("example.com", A, flags=RD | CD, additional=opt(100, do=True)),
        "longest-name": query(longest, A, additional=opt()),
        "max-udp-a": query("max.example", A, additional=opt(65535)),
        "bad-compression": header() + b"\x03www\xc0\x0c" + struct.pack(">HH", A, 1),
        "bad-two-opts": query("example.com", A, additional=opt() + opt(), ar=2),
        "bad-opt-owner": query("example.com", A, additional=b"\x01a" + opt()),
        "bad-response": query("example.com", A, flags=0x8180),
        "bad-trailing": query("example.com") + b"\x00\x00",
        "bad-label-byte": query(b"\x03w w\x07example\x00"),
        "bad-label-64": query(b"\x40" + b"a" * 64 + b"\x00"),
        "bad-truncated": query("www.example.com")[:20],
        "header-only": header(qd=0),
    }
    for n, data in seeds.items():
        with open(os.path.join(d, n), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
