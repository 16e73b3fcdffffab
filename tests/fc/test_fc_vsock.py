# SPDX-License-Identifier: Apache-2.0
"""The agent's vsock channel without vhost-vsock (this host has none): the
same code path (listen, accept, a new host connection replacing the old one,
re-accept after the host went away) over a unix socket with
`airlock-agent --listen-unix`, spoken to with raw frames (proto.h).

What a snapshot or restore does to a Firecracker guest: every vsock
connection is reset, the host reconnects, asks for HELLO, and finds the
agent's state (boot_id, running processes, queued output) intact.
"""
import json
import socket
import struct
import time

HELLO, EXEC, STDOUT, EXIT, ERROR = 1, 2, 4, 6, 7


class Host:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(path)
        self.buf = b""

    def send(self, ftype, stream, payload=b""):
        if isinstance(payload, (dict, list)):
            payload = json.dumps(payload).encode()
        self.s.sendall(struct.pack(">BBHII", 1, ftype, 0, stream, len(payload)) + payload)

    def recv(self):
        """(type, stream, payload), or None at EOF."""
        while True:
            if len(self.buf) >= 12:
                _, t, _, st, n = struct.unpack(">BBHII", self.buf[:12])
                if len(self.buf) >= 12 + n:
                    p = self.buf[12:12 + n]
                    self.buf = self.buf[12 + n:]
                    return t, st, p
            data = self.s.recv(65536)
            if not data:
                return None
            self.buf += data

    def hello(self, ask=True):
        if ask:
            self.send(HELLO, 0, b"{}")
        t, st, p = self.recv()
        assert (t, st) == (HELLO, 0), (t, st, p)
        return json.loads(p)

    def until_exit(self, stream):
        out = b""
        while True:
            f = self.recv()
            assert f is not None, "the connection ended before EXIT"
            t, st, p = f
            if st != stream:
                continue
            if t == STDOUT:
                out += p
            elif t == EXIT:
                return out, json.loads(p)
            elif t == ERROR:
                raise AssertionError(p)

    def close(self):
        self.s.close()


def test_first_host_gets_the_boot_hello(guest):
    h = Host(guest.sock)
    hello = h.hello(ask=False)  # queued at start, written on the first accept
    assert hello["proto"] == 1 and hello["generation"] == 0
    h.send(EXEC, 1, {"argv": ["echo", "over vsock"]})
    assert h.until_exit(1) == (b"over vsock\n", {"exit_code": 0})
    h.close()


def test_reconnect_after_the_host_went_away(guest):
    h = Host(guest.sock)
    boot_id = h.hello(ask=False)["boot_id"]
    # A process that outlives the connection (a snapshot resets it mid-exec).
    h.send(EXEC, 5, {"argv": ["sh", "-c", "sleep 0.5; echo late"]})
    time.sleep(0.1)
    h.close()
    time.sleep(0.2)
    h2 = Host(guest.sock)
    assert h2.hello()["boot_id"] == boot_id  # the same guest, re-accepted
    out, status = h2.until_exit(5)
    assert out == b"late\n" and status == {"exit_code": 0}
    h2.send(EXEC, 6, {"argv": ["echo", "again"]})
    assert h2.until_exit(6)[0] == b"again\n"
    h2.close()


def test_new_connection_replaces_the_old(guest):
    a = Host(guest.sock)
    a.hello(ask=False)
    b = Host(guest.sock)
    assert b.hello()["proto"] == 1
    # The old connection ends: the agent serves one host at a time.
    a.s.settimeout(5)
    assert a.recv() is None
    b.send(EXEC, 2, {"argv": ["echo", "b"]})
    assert b.until_exit(2)[0] == b"b\n"
    b.close()
    a.close()


def test_garbage_then_a_clean_reconnect(guest):
    a = Host(guest.sock)
    a.hello(ask=False)
    a.s.sendall(b"\x09" * 12)  # a corrupt header: the agent answers ERROR on stream 0
    t, st, p = a.recv()
    assert (t, st) == (ERROR, 0) and b"corrupt frame" in p
    a.close()
    b = Host(guest.sock)
    b.hello()
    b.send(EXEC, 3, {"argv": ["echo", "fine"]})
    assert b.until_exit(3)[0] == b"fine\n"
    b.close()
