# SPDX-License-Identifier: Apache-2.0
"""Commands in a sandbox: results of exec, output streams (JSON lines),
background processes, and the PTY protocol over the attach upgrade."""
import base64
import json
import math
import select
import socket
import struct
import time

from ._record import Record
from .errors import CommandFailed, ProtocolError, Timeout, error_from

PTY_PROTOCOL = "airlock-pty/1"
# The PTY protocol (docs/api.md): type (1 byte) | length (4 bytes, BE) | payload.
PTY_IN_DATA, PTY_IN_RESIZE, PTY_OUT_DATA, PTY_OUT_EXIT = 0, 1, 2, 3
PTY_PAYLOAD_MAX = 65536
_PTY_HDR = struct.Struct(">BI")
WAIT_MAX_S = 3600  # the longest wait the API takes in one request


def decode_data(data, encoding):
    """The bytes of an output field or line ("utf8" or "base64")."""
    if encoding == "base64":
        return base64.b64decode(data)
    return data.encode("utf-8")


def encode_stdin(stdin, body):
    """Puts stdin (str or bytes) into an exec or process body."""
    if stdin is None:
        return
    if isinstance(stdin, str):
        body["stdin"] = stdin
    else:
        body["stdin"] = base64.b64encode(bytes(stdin)).decode()
        body["stdin_encoding"] = "base64"


def command_argv(cmd):
    """A list is the argv; a string runs through `sh -c`."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    cmd = [str(a) for a in cmd]
    if not cmd:
        raise ValueError("cmd is empty")
    return cmd


def seconds(value):
    """A timeout in whole seconds (rounded up), or None."""
    return None if value is None else max(0, int(math.ceil(value)))


def command_body(cmd, env=None, cwd=None, uid=None, gid=None, timeout=None, stdin=None):
    """The body of an exec or a background process: "cmd" from command_argv,
    and the options both take (None leaves one out)."""
    body = {"cmd": command_argv(cmd)}
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if uid is not None:
        body["uid"] = int(uid)
    if gid is not None:
        body["gid"] = int(gid)
    if timeout is not None:
        body["timeout_s"] = max(1, seconds(timeout))
    encode_stdin(stdin, body)
    return body


class OutputChunk:
    """A piece of a process's output: stream is "stdout" or "stderr", data
    the bytes, text the bytes decoded as UTF-8."""

    __slots__ = ("stream", "data")

    def __init__(self, stream, data):
        self.stream = stream
        self.data = data

    @property
    def text(self):
        return self.data.decode("utf-8", "replace")

    def __repr__(self):
        return f"OutputChunk({self.stream!r}, {self.data!r})"


class ExecResult:
    """What a command left: exit_code (None when a signal ended it), signal,
    timed_out, stdout/stderr (text) and stdout_bytes/stderr_bytes."""

    def __init__(self, process_id, exit_code, signal, timed_out, stdout_bytes, stderr_bytes, duration_ms,
                 stdout_truncated=False, stderr_truncated=False, cmd=None):
        self.process_id = process_id
        self.exit_code = exit_code
        self.signal = signal
        self.timed_out = timed_out
        self.stdout_bytes = stdout_bytes
        self.stderr_bytes = stderr_bytes
        self.duration_ms = duration_ms
        self.stdout_truncated = stdout_truncated
        self.stderr_truncated = stderr_truncated
        self.cmd = cmd

    @classmethod
    def from_json(cls, j, cmd=None):
        return cls(j.get("process_id"), j.get("exit_code"), j.get("signal"), bool(j.get("timed_out")),
                   decode_data(j.get("stdout", ""), j.get("stdout_encoding", "utf8")),
                   decode_data(j.get("stderr", ""), j.get("stderr_encoding", "utf8")), j.get("duration_ms"),
                   bool(j.get("stdout_truncated")), bool(j.get("stderr_truncated")), cmd)

    @property
    def stdout(self):
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self):
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self):
        return self.exit_code == 0

    def check(self):
        """Raises CommandFailed unless the command exited 0; returns self."""
        if self.exit_code != 0:
            how = ("timed out" if self.timed_out else f"was killed by signal {self.signal}"
                   if self.exit_code is None else f"exited with {self.exit_code}")
            tail = self.stderr[-2000:].strip()
            raise CommandFailed(f"{self.cmd!r} {how}" + (f"; stderr: {tail}" if tail else ""), self)
        return self

    def __repr__(self):
        return (f"ExecResult(exit_code={self.exit_code!r}, signal={self.signal!r}, timed_out={self.timed_out!r}, "
                f"stdout={self.stdout[:80]!r}, stderr={self.stderr[:80]!r})")


class OutputStream:
    """The JSON lines of a streamed exec or of a process's output, as
    OutputChunk items. After the end: .exit (the exit line as a dict, or
    None when the stream ended at the present), .process_id (streamed exec),
    .dropped (bytes that fell out of the kept buffer before this reader)."""

    def __init__(self, lines):
        self._lines = lines
        self.exit = None
        self.process_id = None
        self.dropped = 0

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self._lines is None:
                raise StopIteration
            try:
                line = next(self._lines)
            except StopIteration:
                self._lines = None
                raise
            kind = line.get("type")
            if kind in ("stdout", "stderr"):
                return OutputChunk(kind, decode_data(line.get("data", ""), line.get("encoding", "utf8")))
            if kind == "start":
                self.process_id = line.get("process_id")
            elif kind == "dropped":
                self.dropped += int(line.get("bytes", 0))
            elif kind == "exit":
                self.exit = line
                self.close()
            elif kind == "error":
                self.close()
                err = line.get("error") or {}
                raise error_from(err.get("code"), err.get("message") or "the stream ended with an error")
            # Unknown line types are skipped: the API may add some.

    def close(self):
        lines, self._lines = self._lines, None
        if lines is not None:
            lines.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Process(Record):
    """A process of a sandbox (every exec is one; background ones outlive
    their request). .id, .state ("running" or "exited"), .exit_code,
    .exit_signal, .timed_out, .tag, .pty and the rest of the process object
    in .data."""

    def __init__(self, sandbox, data):
        self.sandbox = sandbox
        self.data = data

    @property
    def exit_signal(self):
        """The number of the signal that ended it (the process object's
        `signal`; .signal is the method that sends one)."""
        return self.data.get("signal")

    def __repr__(self):
        return f"Process({self.id!r}, state={self.data.get('state')!r}, exit_code={self.data.get('exit_code')!r})"

    def _path(self, tail=""):
        return f"{self.sandbox._path()}/processes/{self.id}{tail}"

    @property
    def _t(self):
        return self.sandbox.client.transport

    def refresh(self):
        """GET .../processes/{pid}"""
        self.data = self._t.request("GET", self._path(), query=self.sandbox._resume_q()).json()
        return self

    def output(self, follow=True, from_start=True, timeout=None):
        """GET .../processes/{pid}/output: an OutputStream of OutputChunk;
        with follow it ends when the process does (.exit set), else at the
        present. from_start=False: only new output. timeout bounds each wait
        for more (None: no bound)."""
        q = {"from": "start" if from_start else "now", "follow": bool(follow)}
        q.update(self.sandbox._resume_q())
        return OutputStream(self._t.lines("GET", self._path("/output"), query=q, timeout=timeout))

    def write_stdin(self, data, eof=False):
        """POST .../processes/{pid}/stdin (processes started with
        stdin_stream=True, or a PTY); eof=True closes stdin after data."""
        if isinstance(data, str):
            data = data.encode()
        q = {"eof": bool(eof)}
        q.update(self.sandbox._resume_q())
        self._t.request("POST", self._path("/stdin"), query=q, data=bytes(data))

    def close_stdin(self):
        self.write_stdin(b"", eof=True)

    def signal(self, sig="TERM"):
        """POST .../processes/{pid}/signal: a name ("TERM", "SIGKILL") or a
        number, to the process's group."""
        if isinstance(sig, str) and sig.upper().startswith("SIG"):
            sig = sig[3:]
        self._t.request("POST", self._path("/signal"), query=self.sandbox._resume_q(),
                        json={"signal": sig.upper() if isinstance(sig, str) else int(sig)})

    def kill(self):
        self.signal("KILL")

    def resize(self, rows, cols):
        """POST .../processes/{pid}/resize (PTY processes)."""
        self._t.request("POST", self._path("/resize"), query=self.sandbox._resume_q(),
                        json={"rows": int(rows), "cols": int(cols)})

    def wait(self, timeout=None):
        """GET .../processes/{pid}/wait until it exits; returns self with the
        exited process object. With a timeout (seconds) that passes first it
        raises Timeout (status 408, .process: this process, still running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_MAX_S if deadline is None else seconds(deadline - time.monotonic())
            step = min(left, WAIT_MAX_S)
            q = {"timeout_s": step}
            q.update(self.sandbox._resume_q())
            a = self._t.request("GET", self._path("/wait"), query=q, ok=(408,), timeout=step + 60)
            self.data = a.json()
            if a.status != 408:
                return self
            if deadline is not None and time.monotonic() >= deadline:
                e = Timeout(f"process {self.id} of {self.sandbox.id} still runs after {timeout} s", status=408)
                e.process = self
                raise e

    def attach(self):
        """GET .../processes/{pid}/attach (Upgrade: airlock-pty/1): a Pty."""
        sock, rest = self._t.upgrade(self._path("/attach"), PTY_PROTOCOL, query=self.sandbox._resume_q())
        return Pty(self, sock, rest)


class Pty:
    """A terminal attached to a PTY process (docs/api.md, "The PTY
    protocol"): write() keys, resize(), read() what the terminal shows,
    wait() for the exit object, close() to detach (the process goes on)."""

    def __init__(self, process, sock, buffered=b""):
        self.process = process
        self._sock = sock
        self._buf = bytearray(buffered)
        self._pending = bytearray()  # terminal bytes parsed but not yet returned by read()
        self.exit = None  # the exit object once the process ended

    def _send(self, mtype, payload):
        for off in range(0, max(len(payload), 1), PTY_PAYLOAD_MAX):
            part = payload[off:off + PTY_PAYLOAD_MAX]
            self._sock.sendall(_PTY_HDR.pack(mtype, len(part)) + part)
            if mtype != PTY_IN_DATA:
                break

    def write(self, data):
        """Bytes (or text) for the terminal; "\\x03" is Ctrl-C."""
        if isinstance(data, str):
            data = data.encode()
        self._send(PTY_IN_DATA, bytes(data))

    def resize(self, rows, cols):
        self._send(PTY_IN_RESIZE, json.dumps({"rows": int(rows), "cols": int(cols)}).encode())

    def _fill(self, deadline):
        """Reads more from the socket; False on a timeout, EOFError on close."""
        pending = getattr(self._sock, "pending", None)  # TLS: bytes already decrypted
        if deadline is not None and not (pending and pending()):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self._sock], [], [], left)
            if not r:
                return False
        self._sock.settimeout(None)
        chunk = self._sock.recv(65536)
        if not chunk:
            raise EOFError
        self._buf += chunk
        return True

    def _message(self, deadline):
        """Parses one message into _pending / exit; False on a timeout."""
        while True:
            if len(self._buf) >= _PTY_HDR.size:
                mtype, length = _PTY_HDR.unpack_from(self._buf)
                # SECURITY: the length is checked before anything is buffered for it.
                if mtype not in (PTY_OUT_DATA, PTY_OUT_EXIT) or length > PTY_PAYLOAD_MAX:
                    self.close()
                    raise ProtocolError(f"PTY: the daemon sent a message of type {mtype}, {length} bytes")
                if len(self._buf) >= _PTY_HDR.size + length:
                    payload = bytes(self._buf[_PTY_HDR.size:_PTY_HDR.size + length])
                    del self._buf[:_PTY_HDR.size + length]
                    if mtype == PTY_OUT_DATA:
                        self._pending += payload
                    else:
                        self.exit = json.loads(payload)
                    return True
            try:
                if not self._fill(deadline):
                    return False
            except EOFError:
                if self.exit is None:
                    raise ProtocolError("PTY: the daemon closed the connection without an exit message") from None
                return False

    def read(self, timeout=None):
        """Terminal bytes: what is there, else what comes within timeout
        seconds (None: wait); b"" once the process exited (see .exit) or on
        a timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending and self.exit is None:
            if not self._message(deadline):
                break
        out = bytes(self._pending)
        self._pending.clear()
        return out

    def read_until(self, needle, timeout=60):
        """Reads until the terminal output (from now) contains needle;
        returns it all. Timeout (status None) if it does not come."""
        if isinstance(needle, str):
            needle = needle.encode()
        deadline = time.monotonic() + timeout
        seen = bytearray()
        while needle not in seen:
            if self.exit is not None and not self._pending:
                raise ProtocolError(f"PTY: the process exited before {needle!r}; screen: {bytes(seen[-300:])!r}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(f"PTY: no {needle!r} within {timeout} s; screen: {bytes(seen[-300:])!r}")
            seen += self.read(left)
        return bytes(seen)

    def wait(self, timeout=None):
        """Reads until the exit message; returns the exit object."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.exit is None:
            if not self._message(deadline):
                raise Timeout(f"PTY: the process did not exit within {timeout} s")
        return self.exit

    def close(self):
        """Detaches (the process keeps running)."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def raise_if_failed(result, check):
    if check:
        result.check()
    return result
