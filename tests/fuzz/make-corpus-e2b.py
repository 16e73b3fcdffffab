#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of fuzz-connect-wire and fuzz-e2b-parse
(tests/fuzz/corpus/<target>/): E2B's envd requests as its SDK sends them,
and what a guest's /etc/passwd and a client's headers and paths look like.

The seeds are committed; run this again only to change them. Each seed is
also a regression test: `make fuzz-smoke` replays every one.
"""
import base64
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MESSAGE_MAX = 16 << 20


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def envelope(msg, flags=0, length=None):
    if isinstance(msg, (dict, list)):
        msg = json.dumps(msg, separators=(",", ":"))
    if isinstance(msg, str):
        msg = msg.encode()
    return struct.pack(">BI", flags, len(msg) if length is None else length) + msg


def connect_wire():
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"], "envs": {"A": "b"},
                         "cwd": "/home/user"}, "stdin": False}
    seeds = {
        "start": envelope(start),
        "connect": envelope({"process": {"pid": 42}}),
        "watch": envelope({"path": "/home/user", "recursive": True}),
        "empty": envelope({}),
        "spaces": envelope(' { "a" : [ 1 , 2.5e3 , null , "\\u00e9" ] } '),
        "unicode": envelope(json.dumps({"k\u00e9y": "\u20ac\U0001F600"}, ensure_ascii=False)),
        "deep": envelope("[" * 300 + "]" * 300),
        "duplicate": envelope('{"path":"/a","path":"/b"}'),
        "not-object": envelope("[{}]"),
        "nul-string": envelope('{"a":"\\u0000"}'),
        "bad-utf8": envelope(b'{"a":"\xff\xfe"}'),
        "compressed": envelope({}, flags=1),
        "end-stream": envelope({}, flags=2),
        "flags-ff": envelope({}, flags=0xFF),
        "length-short": envelope("{}", length=1),
        "length-long": envelope("{}", length=3),
        "length-max": envelope("{}", length=MESSAGE_MAX),
        "length-over": envelope("{}", length=MESSAGE_MAX + 1),
        "length-huge": envelope("{}", length=0xFFFFFFFF),
        "two-envelopes": envelope({}) + envelope({}),
        "header-only": struct.pack(">BI", 0, 0),
        "short": b"\x00\x00\x00",
        # The C-string parsers read these (up to the first NUL).
        "b64-std": "aGVsbG8gd29ybGQ+Pz8/",
        "b64-url": "aGVsbG8gd29ybGQ-Pz8_",
        "b64-unpadded": "aGk",
        "b64-padded": "aGk=",
        "b64-bad-pad": "aG=k",
        "b64-leftover": "aGV5a",
        "b64-bytes": base64.b64encode(bytes(range(256))).decode(),
        "timeout": "10000",
        "timeout-10": "9999999999",
        "timeout-11": "10000000000",
        "timeout-sign": "-1",
        "message-bad-utf8": b"\x05guest said \xc0\xaf\xed\xa0\x80\xe2\x82",
        "message-utf8": "\x02caf\u00e9 \U0001F4A9",
    }
    for name, data in seeds.items():
        write("fuzz-connect-wire", name, data)


def basic(text):
    return "Basic " + base64.b64encode(text.encode()).decode()


def e2b_parse():
    passwd = ("root:x:0:0:root:/root:/bin/bash\n"
              "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
              "user:x:1000:1000:E2B user,,,:/home/user:/bin/bash\n")
    seeds = {
        "passwd": passwd,
        "passwd-crlf": passwd.replace("\n", "\r\n"),
        "passwd-no-newline": passwd.rstrip("\n"),
        "passwd-prefix": "username:x:1:1::/home/username:/bin/sh\nuse:x:2:2::/u:/bin/sh\nuser:x:3:3::/home/user:/bin/sh\n",
        "passwd-bad-fields": ("user:x:1000:1000:/home/a\nuser:x:10a0:1000::/home/b:/bin/sh\n"
                              "user:x:4294967295:1::/home/c:/bin/sh\nuser:x:99999999999:1::/home/d:/bin/sh\n"
                              "user:x:1:1::home/e:/bin/sh\nuser:x:1:1:::/bin/sh\nuser:x:7:8::/home/good:/bin/sh\n"),
        "passwd-nul": b"user:x:1000:1000::/home/\x00/etc:/bin/sh\nroot:x:0:0::/root:/bin/\x00sh\n",
        "passwd-long-home": "user:x:1:1::/" + "h" * 4095 + ":/bin/sh\nroot:x:0:0::/" + "r" * 4096 + ":/bin/sh\n",
        "passwd-other-name": "e2b.user-1:x:1001:1001::/srv/e2b:/bin/sh\n",
        # The C-string parsers read these.
        "basic": basic("user:"),
        "basic-root": basic("root"),
        "basic-password": basic("root:secret:with:colons"),
        "basic-lower": "basic dXNlcjo=",
        "basic-bad-b64": "Basic dXNlcjo",
        "basic-bad-name": basic("-user:"),
        "basic-nul-name": "Basic dXMAZXI6",
        "basic-long": basic("a" * 100 + ":"),
        "bearer": "Bearer dXNlcjo=",
        "path-absolute": "/etc/passwd",
        "path-relative": "a/b/../c",
        "path-home": "~",
        "path-home-slash": "~/x",
        "path-tilde-name": "~x",
        "path-long": "p" * 4090,
        "path-too-long": "/" + "p" * 4096,
    }
    for name, data in seeds.items():
        write("fuzz-e2b-parse", name, data)


if __name__ == "__main__":
    connect_wire()
    e2b_parse()
