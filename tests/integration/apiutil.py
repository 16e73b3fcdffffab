# SPDX-License-Identifier: Apache-2.0
"""Helpers for the API-level tests (test_api_*.py, test_openapi.py): streamed
JSON-lines answers read line by line, a bearer-token client over TCP, the
PTY upgrade and its framed protocol, a daemon that also listens on TCP, and
the daemon's resident memory. conftest.py holds the shared fixtures."""
import http.client
import json
import os
import socket
import struct
import time

from conftest import REQUEST_TIMEOUT_S, Daemon, Response, UnixHTTPConnection, exchange, request_body
from conftest import wait_for as wait_until  # noqa: F401  (the name its users know)

MIB = 1024 * 1024

# The PTY protocol (docs/api.md): type (1 byte) | length (4 bytes, BE) | payload.
PTY_IN_DATA, PTY_IN_RESIZE, PTY_OUT_DATA, PTY_OUT_EXIT = 0, 1, 2, 3
PTY_HDR = struct.Struct(">BI")


def rss_kib(pid):
    """VmRSS of a process in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class TcpApi:
    """The API over the TCP listener, with an optional bearer token. Same
    request() as conftest.Api."""

    def __init__(self, port, token=None):
        self.port = port
        self.token = token

    def with_token(self, token):
        return TcpApi(self.port, token)

    def request(self, method, path, body=None, raw=None, headers=None, timeout=REQUEST_TIMEOUT_S):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return exchange(conn, method, path, body, raw, headers, self.token)


class ListeningDaemon(Daemon):
    """airlockd with --listen 127.0.0.1:PORT besides its unix socket."""

    def __init__(self, base_dir, port, **kw):
        super().__init__(base_dir, **kw)
        self.port = port

    def argv(self):
        return super().argv() + ["--listen", f"127.0.0.1:{self.port}"]


class Stream:
    """A streamed (chunked) answer read as it arrives: JSON lines or bytes.
    Over the unix socket by default; close() disconnects mid-stream."""

    def __init__(self, socket_path, method, path, body=None, raw=None, headers=None, timeout=REQUEST_TIMEOUT_S):
        self.conn = UnixHTTPConnection(socket_path, timeout=timeout)
        data, hdrs = request_body(body, raw, headers)
        self.conn.request(method, path, body=data, headers=hdrs)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = dict(self.resp.getheaders())
        self.lines = []  # every JSON line read so far

    def error_body(self):
        raw = self.resp.read()
        return Response(self.status, self.headers, raw, "STREAM", "")

    def next_line(self):
        """The next JSON line, or None at the end of the body."""
        raw = self.resp.readline()
        if not raw:
            return None
        assert raw.endswith(b"\n"), f"a partial line at the end of the stream: {raw!r}"
        line = json.loads(raw)
        self.lines.append(line)
        return line

    def read_until(self, pred, what):
        """Lines until pred(line) is true; returns that line."""
        while True:
            line = self.next_line()
            assert line is not None, f"stream ended before {what}; lines: {self.lines[-20:]}"
            if pred(line):
                return line

    def read_all(self):
        while self.next_line() is not None:
            pass
        return self.lines

    def read_bytes(self, n):
        return self.resp.read(n)

    def close(self):
        """Disconnects (also mid-stream)."""
        try:
            if self.conn.sock:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def output_bytes(lines, kind="stdout"):
    """The bytes of the stdout (or stderr) lines of a JSON-lines stream."""
    import base64
    out = bytearray()
    for line in lines:
        if line.get("type") == kind:
            out += base64.b64decode(line["data"]) if line["encoding"] == "base64" else line["data"].encode()
    return bytes(out)


def recv_exact(sock, buf, n, deadline, what, screen):
    """n bytes, first from buf then from sock, by deadline: (those bytes,
    what is left of buf). what and the end of screen explain a failure."""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what}: nothing more; screen so far: {bytes(screen[-500:])!r}")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError(f"{what}: connection closed; screen: {bytes(screen[-500:])!r}")
        buf += chunk
    return buf[:n], buf[n:]


class PtySession:
    """GET .../processes/{pid}/attach with the HTTP Upgrade, then the framed
    PTY protocol over the same socket."""

    def __init__(self, socket_path, sid, pid, timeout=60, headers=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(socket_path)
        hdrs = headers if headers is not None else {"Connection": "Upgrade", "Upgrade": "airlock-pty/1"}
        req = f"GET /v1/sandboxes/{sid}/processes/{pid}/attach HTTP/1.1\r\nHost: localhost\r\n"
        req += "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        self.sock.sendall(req.encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else None
        self.head = head
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        self.screen = bytearray()  # every type-2 byte received
        self.exit = None

    def send(self, mtype, payload):
        if isinstance(payload, str):
            payload = payload.encode()
        if isinstance(payload, dict):
            payload = json.dumps(payload).encode()
        self.sock.sendall(PTY_HDR.pack(mtype, len(payload)) + payload)

    def keys(self, text):
        self.send(PTY_IN_DATA, text)

    def resize(self, rows, cols):
        self.send(PTY_IN_RESIZE, {"rows": rows, "cols": cols})

    def _recv_exact(self, n, deadline):
        out, self.buf = recv_exact(self.sock, self.buf, n, deadline, "PTY", self.screen)
        return out

    def message(self, timeout=60):
        """(type, payload) of the next daemon message."""
        deadline = time.monotonic() + timeout
        mtype, length = PTY_HDR.unpack(self._recv_exact(PTY_HDR.size, deadline))
        assert mtype in (PTY_OUT_DATA, PTY_OUT_EXIT), f"PTY: unknown message type {mtype}"
        assert length <= 65536, f"PTY: message of {length} bytes"
        payload = self._recv_exact(length, deadline)
        if mtype == PTY_OUT_DATA:
            self.screen += payload
        else:
            self.exit = json.loads(payload)
        return mtype, payload

    def read_until(self, needle, timeout=60):
        """Messages until the screen (after `start`) contains needle."""
        if isinstance(needle, str):
            needle = needle.encode()
        start = len(self.screen)
        deadline = time.monotonic() + timeout
        while needle not in self.screen[start:]:
            assert self.exit is None, f"PTY: the process exited ({self.exit}) before {needle!r}; " \
                                      f"screen: {bytes(self.screen[-500:])!r}"
            self.message(max(0.01, deadline - time.monotonic()))
        return bytes(self.screen[start:])

    def wait_exit(self, timeout=60):
        deadline = time.monotonic() + timeout
        while self.exit is None:
            self.message(max(0.01, deadline - time.monotonic()))
        return self.exit

    def close(self):
        self.sock.close()


def guest_pids(api, sid, pattern):
    """pids of guest processes whose command line contains pattern (via ps;
    the exec doing the looking is left out)."""
    r = api.exec_ok(sid, ["sh", "-c", "for d in /proc/[0-9]*; do "
                                      "c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null); "
                                      "[ -n \"$c\" ] && echo \"${d#/proc/} $c\"; done"])
    found = []
    for line in r["stdout"].splitlines():
        pid, _, cmd = line.partition(" ")
        if pattern in cmd and "/proc/[0-9]" not in cmd:
            found.append((int(pid), cmd))
    return found
