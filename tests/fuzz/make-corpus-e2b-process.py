#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of fuzz-e2b-process-request
(tests/fuzz/corpus/fuzz-e2b-process-request/): envd's process messages as
E2B's SDK sends them, and near misses. Input: byte 0 picks the parser (0
Start, 1 selector, 2 SendInput, 3 SendSignal, 4 Update, 5 end event),
bytes 1-4 a Connect-Timeout-Ms, then the JSON message.

The seeds are committed; run this again only to change them. Each seed is
also a regression test: `make fuzz-smoke` replays every one.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "fuzz-e2b-process-request"


def seed(name, which, msg, timeout_ms=0):
    d = os.path.join(HERE, "corpus", TARGET)
    os.makedirs(d, exist_ok=True)
    body = msg if isinstance(msg, bytes) else json.dumps(msg, separators=(",", ":")).encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes([which]) + struct.pack(">I", timeout_ms) + body)


def main():
    run = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"], "envs": {"A": "b"}}, "stdin": False}
    seed("start-run", 0, run, 60000)
    seed("start-background-stdin", 0, {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "cat"],
                                                   "cwd": "/tmp"}, "stdin": True}, 0)
    seed("start-pty", 0, {"process": {"cmd": "/bin/bash", "args": ["-i", "-l"],
                                      "envs": {"TERM": "xterm-256color", "LANG": "C.UTF-8"}},
                          "pty": {"size": {"cols": 80, "rows": 24}}}, 60000)
    seed("start-tag-relative-cwd", 0, {"process": {"cmd": "sleep", "args": ["1"], "cwd": "~/work"},
                                       "tag": "start-cmd"}, 1)
    seed("start-bad-env", 0, {"process": {"cmd": "x", "envs": {"A B": "c"}}})
    seed("start-bad-pty", 0, {"process": {"cmd": "x"}, "pty": {"size": {"cols": "80", "rows": 0}}})
    seed("start-timeout-too-long", 0, {"process": {"cmd": "x"}}, 86400001)
    seed("selector-pid", 1, {"process": {"pid": 7}})
    seed("selector-pid-string", 1, {"process": {"pid": "4294967295"}})
    seed("selector-tag", 1, {"process": {"tag": "start-cmd"}})
    seed("selector-both", 1, {"process": {"pid": 1, "tag": "t"}})
    seed("input-stdin", 2, {"process": {"pid": 7}, "input": {"stdin": "aGVsbG8K"}})
    seed("input-pty-urlsafe", 2, {"process": {"pid": 7}, "input": {"pty": "-_8"}})
    seed("input-bad", 2, {"process": {"pid": 7}, "input": {"stdin": "a=b"}})
    seed("signal-kill", 3, {"process": {"pid": 7}, "signal": "SIGNAL_SIGKILL"})
    seed("signal-term-number", 3, {"process": {"pid": 7}, "signal": 15})
    seed("signal-unspecified", 3, {"process": {"pid": 7}, "signal": "SIGNAL_UNSPECIFIED"})
    seed("update-resize", 4, {"process": {"pid": 7}, "pty": {"size": {"cols": 100, "rows": 30}}})
    seed("update-nothing", 4, {"process": {"pid": 7}})
    seed("end-exit-3", 5, b"\x01\x00\x00\x00\x03\x00")
    seed("end-killed-timeout", 5, b"\x02\x00\x00\x00\x00\x09")


if __name__ == "__main__":
    main()
