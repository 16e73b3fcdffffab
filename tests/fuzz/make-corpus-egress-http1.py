#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of the fuzz target for the HTTP/1.1 request stream
of intercepted connections (tests/fuzz/corpus/fuzz-egress-http1/): what a
guest sends on a connection the gateway terminates TLS for -- pipelined
requests, bodies by Content-Length and chunked, placeholders to replace,
and one of each kind of request the parser must refuse.

The first byte of each seed is the fuzz target's selector (how the stream is
split); the rest is the stream.

The seeds are committed; run this again (with /usr/bin/python3) only to
change them. Each seed is also a regression test: `make fuzz-smoke` replays
every one.
"""
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "fuzz-egress-http1"
PH = "PLACEHOLDER"


def get(path="/", host="api.example", extra=""):
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n"


def post_cl(body, extra=""):
    return f"POST /v1/upload HTTP/1.1\r\nHost: api.example\r\nContent-Length: {len(body)}\r\n{extra}\r\n{body}"


def post_chunked(chunks, trailers=""):
    out = "POST /v1/stream HTTP/1.1\r\nHost: api.example\r\nTransfer-Encoding: chunked\r\n\r\n"
    for c in chunks:
        out += f"{len(c):x}\r\n{c}\r\n"
    return out + "0\r\n" + trailers + "\r\n"


def main():
    d = os.path.join(HERE, "corpus", TARGET)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    seeds = {
        "get": (0, get()),
        "get-placeholder": (
            17,
            get("/v1/models?key=" + PH, extra=f"Authorization: Bearer {PH}\r\nX-Api-Key: {PH}{PH}\r\n"
                "Cookie: a=1; t=" + PH + "\r\n"),
        ),
        "post-content-length": (40, post_cl("hello world", f"X-Token: {PH}\r\n")),
        "post-chunked": (
            99,
            post_chunked(["hello", "0123456789abcdef" * 2], "X-Checksum: 1\r\n").replace(
                "10\r\n", "10;ext=1;q=\"a b\"\r\n", 1),
        ),
        "pipelined": (
            128,
            get("/a") + post_cl("abc", "Connection: keep-alive\r\n") + post_chunked(["xyz"])
            + get("/last", extra="Connection: close\r\n"),
        ),
        "http10-keep-alive": (3, "GET / HTTP/1.0\r\nHost: api.example\r\nConnection: keep-alive\r\n\r\n" * 2),
        "absolute-https": (
            7, f"POST https://api.example/v1?x={PH} HTTP/1.1\r\nHost: api.example\r\n"
            "Content-Length: 2\r\n\r\nhi"),
        "expect-continue": (7, "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi"),
        "get-body": (9, "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 32\r\n\r\nGET /x HTTP/1.1\r\nHost: b\r\n\r\n"),
        "remove-fields": (
            200, get(extra="authorization: guest\r\nX-Remove: 1\r\nAUTHORIZATION: again\r\nx-keep:\t v \r\n")),
        "incomplete-body": (55, post_cl("0123456789")[:-4]),
        "cl-te": (1, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        "double-cl": (2, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"),
        "te-gzip": (4, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        "obs-fold": (5, get(extra="X-A: 1\r\n folded\r\n")),
        "bare-lf": (6, "GET / HTTP/1.1\nHost: a\n\n"),
        "nul-in-value": (8, get(extra="X-A: a\0b\r\n")),
        "chunk-size-overflow": (9, post_chunked(["a"]).replace("1\r\na", "10000000000000001\r\na", 1)),
        "chunk-size-space": (10, post_chunked(["abc"]).replace("3\r\n", "3 \r\n", 1)),
        "trace": (11, get() + "TRACE / HTTP/1.1\r\nHost: api.example\r\n\r\n"),
        "connect": (12, "CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n"),
        "upgrade": (13, get(extra="Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n")),
        "trailer-framing": (14, post_chunked(["abc"], "Content-Length: 3\r\n")),
        "many-fields": (15, get(extra="".join(f"X-{i}: {PH}\r\n" for i in range(99)))),
    }
    for name, (sel, stream) in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes([sel]) + stream.encode("latin-1"))


if __name__ == "__main__":
    main()
