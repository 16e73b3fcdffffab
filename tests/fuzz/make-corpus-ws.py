#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of fuzz-api-ws (tests/fuzz/corpus/fuzz-api-ws/):
a browser's frames (the first byte is the size of the pieces they are fed
in), its handshake headers, and the attach's control messages.

The seeds are committed; run this again only to change them. Each seed is
also a regression test: `make fuzz-smoke` replays every one.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MASK = b"\x37\xfa\x21\x3d"


def write(name, data):
    d = os.path.join(HERE, "corpus", "fuzz-api-ws")
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(b0, payload, masked=True, length=None):
    n = len(payload) if length is None else length
    if n < 126:
        head = bytes([b0, n | (0x80 if masked else 0)])
    elif n <= 0xFFFF:
        head = bytes([b0, 126 | (0x80 if masked else 0)]) + struct.pack(">H", n)
    else:
        head = bytes([b0, 127 | (0x80 if masked else 0)]) + struct.pack(">Q", n)
    if not masked:
        return head + payload
    return head + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))


resize = json.dumps({"type": "resize", "cols": 120, "rows": 40}).encode()
write("hello", b"\x00" + frame(0x81, b"Hello"))
write("hello-bytewise", b"\x01" + frame(0x81, b"Hello"))
write("keys-binary", b"\x03" + frame(0x82, b"echo hi\r"))
write("resize", b"\x00" + frame(0x81, resize))
write("fragments-ping", b"\x05" + frame(0x01, b"Hel") + frame(0x89, b"ping") + frame(0x80, b"lo"))
write("binary-16bit", b"\x40" + frame(0x82, bytes(range(256)) * 2))
write("binary-64bit", b"\x00" + frame(0x82, b"\xab" * 65536))
write("close-normal", b"\x00" + frame(0x88, b"\x03\xe8bye") + frame(0x81, b"after"))
write("close-empty", b"\x00" + frame(0x88, b""))
write("close-bad-code", b"\x00" + frame(0x88, b"\x03\xed"))
write("unmasked", b"\x00" + frame(0x81, b"Hello", masked=False))
write("reserved-bits", b"\x00" + frame(0xC1, b"x"))
write("reserved-opcode", b"\x00" + frame(0x83, b"x"))
write("long-control", b"\x00" + frame(0x89, b"p" * 126))
write("too-big", b"\x00" + frame(0x82, b"", length=1 << 20))
write("bad-utf8", b"\x00" + frame(0x81, b"\xc3\x28"))
write("stray-continuation", b"\x00" + frame(0x80, b"x"))
write("resize-json", resize)
write("resize-bad", b'{"type":"resize","cols":0,"rows":1001}')
write("protocols", "airlock.pty.v1, airlock.bearer.alk_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG")
write("protocols-two-bearers", "airlock.bearer.a, airlock.bearer.b")
write("origin-same", b"http://127.0.0.1:7070\x00127.0.0.1:7070")
write("origin-cross", b"https://evil.example\x00127.0.0.1:7070")
write("origin-default-port", b"https://Example.com:443\x00example.com")
write("key", "dGhlIHNhbXBsZSBub25jZQ==")
