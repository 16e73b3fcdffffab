# SPDX-License-Identifier: Apache-2.0
"""A hostile guest agent (tests/security/test_sec_agent.py), run as guest
root inside a `base` sandbox: it takes the real airlock-agent's channel fd
(pidfd_getfd), stops the real agent (ptrace: the agent is PID 1, which no
signal stops from inside its namespace) and answers the host itself. How it
misbehaves depends on the request it answers (the path of a FILE_OP, the
n-th METRICS), so the test drives every attack through the daemon's API.
When it exits, the real agent resumes (the tracer's exit detaches it).

    python3 -S /tmp/hostile.py [STARTUP]

STARTUP (optional) is a misbehaviour done at once, without a request:
hello-flood, stray-flood, oversize-frame.
"""
import ctypes
import json
import os
import select
import struct
import sys

HELLO, EXEC, STDIN, STDOUT, STDERR, EXIT, ERROR, FILE_WRITE, FILE_READ, FILE_DATA, OK = range(1, 12)
SHUTDOWN, SIGNAL, CREDIT, RESIZE, FILE_OP, METRICS = range(12, 18)
WINDOW = 1024 * 1024
MAXP = 64 * 1024

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def log(*args):
    """To the serial console (the daemon keeps it in the sandbox's directory)."""
    try:
        with open("/dev/console", "w") as f:
            f.write("hostile: " + " ".join(str(a) for a in args) + "\n")
    except OSError:
        pass


def channel_fd():
    for name in os.listdir("/proc/1/fd"):
        try:
            if "vport" in os.readlink(f"/proc/1/fd/{name}"):
                pidfd = os.pidfd_open(1)
                fd = libc.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
                if fd < 0:
                    raise SystemExit("pidfd_getfd: errno %d" % ctypes.get_errno())
                return fd
        except OSError:
            continue
    raise SystemExit("no virtio-serial fd in the agent")


def stop_agent():
    for tid in os.listdir("/proc/1/task"):
        tid = int(tid)
        if libc.ptrace(0x4206, tid, None, None) < 0:  # PTRACE_SEIZE
            raise SystemExit("PTRACE_SEIZE %d: errno %d" % (tid, ctypes.get_errno()))
        if libc.ptrace(0x4207, tid, None, None) < 0:  # PTRACE_INTERRUPT
            raise SystemExit("PTRACE_INTERRUPT %d: errno %d" % (tid, ctypes.get_errno()))
        os.waitpid(tid, 0x40000000)  # __WALL: until it is in its stop


class Hostile:
    def __init__(self, fd):
        self.fd = fd
        self.buf = b""
        self.credit = {}        # stream -> bytes we may still send (what a real agent honours)
        self.streaming = {}     # stream -> generator of frames sent as credit allows
        self.metrics = 0
        self.pending = []
        os.set_blocking(fd, False)

    def send(self, t, stream, payload=b""):
        data = struct.pack(">BBHII", 1, t, 0, stream, len(payload)) + payload
        self.raw(data)

    def raw(self, data):
        while data:
            try:
                n = os.write(self.fd, data)
                data = data[n:]
            except BlockingIOError:
                self.pump_in(0.05)

    def send_json(self, t, stream, obj):
        self.send(t, stream, json.dumps(obj).encode())

    def hello(self):
        boot = open("/proc/sys/kernel/random/boot_id").read().strip().replace("-", "")
        self.send_json(HELLO, 0, {"proto": 1, "agent": "hostile", "generation": 0, "boot_id": boot,
                                  "kernel": os.uname().release})

    def pump_in(self, wait):
        r, _, _ = select.select([self.fd], [], [], wait)
        if not r:
            return
        try:
            chunk = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            raise SystemExit("channel closed")
        self.buf += chunk
        while len(self.buf) >= 12:
            _, t, _, stream, length = struct.unpack(">BBHII", self.buf[:12])
            if len(self.buf) < 12 + length:
                break
            payload, self.buf = self.buf[12:12 + length], self.buf[12 + length:]
            self.pending.append((t, stream, payload))

    def run(self):
        while True:
            self.pump_in(0.2)
            while self.pending:
                t, stream, payload = self.pending.pop(0)
                self.handle(t, stream, payload)
            self.stream_out()

    def stream_out(self):
        """Endless answers that honour the window: as much as credit allows."""
        for stream, (t, gen) in list(self.streaming.items()):
            while self.credit.get(stream, 0) >= MAXP:  # within the window, as a real agent
                frame = next(gen)
                self.credit[stream] -= len(frame)
                self.send(t, stream, frame)

    def handle(self, t, stream, payload):
        if t != CREDIT:
            log("frame", t, stream, payload[:80])
        if t == HELLO and stream == 0:
            self.hello()
        elif t == CREDIT and len(payload) == 4:
            self.credit[stream] = self.credit.get(stream, 0) + struct.unpack(">I", payload)[0]
        elif t == FILE_OP:
            req = json.loads(payload)
            self.file_op(stream, req.get("op"), req.get("path", ""))
        elif t == METRICS:
            self.metrics += 1
            self.metrics_answer(stream)
        elif t == FILE_READ and json.loads(payload).get("path", "").endswith("/overrun"):
            for _ in range(128):  # 8 MiB, no credit awaited
                self.send(FILE_DATA, stream, b"r" * MAXP)
            self.send(FILE_DATA, stream, b"")
        elif t == EXEC and json.loads(payload).get("argv", [""])[0] == "endless":
            chunk = b"out" * 20000  # endless output within the window, never an EXIT
            self.credit[stream] = WINDOW
            self.streaming[stream] = (STDOUT, iter(lambda: chunk, None))
        elif t in (EXEC, FILE_READ, FILE_WRITE):
            self.send_json(ERROR, stream, {"code": "eio", "errno": 5, "message": "hostile agent"})

    def metrics_answer(self, stream):
        if self.metrics == 1:   # wide: 900 members, 14 KB (within the result limit)
            self.send_json(OK, stream, {f"k{i:05d}": i for i in range(900)})
        else:                   # huge: 60 KiB
            self.send_json(OK, stream, {"cpus": 1, "junk": "x" * 60000})

    def file_op(self, stream, op, path):
        name = path.rsplit("/", 1)[-1]
        if op == "stat":
            self.stat(stream, name)
        elif op == "list":
            self.list(stream, name)
        else:
            self.send_json(ERROR, stream, {"code": "eio", "errno": 5, "message": "hostile agent"})

    def stat(self, stream, name):
        if name == "ready":
            self.send_json(OK, stream, {"name": "HOSTILE", "type": "file", "size": 0, "mode": 0o644})
        elif name == "overrun":  # a download's stat, then FILE_READ (handle)
            self.send_json(OK, stream, {"name": "overrun", "type": "file", "size": 8 << 20, "mode": 0o644})
        elif name == "huge-error":
            self.send_json(ERROR, stream, {"code": "eio", "errno": 5, "message": "E" * 60000})
        elif name == "wide-error":
            obj = {"code": "eio", "errno": 5, "message": "W" * 8000}
            obj.update({f"n{i}": [[[i]]] for i in range(300)})
            self.send_json(ERROR, stream, obj)
        elif name == "deep-error":  # 8000 nested arrays (16 KB, within the result limit)
            self.send(ERROR, stream, b'{"code":"eio","message":"deep","x":' + b"[" * 8000 + b"]" * 8000 + b"}")
        elif name == "huge-hello":  # an unasked HELLO of 60 KB, then the answer
            self.send_json(HELLO, 0, {"proto": 1, "agent": "A" * 20000, "generation": 2**62,
                                      "boot_id": "B" * 20000, "kernel": "\x1b[31m" * 2000})
            self.send_json(OK, stream, {"name": "hello-sent", "type": "file"})
        elif name == "late-answers":
            self.send_json(OK, stream, {"name": "late", "type": "file"})
            for _ in range(200):
                self.send_json(OK, stream, {"name": "again"})
                self.send_json(EXIT, stream, {"exit_code": 0})
                self.send(FILE_DATA, stream, b"x" * 1000)
        elif name == "exit-on-stat":
            self.send_json(EXIT, stream, {"exit_code": 0})
        elif name == "stdout-on-stat":
            self.send(STDOUT, stream, b"not asked for")
        elif name == "exec-frame-on-stat":
            self.send_json(EXEC, stream, {"argv": ["sh"]})
        else:
            self.send_json(ERROR, stream, {"code": "enoent", "errno": 2, "message": "no such file"})

    def list(self, stream, name):
        entry = json.dumps({"name": "f" * 40, "type": "file", "size": 1, "mode": 420, "uid": 0, "gid": 0,
                            "mtime_ms": 0})
        if name == "endless":
            chunk = ('{"entries":[' + ",".join([entry] * 500) + "]}").encode()
            self.credit[stream] = WINDOW
            self.streaming[stream] = (FILE_DATA, iter(lambda: chunk, None))
        elif name == "fat-entries":
            fat = json.dumps({"name": "x", **{f"junk{i}": [i] for i in range(2500)}})
            chunk = ('{"entries":[' + fat + "]}").encode()
            assert len(chunk) < MAXP, len(chunk)
            self.credit[stream] = WINDOW
            self.streaming[stream] = (FILE_DATA, iter(lambda: chunk, None))
        elif name == "malformed":
            self.send(FILE_DATA, stream, b"\x00not json" * 100)
        else:
            self.send_json(ERROR, stream, {"code": "enoent", "errno": 2, "message": "no such directory"})

    def startup(self, what):
        if what == "hello-flood":
            for _ in range(200):
                self.hello()
        elif what == "stray-flood":
            base = 0x7ffffff0
            for i in range(20000):  # EXIT/OK/ERROR and data for streams never opened
                s = base - i
                self.send_json((EXIT, OK, ERROR)[i % 3], s, {"exit_code": 0, "code": "x", "message": "x"})
                if i % 10 == 0:
                    self.send(FILE_DATA, s, b"d" * MAXP)
        elif what == "oversize-frame":
            self.raw(struct.pack(">BBHII", 1, STDOUT, 0, 1, 64 << 20) + b"o" * 65536)


def main():
    fd = channel_fd()
    stop_agent()
    h = Hostile(fd)
    if len(sys.argv) > 1:
        h.startup(sys.argv[1])
    h.run()


main()
