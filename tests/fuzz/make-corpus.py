#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

The seeds are committed; run this again only to change them. Each seed is
also a regression test: `make fuzz-smoke` replays every one.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_PAYLOAD = 64 * 1024
T = dict(HELLO=1, EXEC=2, STDIN=3, STDOUT=4, STDERR=5, EXIT=6, ERROR=7, FILE_WRITE=8,
         FILE_READ=9, FILE_DATA=10, OK=11, SHUTDOWN=12, SIGNAL=13, CREDIT=14)


def frame(ftype, stream, payload=b"", version=1, flags=0, length=None):
    if isinstance(payload, str):
        payload = payload.encode()
    if length is None:
        length = len(payload)
    return struct.pack(">BBHII", version, ftype, flags, stream, length) + payload


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frames():
    hello = frame(T["HELLO"], 0, json.dumps({"proto": 1, "agent": "0.1.0", "generation": 0,
                                             "boot_id": "0123456789abcdef", "kernel": "6.1.0"}))
    session = b"".join([
        hello,
        frame(T["STDOUT"], 1, "hi\n"),
        frame(T["STDERR"], 1, "warn\n"),
        frame(T["CREDIT"], 1, struct.pack(">I", 4096)),
        frame(T["STDOUT"], 1, b""),
        frame(T["EXIT"], 1, '{"exit_code":3}'),
        frame(T["ERROR"], 2, '{"code":"enoent","errno":2,"message":"no such file"}'),
        frame(T["FILE_DATA"], 3, bytes(range(256))),
        frame(T["FILE_DATA"], 3, b""),
        frame(T["OK"], 3, '{"size":256}'),
    ])
    seeds = {
        "hello": hello,
        "session": session,
        "exec": frame(T["EXEC"], 7, json.dumps({"argv": ["sh", "-c", "echo hi"], "env": ["A=b"], "cwd": "/",
                                                 "uid": 0, "gid": 0, "timeout_ms": 0, "stdin": True})),
        "every-type": b"".join(frame(t, t, bytes([t]) * t) for t in range(1, 15)),
        "max-payload": frame(T["STDOUT"], 1, b"\xaa" * MAX_PAYLOAD) + frame(T["EXIT"], 1, '{"exit_code":0}'),
        "two-max-payloads": frame(T["STDOUT"], 1, b"x" * MAX_PAYLOAD) + frame(T["STDERR"], 1, b"y" * MAX_PAYLOAD),
        "oversize-length": frame(T["STDOUT"], 1, length=MAX_PAYLOAD + 1),
        "huge-length": frame(T["STDOUT"], 1, length=0xFFFFFFFF),
        "bad-version": frame(T["HELLO"], 0, "{}", version=2),
        "type-zero": frame(0, 0),
        "type-too-big": frame(15, 0),
        "flags-set": frame(T["STDOUT"], 1, "x", flags=1),
        "truncated-header": hello[:7],
        "truncated-payload": hello[:-5],
        "good-then-bad": session + frame(T["STDOUT"], 1, "x", version=0),
        "many-small": b"".join(frame(T["STDOUT"], i, b"z" * (i % 7)) for i in range(2000)),
    }
    for name, data in seeds.items():
        write("fuzz-frame", name, data)


def api():
    seeds = {
        "create-empty": "",
        "create-object": "{}",
        "create-full": json.dumps({"template": "minimal", "vcpus": 2, "memory_mib": 512,
                                   "env": {"FOO": "bar", "_X1": ""}, "metadata": {"owner": "alice"}}),
        "create-limits": json.dumps({"template": "a" * 63, "vcpus": 16, "memory_mib": 16384}),
        "create-too-many-vcpus": '{"vcpus": 999}',
        "create-memory-float": '{"memory_mib": 256.0}',
        "create-unknown-field": '{"templat": "minimal"}',
        "create-template-bad": '{"template": "../etc"}',
        "create-template-nul": '{"template": "mini\\u0000mal"}',
        "create-env-bad-name": '{"env": {"1A": "x"}}',
        "create-env-not-string": '{"env": {"A": 1}}',
        "create-duplicate": '{"vcpus": 1, "vcpus": 2}',
        "create-null-fields": '{"template": null, "vcpus": null, "env": null}',
        "create-metadata-empty-key": '{"metadata": {"": "x"}}',
        "create-deep": "[" * 500 + "]" * 500,
        "create-not-object": '["minimal"]',
        "create-malformed": '{"vcpus": ',
        "create-unicode": json.dumps({"metadata": {"k\u00e9y": "\u20ac\U0001F600"}}),
        "exec-simple": json.dumps({"cmd": ["sh", "-c", "echo hi; exit 3"]}),
        "exec-full": json.dumps({"cmd": ["cat"], "env": {"A": "1"}, "cwd": "/tmp", "stdin": "hello\n",
                                 "stdin_encoding": "utf8", "uid": 1000, "gid": 1000, "timeout_s": 10,
                                 "max_output_bytes": 1024}),
        "exec-base64": json.dumps({"cmd": ["cat"], "stdin": "AAEC/w==", "stdin_encoding": "base64"}),
        "exec-base64-bad": json.dumps({"cmd": ["cat"], "stdin": "AAE", "stdin_encoding": "base64"}),
        "exec-encoding-bad": json.dumps({"cmd": ["cat"], "stdin_encoding": "latin1"}),
        "exec-empty-cmd": '{"cmd": []}',
        "exec-empty-arg0": '{"cmd": [""]}',
        "exec-cmd-string": '{"cmd": "echo hi"}',
        "exec-cmd-nul": '{"cmd": ["a\\u0000b"]}',
        "exec-cwd-relative": '{"cmd": ["pwd"], "cwd": "tmp"}',
        "exec-limits": json.dumps({"cmd": ["x"], "uid": 65534, "gid": 65534, "timeout_s": 86400,
                                   "max_output_bytes": 67108864}),
        "exec-over-limits": json.dumps({"cmd": ["x"], "uid": 65535, "timeout_s": 0, "max_output_bytes": 0}),
        "exec-negative": '{"cmd": ["x"], "uid": -1, "timeout_s": -9223372036854775808}',
        "exec-bignum": '{"cmd": ["x"], "timeout_s": 99999999999999999999999}',
        "exec-many-args": json.dumps({"cmd": ["a"] * 1025}),
    }
    for name, data in seeds.items():
        write("fuzz-api-request", name, data)


if __name__ == "__main__":
    frames()
    api()
