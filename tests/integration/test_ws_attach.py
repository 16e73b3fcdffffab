# SPDX-License-Identifier: Apache-2.0
"""The WebSocket variant of the PTY attach (docs/api.md, "The WebSocket
variant"): what a browser's terminal (xterm.js) speaks to
GET /v1/sandboxes/{id}/processes/{pid}/attach over the TCP listener.

One daemon with `--listen 127.0.0.1:PORT`, one tenant token and one sandbox
(minimal, 1 vCPU) for the module; each test starts its own PTY shell. The
client is written here with the standard library (RFC 6455: the handshake,
masking, framing), as no WebSocket library is installed."""
import base64
import hashlib
import json
import os
import socket
import struct
import time

import pytest

from apiutil import ListeningDaemon, TcpApi, free_port, recv_exact
from conftest import _report_on_failure

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
PTY = "airlock.pty.v1"


class WsClient:
    """A WebSocket client over a raw socket: the opening handshake, then
    frames (masked, as a client's must be, unless told otherwise)."""

    def __init__(self, port, path, protocols=(PTY,), token=None, origin=None, headers=None, timeout=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.key = base64.b64encode(os.urandom(16)).decode()
        hdrs = {"Host": f"127.0.0.1:{port}", "Upgrade": "websocket", "Connection": "Upgrade",
                "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": self.key}
        if protocols:
            hdrs["Sec-WebSocket-Protocol"] = ", ".join(protocols)
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        if origin:
            hdrs["Origin"] = origin
        hdrs.update(headers or {})
        req = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items() if v is not None)
        self.sock.sendall((req + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed before an answer: {self.buf!r}"
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.head = head.decode("latin-1")
        lines = self.head.split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        self.json = None
        if self.status != 101:
            n = int(self.headers.get("content-length", "0"))
            while len(self.buf) < n:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.buf += chunk
            self.json = json.loads(self.buf[:n]) if n else None
        self.screen = bytearray()
        self.exit = None

    def expected_accept(self):
        return base64.b64encode(hashlib.sha1((self.key + GUID).encode()).digest()).decode()

    def send_frame(self, opcode, payload=b"", fin=True, masked=True, b0=None, length=None):
        if isinstance(payload, str):
            payload = payload.encode()
        n = len(payload) if length is None else length
        first = b0 if b0 is not None else (0x80 if fin else 0) | opcode
        mbit = 0x80 if masked else 0
        if n < 126:
            head = bytes([first, mbit | n])
        elif n <= 0xFFFF:
            head = bytes([first, mbit | 126]) + struct.pack(">H", n)
        else:
            head = bytes([first, mbit | 127]) + struct.pack(">Q", n)
        if masked:
            mask = os.urandom(4)
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            head += mask
        self.sock.sendall(head + payload)

    def keys(self, text):
        self.send_frame(OP_BINARY, text)

    def resize(self, rows, cols):
        self.send_frame(OP_TEXT, json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    def _recv_exact(self, n, deadline):
        out, self.buf = recv_exact(self.sock, self.buf, n, deadline, "WebSocket", self.screen)
        return out

    def frame(self, timeout=60):
        """(opcode, payload) of the server's next frame, checked: FIN, no
        reserved bits, never masked."""
        deadline = time.monotonic() + timeout
        b0, b1 = self._recv_exact(2, deadline)
        assert b0 & 0x70 == 0 and b0 & 0x80, f"server frame with reserved bits or not FIN: {b0:#x}"
        assert not b1 & 0x80, "a server frame is never masked (RFC 6455 5.1)"
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._recv_exact(2, deadline))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._recv_exact(8, deadline))[0]
        payload = self._recv_exact(n, deadline)
        op = b0 & 0x0F
        if op == OP_BINARY:
            self.screen += payload
        elif op == OP_TEXT:
            msg = json.loads(payload)
            assert msg["type"] == "exit", msg
            self.exit = msg
        return op, payload

    def read_until(self, needle, timeout=60):
        needle = needle.encode() if isinstance(needle, str) else needle
        start = len(self.screen)
        deadline = time.monotonic() + timeout
        while needle not in self.screen[start:]:
            op, payload = self.frame(max(0.01, deadline - time.monotonic()))
            assert op in (OP_BINARY, OP_PONG), f"frame {op} before {needle!r}: {payload!r}"
        return bytes(self.screen[start:])

    def close_code(self, timeout=60):
        """Frames until the server's close; its code (None if it sent none)."""
        deadline = time.monotonic() + timeout
        while True:
            op, payload = self.frame(max(0.01, deadline - time.monotonic()))
            if op == OP_CLOSE:
                return struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None

    def closed_by_server(self, timeout=10):
        """True once the server closed the TCP connection."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def ld(tmp_path_factory):
    # Every failed authentication an event (no per-client bound), to count them.
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-ws"), free_port(),
                        extra_args=["--auth-failure-per-min", "0"]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture(scope="module")
def token(ld):
    r = ld.api.request("POST", "/v1/tokens", body={"tenant": "web", "description": "the web console"})
    assert r.status == 201, r
    return r.json["token"]


@pytest.fixture(scope="module")
def tcp(ld, token):
    return TcpApi(ld.port, token)


@pytest.fixture(scope="module")
def sandbox(ld, tcp):
    r = tcp.request("POST", "/v1/sandboxes", body={"template": "minimal", "vcpus": 1, "memory_mib": 256})
    assert r.status == 201 and r.json["state"] == "running", r
    yield r.json
    tcp.request("DELETE", f"/v1/sandboxes/{r.json['id']}")


@pytest.fixture
def shell(ld, tcp, sandbox, request):
    """A PTY shell of its own for each test: its attach path."""
    r = tcp.request("POST", f"/v1/sandboxes/{sandbox['id']}/processes",
                    body={"cmd": ["sh"], "pty": {"rows": 24, "cols": 80}})
    assert r.status == 201 and r.json["pty"] is True, r
    yield f"/v1/sandboxes/{sandbox['id']}/processes/{r.json['id']}/attach"
    tcp.request("POST", f"/v1/sandboxes/{sandbox['id']}/processes/{r.json['id']}/signal", body={"signal": "KILL"})
    _report_on_failure(request, ld)


def auth_failures(ld):
    r = ld.api.request("GET", "/v1/events?type=auth.failure")
    assert r.status == 200, r
    return [json.loads(l) for l in r.raw.splitlines() if l.strip()]


def test_token_in_subprotocol_echo_resize_exit(ld, token, shell):
    origin = f"http://127.0.0.1:{ld.port}"
    ws = WsClient(ld.port, shell, protocols=(PTY, f"airlock.bearer.{token}"), origin=origin)
    try:
        assert ws.status == 101, ws.head
        assert ws.headers["upgrade"].lower() == "websocket", ws.head
        assert ws.headers["sec-websocket-accept"] == ws.expected_accept(), ws.head
        # Only our subprotocol is chosen: the token is never sent back.
        assert ws.headers["sec-websocket-protocol"] == PTY, ws.head
        assert token not in ws.head
        ws.keys("echo h''i\r")  # the echoed command line does not contain "hi"
        ws.read_until("hi\r\n")
        ws.resize(33, 111)
        ws.keys("stty size\r")
        ws.read_until("33 111")
        # Ping → pong with the same payload (output may come between).
        ws.send_frame(OP_PING, b"are you there")
        while True:
            op, payload = ws.frame()
            if op == OP_PONG:
                assert payload == b"are you there"
                break
            assert op == OP_BINARY
        # Keys in a fragmented message, a ping between the fragments.
        ws.send_frame(OP_BINARY, "echo frag", fin=False)
        ws.send_frame(OP_PING, b"x")
        ws.send_frame(OP_CONT, "-ok-$((20+3))\r", fin=True)
        ws.read_until("frag-ok-23")
        ws.keys("exit 5\r")
        while ws.exit is None:
            op, _ = ws.frame()
            assert op in (OP_BINARY, OP_PONG, OP_TEXT), op
        assert ws.exit["exit_code"] == 5 and ws.exit["signal"] is None, ws.exit
        op, payload = ws.frame()
        assert op == OP_CLOSE and struct.unpack(">H", payload[:2])[0] == 1000, (op, payload)
        ws.send_frame(OP_CLOSE, struct.pack(">H", 1000))
        assert ws.closed_by_server()
    finally:
        ws.close()


def test_authorization_header_and_close(ld, token, shell):
    # Not a browser: the Authorization header works too, without an Origin.
    ws = WsClient(ld.port, shell, token=token)
    try:
        assert ws.status == 101, ws.head
        assert ws.headers["sec-websocket-protocol"] == PTY, ws.head
        ws.keys("echo h''i\r")
        ws.read_until("hi\r\n")
        # The client closes: the server answers with the same code and hangs up.
        ws.send_frame(OP_CLOSE, struct.pack(">H", 4001) + b"bye")
        assert ws.close_code() == 4001
        assert ws.closed_by_server()
    finally:
        ws.close()
    # The process keeps running: attach again.
    ws = WsClient(ld.port, shell, token=token)
    try:
        assert ws.status == 101, ws.head
        ws.keys("echo again-$((1+1))\r")
        ws.read_until("again-2")
    finally:
        ws.close()


def test_refused_handshakes(ld, token, shell):
    before = len(auth_failures(ld))
    # A wrong token, a malformed list, two tokens, none: 401, each an auth.failure event.
    for protocols in [(PTY, "airlock.bearer.alk_" + "x" * 43), (PTY, "airlock.bearer.a/b"),
                      (PTY, "airlock.bearer.a", "airlock.bearer.b"), (PTY,)]:
        ws = WsClient(ld.port, shell, protocols=protocols)
        assert ws.status == 401, (protocols, ws.head)
        assert ws.json["error"]["code"] == "unauthorized", ws.json
        assert "alk_" not in json.dumps(ws.json)
        ws.close()
    ws = WsClient(ld.port, shell, protocols=(PTY,))
    assert ws.status == 401 and "airlock.bearer.<token>" in ws.json["error"]["message"], ws.json
    ws.close()
    # A token in the subprotocol and an Authorization header besides: refused.
    ws = WsClient(ld.port, shell, protocols=(PTY, f"airlock.bearer.{token}"), token=token)
    assert ws.status == 401, ws.head
    ws.close()
    wait_for_events = time.monotonic() + 10
    while len(auth_failures(ld)) < before + 6 and time.monotonic() < wait_for_events:
        time.sleep(0.1)
    assert len(auth_failures(ld)) >= before + 6, auth_failures(ld)[-7:]
    # The bearer subprotocol is for the attach only.
    r = TcpApi(ld.port).request("GET", "/v1/sandboxes", headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Protocol": f"{PTY}, airlock.bearer.{token}"})
    assert r.status == 401, r

    # Cross-site WebSocket hijacking: another origin gets 403.
    for origin in ["http://evil.example", f"http://127.0.0.1:{ld.port + 1}", "null"]:
        ws = WsClient(ld.port, shell, protocols=(PTY, f"airlock.bearer.{token}"), origin=origin)
        assert ws.status == 403, (origin, ws.head)
        assert ws.json["error"]["code"] == "forbidden", ws.json
        ws.close()
    # Our subprotocol must be offered; the key and version must be right.
    ws = WsClient(ld.port, shell, protocols=("chat",), token=token)
    assert ws.status == 400 and PTY in ws.json["error"]["message"], ws.head
    ws.close()
    ws = WsClient(ld.port, shell, token=token, headers={"Sec-WebSocket-Key": "c2hvcnQ="})
    assert ws.status == 400, ws.head
    ws.close()
    ws = WsClient(ld.port, shell, token=token, headers={"Sec-WebSocket-Version": "8"})
    assert ws.status == 400 and ws.headers.get("sec-websocket-version") == "13", ws.head
    ws.close()


@pytest.mark.parametrize("case", ["unmasked", "oversize", "oversize-fragments", "bad-utf8", "bad-control",
                                  "reserved-bits", "long-ping"])
def test_protocol_violations(ld, token, shell, case):
    ws = WsClient(ld.port, shell, token=token)
    try:
        assert ws.status == 101, ws.head
        want = 1002
        if case == "unmasked":
            ws.send_frame(OP_BINARY, "echo hi\r", masked=False)
        elif case == "oversize":
            # The head says 70000 bytes: refused before they are sent.
            ws.send_frame(OP_BINARY, b"", length=70000)
            want = 1009
        elif case == "oversize-fragments":
            # The second fragment's head is enough to know.
            ws.send_frame(OP_BINARY, b"a" * 65000, fin=False)
            ws.send_frame(OP_CONT, b"", fin=True, length=1000)
            want = 1009
        elif case == "bad-utf8":
            ws.send_frame(OP_TEXT, b"\xc3\x28")
            want = 1007
        elif case == "bad-control":
            ws.send_frame(OP_TEXT, json.dumps({"type": "resize", "cols": 0, "rows": 24}))
            want = 1008
        elif case == "reserved-bits":
            ws.send_frame(OP_BINARY, "x", b0=0xC2)
        elif case == "long-ping":
            ws.send_frame(OP_PING, b"p" * 126)
        assert ws.close_code() == want
        assert ws.closed_by_server()
    finally:
        ws.close()
