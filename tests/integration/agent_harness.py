#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Host-side harness for airlock-agent: speaks the frame protocol of
include/airlock/proto.h directly, without the daemon.

Two ways to reach an agent:
  LocalAgent  runs build/airlock-agent --channel-fd on this host over a
              socketpair (fast; no VM, no boot, no switch root).
  VmAgent     boots a QEMU microVM (TCG) on airlockd's command line
              (qemuutil.py, without a NIC) with the kernel, initramfs and a
              template from build/images, and connects to its virtio-serial
              socket.

Run the checks:  /usr/bin/python3 tests/integration/agent_harness.py [local|vm|all]
(`make images` first for vm). Every QEMU started here is killed on exit.
"""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import qemuutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
AGENT = os.path.join(BUILD, "airlock-agent")
IMAGES = os.path.join(BUILD, "images")

VERSION = 1
(HELLO, EXEC, STDIN, STDOUT, STDERR, EXIT, ERROR, FILE_WRITE, FILE_READ, FILE_DATA, OK, SHUTDOWN, SIGNAL, CREDIT,
 RESIZE, FILE_OP, METRICS, FREEZE, THAW, WATCH, WATCH_EVENTS) = range(1, 22)
NAMES = {v: k for k, v in dict(HELLO=HELLO, EXEC=EXEC, STDIN=STDIN, STDOUT=STDOUT, STDERR=STDERR, EXIT=EXIT,
                               ERROR=ERROR, FILE_WRITE=FILE_WRITE, FILE_READ=FILE_READ, FILE_DATA=FILE_DATA,
                               OK=OK, SHUTDOWN=SHUTDOWN, SIGNAL=SIGNAL, CREDIT=CREDIT, RESIZE=RESIZE,
                               FILE_OP=FILE_OP, METRICS=METRICS, FREEZE=FREEZE, THAW=THAW, WATCH=WATCH,
                               WATCH_EVENTS=WATCH_EVENTS).items()}
TYPE_MAX = WATCH_EVENTS
MAX_PAYLOAD = 64 * 1024
STDIN_WINDOW = 256 * 1024
OUTPUT_WINDOW = 1024 * 1024
MIB = 1024 * 1024
HDR = struct.Struct(">BBHII")


class Conn:
    """One channel: frames out, frames in (buffered per stream)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.pending = []  # frames read but not yet taken

    def credit(self, stream, n):
        """Returns output credit (AIRLOCK_OUTPUT_WINDOW) for n bytes consumed."""
        if n:
            self.send(CREDIT, stream, struct.pack(">I", n))

    def send(self, ftype, stream, payload=b""):
        if isinstance(payload, (dict, list)):
            payload = json.dumps(payload).encode()
        assert len(payload) <= MAX_PAYLOAD
        self.sock.sendall(HDR.pack(VERSION, ftype, 0, stream, len(payload)) + payload)

    def _read_frame(self, deadline):
        while True:
            if len(self.buf) >= HDR.size:
                ver, ftype, flags, stream, length = HDR.unpack_from(self.buf)
                assert ver == VERSION and flags == 0 and 1 <= ftype <= TYPE_MAX and length <= MAX_PAYLOAD, \
                    f"bad header {self.buf[:12].hex()}"
                if len(self.buf) >= HDR.size + length:
                    payload = self.buf[HDR.size:HDR.size + length]
                    self.buf = self.buf[HDR.size + length:]
                    return ftype, stream, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from the agent")
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("agent closed the channel")
            self.buf += data

    def recv(self, stream=None, timeout=30):
        """Next frame (optionally of one stream; others are kept for later)."""
        deadline = time.monotonic() + timeout
        for i, f in enumerate(self.pending):
            if stream is None or f[1] == stream:
                return self.pending.pop(i)
        while True:
            f = self._read_frame(deadline)
            if stream is None or f[1] == stream:
                return f
            self.pending.append(f)

    def hello(self, timeout=30):
        self.send(HELLO, 0, {})
        while True:
            ftype, stream, payload = self.recv(0, timeout)
            if ftype == HELLO:
                return json.loads(payload)


class Exec:
    """An exec stream driven step by step (stdin with credit, signals)."""

    def __init__(self, conn, stream, argv, stdin=False, auto_credit=True, **kw):
        self.conn, self.stream = conn, stream
        self.stdout, self.stderr = bytearray(), bytearray()
        self.exit = self.error = None
        self.credit = STDIN_WINDOW
        # Output flow control: with auto_credit every byte read is credited
        # back at once; without, the caller calls grant().
        self.auto_credit = auto_credit
        self.uncredited = 0  # output received and not yet credited
        req = {"argv": argv, "stdin": stdin}
        req.update(kw)
        conn.send(EXEC, stream, req)

    def grant(self, n=None):
        n = self.uncredited if n is None else n
        self.conn.credit(self.stream, n)
        self.uncredited -= n

    def _output(self, p):
        self.uncredited += len(p)
        assert self.uncredited <= OUTPUT_WINDOW, f"stream {self.stream}: {self.uncredited} bytes beyond the window"
        if self.auto_credit:
            self.grant()

    def _take(self, timeout):
        ftype, _, p = self.conn.recv(self.stream, timeout)
        if ftype == STDOUT:
            self.stdout += p
            self._output(p)
        elif ftype == STDERR:
            self.stderr += p
            self._output(p)
        elif ftype == CREDIT:
            self.credit += struct.unpack(">I", p)[0]
        elif ftype == EXIT:
            self.exit = json.loads(p)
        elif ftype == ERROR:
            self.error = json.loads(p)
        else:
            raise AssertionError(f"unexpected {NAMES.get(ftype)} on stream {self.stream}")

    @property
    def done(self):
        return self.exit is not None or self.error is not None

    def write(self, data, timeout=30):
        view = memoryview(data)
        while view:
            while self.credit == 0 and not self.done:
                self._take(timeout)
            if self.done:
                return
            n = min(len(view), self.credit, MAX_PAYLOAD)
            self.conn.send(STDIN, self.stream, bytes(view[:n]))
            self.credit -= n
            view = view[n:]

    def close_stdin(self):
        self.conn.send(STDIN, self.stream, b"")

    def signal(self, sig):
        self.conn.send(SIGNAL, self.stream, {"signal": sig})

    def resize(self, rows, cols):
        self.conn.send(RESIZE, self.stream, {"rows": rows, "cols": cols})

    def read_until(self, needle, timeout=30):
        """Takes frames until stdout contains needle (PTY conversations)."""
        deadline = time.monotonic() + timeout
        while needle not in self.stdout:
            assert not self.done, (needle, bytes(self.stdout), self.exit, self.error)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {needle!r} in {bytes(self.stdout)!r}")
            self._take(left)

    def take_for(self, seconds):
        """Takes frames for a while (until nothing comes for that long)."""
        while True:
            try:
                self._take(seconds)
            except (TimeoutError, socket.timeout):
                return
            if self.done:
                return

    def wait(self, timeout=60):
        deadline = time.monotonic() + timeout
        while not self.done:
            self._take(max(0.01, deadline - time.monotonic()))
        return self


class Client(Conn):
    def __init__(self, sock):
        super().__init__(sock)
        self.next_stream = 1

    def new_stream(self):
        s = self.next_stream
        self.next_stream += 1
        return s

    def start(self, argv, **kw):
        return Exec(self, self.new_stream(), argv, **kw)

    def run(self, argv, input=None, timeout=60, **kw):
        e = self.start(argv, stdin=input is not None, **kw)
        if input is not None:
            e.write(input)
            e.close_stdin()
        return e.wait(timeout)

    def write_file(self, path, data, mode=0o644, chunk=MAX_PAYLOAD, **kw):
        """FILE_WRITE with at most STDIN_WINDOW in flight, as CREDIT allows."""
        s = self.new_stream()
        self.send(FILE_WRITE, s, dict(path=path, mode=mode, **kw))
        credit, credited = STDIN_WINDOW, 0
        for i in range(0, len(data), chunk):
            piece = data[i:i + chunk]
            while credit < len(piece):
                ftype, _, p = self.recv(s)
                if ftype != CREDIT:
                    return NAMES[ftype], json.loads(p)  # an early ERROR
                credit += struct.unpack(">I", p)[0]
                credited += struct.unpack(">I", p)[0]
            self.send(FILE_DATA, s, piece)
            credit -= len(piece)
        self.send(FILE_DATA, s, b"")
        while True:
            ftype, _, p = self.recv(s)
            if ftype != CREDIT:
                break
            credited += struct.unpack(">I", p)[0]
        if ftype == OK:
            assert credited == len(data), (credited, len(data))
        return NAMES[ftype], json.loads(p)

    def read_file(self, path, auto_credit=True, stall_s=None):
        """FILE_READ, crediting what it reads; with auto_credit=False it
        checks that the agent stops at the window (for stall_s), then credits."""
        s = self.new_stream()
        self.send(FILE_READ, s, {"path": path})
        out = bytearray()
        uncredited = 0
        while True:
            try:
                ftype, _, p = self.recv(s, stall_s if not auto_credit and stall_s else 30)
            except (TimeoutError, socket.timeout):
                assert uncredited == OUTPUT_WINDOW, uncredited
                self.stalled = len(out)
                auto_credit = True
                self.credit(s, uncredited)
                uncredited = 0
                continue
            if ftype == ERROR:
                return "ERROR", json.loads(p)
            assert ftype == FILE_DATA, NAMES[ftype]
            if not p:
                return "OK", bytes(out)
            out += p
            uncredited += len(p)
            assert uncredited <= OUTPUT_WINDOW, uncredited
            if auto_credit:
                self.credit(s, uncredited)
                uncredited = 0

    def file_op(self, op, path, auto_credit=True, **kw):
        """FILE_OP: ("OK", payload, entries) or ("ERROR", payload, None)."""
        s = self.new_stream()
        self.send(FILE_OP, s, dict(op=op, path=path, **kw))
        entries, uncredited = [], 0
        self.chunks = 0
        while True:
            ftype, _, p = self.recv(s)
            if ftype == FILE_DATA:
                assert len(p) <= MAX_PAYLOAD
                entries += json.loads(p)["entries"]
                self.chunks += 1
                uncredited += len(p)
                assert uncredited <= OUTPUT_WINDOW, uncredited
                if auto_credit:
                    self.credit(s, uncredited)
                    uncredited = 0
                continue
            assert ftype in (OK, ERROR), NAMES[ftype]
            return NAMES[ftype], json.loads(p), entries if op == "list" and ftype == OK else None

    def metrics(self):
        s = self.new_stream()
        self.send(METRICS, s, {})
        ftype, _, p = self.recv(s)
        return NAMES[ftype], json.loads(p)

    def freeze(self, payload=None):
        s = self.new_stream()
        self.send(FREEZE, s, {} if payload is None else payload)
        ftype, _, p = self.recv(s)
        return NAMES[ftype], json.loads(p)

    def thaw(self, generation=1, orphan_streams=False, time_ms=None, hostname="airlock", sandbox_id="sb-test",
             entropy=None, raw=None, mac=None):
        s = self.new_stream()
        req = raw if raw is not None else dict(
            generation=generation, entropy=base64.b64encode(entropy or os.urandom(64)).decode(),
            time_ms=int(time.time() * 1000) if time_ms is None else time_ms, sandbox_id=sandbox_id,
            hostname=hostname, orphan_streams=orphan_streams)
        if mac is not None:
            req["mac"] = mac
        self.send(THAW, s, req)
        ftype, _, p = self.recv(s)
        return NAMES[ftype], json.loads(p)


class LocalAgent:
    """build/airlock-agent --channel-fd over a socketpair, on this host."""

    def __init__(self, run_dir=None):
        host, guest = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        if run_dir:
            env["AIRLOCK_AGENT_RUN_DIR"] = run_dir  # where THAW writes generation, sandbox_id
        self.proc = subprocess.Popen([AGENT, "--channel-fd", str(guest.fileno())], pass_fds=[guest.fileno()],
                                     env=env)
        guest.close()
        self.client = Client(host)
        self.hello = json.loads(self.client.recv(0, 10)[2])

    def close(self):
        self.client.sock.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class VmAgent:
    """A QEMU microVM booted from build/images with the agent as /init, on
    airlockd's command line (qemuutil.qemu_argv) without a NIC, under TCG,
    its console in a file. QEMU runs in self.dir: its sockets (ctl.sock,
    qmp.sock) and disk are there."""

    def __init__(self, template="minimal", rootfs=None, mem_mib=256, root_arg=True, connect=True, overlay=None,
                 incoming=None):
        """overlay: start from a copy of this qcow2 overlay (a snapshot's disk)
        instead of a new one. incoming: a saved state to restore instead of
        booting (QEMU waits for load(); see snapshot_restore)."""
        self.dir = tempfile.mkdtemp(prefix="airlock-vm-")
        self.sock_path = os.path.join(self.dir, "ctl.sock")
        self.qmp_path = os.path.join(self.dir, "qmp.sock")
        self.console = os.path.join(self.dir, "console.log")
        rootfs = rootfs or os.path.join(IMAGES, "templates", template, "rootfs.ext4")
        self.overlay = os.path.join(self.dir, "disk.qcow2")
        if overlay:
            shutil.copyfile(overlay, self.overlay)
        else:
            qemuutil.create_overlay(rootfs, self.overlay)
        # QEMU reads its files from fds, as in airlockd's jail (at the
        # numbers they have here).
        paths = [os.path.join(IMAGES, "kernels", "vmlinuz"), os.path.join(IMAGES, "kernels", "initramfs.cpio"),
                 rootfs] + ([incoming] if incoming else [])
        fds = [os.open(path, os.O_RDONLY | os.O_CLOEXEC) for path in paths]
        try:
            self.fds = qemuutil.Fds(*fds[:3], incoming=fds[3] if incoming else None, mem=None)
            self.cmd = qemuutil.qemu_argv("airlock-harness", memory_mib=mem_mib, kvm=False, restore=bool(incoming),
                                          net=False, fds=self.fds, console=self.console,
                                          root="/dev/vda" if root_arg else None)
            self.t0 = time.monotonic()
            self.proc = subprocess.Popen(self.cmd, cwd=self.dir, stdin=subprocess.DEVNULL, pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        self.client = None
        self.boot_s = None
        if connect:
            self.connect()

    def connect(self, timeout=60, hello=False):
        """hello=True: ask for HELLO (a restored agent does not say it unasked)."""
        try:
            sock = qemuutil.connect_unix(self.sock_path, self.proc, timeout)
        except RuntimeError as e:
            raise RuntimeError(f"{e}: {self.console_text()}") from None
        self.client = Client(sock)
        if hello:
            self.hello = self.client.hello(timeout)
            return
        ftype, _, p = self.client.recv(0, timeout)
        assert ftype == HELLO, NAMES[ftype]
        self.boot_s = time.monotonic() - self.t0
        self.hello = json.loads(p)

    def console_text(self):
        try:
            with open(self.console, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait_exit(self, timeout):
        return self.proc.wait(timeout)

    def qmp(self, command, **arguments):
        """One QMP command on a fresh connection (greeting, qmp_capabilities)."""
        return qemuutil.qmp(self.qmp_path, command, proc=self.proc, **arguments)

    def close(self):
        if self.client:
            self.client.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- checks

def check_common(c, in_vm):
    h = c.hello()
    assert h["proto"] == 1 and h["agent"] and len(h["boot_id"]) == 32 and h["kernel"], h

    e = c.run(["sh", "-c", "echo hi; echo err >&2; exit 3"])
    assert e.exit == {"exit_code": 3} and e.stdout == b"hi\n" and e.stderr == b"err\n", vars(e)

    data = os.urandom(600 * 1024)  # > STDIN_WINDOW: needs CREDIT to get through
    e = c.run(["cat"], input=data)
    assert e.exit == {"exit_code": 0} and bytes(e.stdout) == data, (e.exit, len(e.stdout))

    e = c.run(["sh", "-c", "read x; echo got $x"], input=b"")
    assert e.exit == {"exit_code": 0} and e.stdout == b"got\n", vars(e)

    # The child closes stdin early: later data is dropped but still credited.
    e = c.start(["sh", "-c", "exec 0<&-; sleep 0.3; echo done"], stdin=True)
    e.write(os.urandom(STDIN_WINDOW * 2))
    e.close_stdin()
    e.wait()
    assert e.exit == {"exit_code": 0} and e.stdout == b"done\n", vars(e)

    # 10 MiB while another exec runs: both complete, output intact.
    big = c.start(["head", "-c", str(10 * 1024 * 1024), "/dev/zero"])
    small = c.start(["sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.1; done"])
    t0 = time.monotonic()
    while not (big.done and small.done):
        f = c.recv(None, 60)
        target = big if f[1] == big.stream else small
        c.pending.insert(0, f)
        target._take(60)
    dt = time.monotonic() - t0
    assert big.exit == {"exit_code": 0} and len(big.stdout) == 10 * 1024 * 1024 and not big.stdout.strip(b"\0")
    assert small.exit == {"exit_code": 0} and small.stdout == b"1\n2\n3\n", vars(small)
    print(f"  10 MiB of stdout in {dt:.2f} s")

    t0 = time.monotonic()
    e = c.run(["sleep", "30"], timeout_ms=500)
    assert e.exit == {"signal": 9, "timed_out": True}, e.exit
    assert time.monotonic() - t0 < 5

    e = c.start(["sleep", "30"])
    time.sleep(0.2)
    e.signal(15)
    e.wait()
    assert e.exit == {"signal": 15}, e.exit

    e = c.run(["definitely-not-a-binary"])
    assert e.error and e.error["code"] == "enoent" and e.error["errno"] == 2, e.error
    assert 'exec "definitely-not-a-binary"' in e.error["message"], e.error
    e = c.run(["pwd"], cwd="/nonexistent")
    assert e.error and e.error["code"] == "enoent" and "chdir" in e.error["message"], e.error
    e = c.run(["/etc/passwd"])
    assert e.error and e.error["code"] == "eacces", e.error

    e = c.run(["sh", "-c", "echo $FOO:$HOME; pwd"], env=["FOO=bar"], cwd="/tmp")
    assert e.stdout.decode().split("\n")[0].startswith("bar:/"), e.stdout
    assert e.stdout.decode().split("\n")[1] == "/tmp" or not in_vm, e.stdout

    # Background process holding stdout: EXIT still comes (pipe grace).
    t0 = time.monotonic()
    e = c.run(["sh", "-c", "sleep 5 & echo started"])
    assert e.exit == {"exit_code": 0} and e.stdout == b"started\n", vars(e)
    assert time.monotonic() - t0 < 3, time.monotonic() - t0

    blob = os.urandom(300 * 1024 + 7)
    path = "/tmp/airlock-harness-file" if in_vm else os.path.join(tempfile.gettempdir(), f"airlock-h-{os.getpid()}")
    kind, p = c.write_file(path, blob, mode=0o600)
    assert kind == "OK" and p == {"size": len(blob)}, (kind, p)
    assert c.read_file(path) == ("OK", blob)
    e = c.run(["stat", "-c", "%a", path])
    assert e.stdout == b"600\n", e.stdout
    kind, p = c.write_file("/nonexistent-dir/x", b"abc")
    assert kind == "ERROR" and p["code"] == "enoent", (kind, p)
    kind, p = c.read_file("/nonexistent")
    assert kind == "ERROR" and p["code"] == "enoent", (kind, p)
    kind, p = c.read_file("/")
    assert kind == "ERROR" and p["code"] == "eisdir", (kind, p)
    if not in_vm:
        os.unlink(path)

    # Hostile-ish input: errors, never a crash.
    c.send(EXEC, 900, b"not json")
    assert c.recv(900)[0] == ERROR
    c.send(EXEC, 901, {"argv": "sh"})
    assert c.recv(901)[0] == ERROR
    c.send(EXEC, 902, {"argv": ["true"], "uid": -1})
    assert c.recv(902)[0] == ERROR
    c.send(STDIN, 903, b"x")
    f = c.recv(903)
    assert f[0] == ERROR and json.loads(f[2])["code"] == "ebadf", f
    c.send(EXEC, 0, {"argv": ["true"]})
    assert c.recv(0)[0] == ERROR
    c.send(FILE_READ, 904, {"path": "relative"})
    assert c.recv(904)[0] == ERROR
    e = c.start(["sleep", "30"], stdin=True)  # never reads: the window fills
    for _ in range(2 * STDIN_WINDOW // MAX_PAYLOAD):  # ignore CREDIT: overrun
        c.send(STDIN, e.stream, b"x" * MAX_PAYLOAD)
    e.wait()
    assert e.error and e.error["code"] == "enobufs", vars(e)
    # Frames that misuse a live stream are rejected on stream 0; the stream goes on.
    e = c.start(["sh", "-c", "read x; echo $x"], stdin=True)
    c.send(EXEC, e.stream, {"argv": ["true"]})
    f = c.recv(0)
    assert f[0] == ERROR and json.loads(f[2])["code"] == "eexist", f
    c.send(FILE_DATA, e.stream, b"zz")
    f = c.recv(0)
    assert f[0] == ERROR and json.loads(f[2])["code"] == "ebadf", f
    c.send(SIGNAL, e.stream, {"signal": "TERM"})
    f = c.recv(0)
    assert f[0] == ERROR and json.loads(f[2])["code"] == "einval", f
    e.write(b"still\n")
    e.wait()
    assert e.exit == {"exit_code": 0} and e.stdout == b"still\n", vars(e)
    assert c.hello()["proto"] == 1  # still alive


def proc_state(c, pid):
    """The state letter of a guest process (R, S, Z ...), or None if gone."""
    e = c.run(["sh", "-c", f"cat /proc/{pid}/stat 2>/dev/null"])
    text = e.stdout.decode()
    return text[text.rindex(")") + 2] if text else None


def check_output_window(c):
    # No credit: the agent stops at exactly the window; the producer blocks
    # (not killed), other streams go on; credit lets the rest through.
    e = c.start(["sh", "-c", f"echo $$ >&2; exec head -c {5 * MIB} /dev/zero"], auto_credit=False)
    e.take_for(0.5)
    got = len(e.stdout) + len(e.stderr)
    assert got == OUTPUT_WINDOW and not e.done, (got, e.exit, e.error)
    pid = int(e.stderr)
    assert c.run(["echo", "other"]).stdout == b"other\n"  # another stream is not affected
    assert proc_state(c, pid) == "S", proc_state(c, pid)  # blocked writing its pipe
    e.auto_credit = True
    e.grant()
    e.wait()
    assert e.exit == {"exit_code": 0} and len(e.stdout) == 5 * MIB, (e.exit, len(e.stdout))

    # Slow credit (256 KiB at a time, late): still everything, never beyond the window.
    t0 = time.monotonic()
    e = c.start(["head", "-c", str(5 * MIB), "/dev/urandom"], auto_credit=False)
    while not e.done:
        e._take(30)
        if e.uncredited >= 256 * 1024 or (e.uncredited and e.stdout and len(e.stdout) % MIB == 0):
            time.sleep(0.02)
            e.grant()
    assert e.exit == {"exit_code": 0} and len(e.stdout) == 5 * MIB, (e.exit, len(e.stdout))
    print(f"  5 MiB with slow credit in {time.monotonic() - t0:.2f} s")

    # Output held back by flow control after the process exited still all
    # comes before EXIT (the pipe grace does not run while blocked).
    e = c.start(["sh", "-c", f"head -c {OUTPUT_WINDOW + 40000} /dev/zero; echo tail"], auto_credit=False)
    e.take_for(1.5)  # longer than the pipe grace
    assert not e.done and len(e.stdout) == OUTPUT_WINDOW, (e.exit, len(e.stdout))
    e.auto_credit = True
    e.grant()
    e.wait()
    assert e.exit == {"exit_code": 0} and bytes(e.stdout).endswith(b"\0tail\n"), (e.exit, e.stdout[-10:])
    assert len(e.stdout) == OUTPUT_WINDOW + 40005


def check_pty(c):
    pty = {"rows": 24, "cols": 80}
    # The terminal echoes input, possibly before the prompt: look for what
    # only the command's output can contain.
    e = c.start(["sh"], pty=pty)
    e.write(b"echo hi\r")
    deadline = time.monotonic() + 30
    while e.stdout.count(b"hi\r\n") < 2:  # the echo of the input, then the output
        e._take(max(0.01, deadline - time.monotonic()))
    e.write(b"echo T=$TERM\r")
    e.read_until(b"T=xterm-256color\r\n")
    e.write(b"echo S=$(stty size)\r")
    e.read_until(b"S=24 80\r\n")
    e.resize(40, 100)
    e.write(b"echo S=$(stty size)\r")
    e.read_until(b"S=40 100\r\n")
    e.write(b"test -t 0 && test -t 1 && test -t 2 && echo tty-$((1+1))\r")
    e.read_until(b"tty-2\r\n")
    e.write(b"exit 3\r")
    e.wait()
    assert e.exit == {"exit_code": 3}, vars(e)

    # ^C through the line discipline: SIGINT to the foreground process.
    e = c.start(["sleep", "100"], pty=pty)
    time.sleep(0.2)
    t0 = time.monotonic()
    e.write(b"\x03")
    e.wait(10)
    assert e.exit == {"signal": 2}, vars(e)
    assert time.monotonic() - t0 < 5
    # ^C to a shell's foreground job: the shell reports 130.
    e = c.start(["sh", "-c", "sleep 100; echo status=$?"], pty=pty)
    time.sleep(0.3)
    e.write(b"\x03")
    e.wait(10)
    assert e.exit in ({"signal": 2}, {"exit_code": 130}) or b"status=130" in e.stdout, vars(e)

    # A zero-length STDIN is ^D: cat sees end of file at the start of a line.
    e = c.start(["cat"], pty=pty)
    e.write(b"abc\r")
    e.read_until(b"abc\r\nabc\r\n")
    e.close_stdin()
    e.wait(10)
    assert e.exit == {"exit_code": 0}, vars(e)

    # A 2 MiB burst through a PTY with slow credit; output ends at EIO.
    e = c.start(["head", "-c", str(2 * MIB), "/dev/zero"], pty=pty, auto_credit=False)
    while not e.done:
        e._take(30)
        if e.uncredited >= 512 * 1024:
            e.grant()
    assert e.exit == {"exit_code": 0} and len(e.stdout) == 2 * MIB, (e.exit, len(e.stdout))

    # Errors: RESIZE to an exec without a PTY (on stream 0, the exec goes on), bad pty.
    e = c.start(["sh", "-c", "read x; echo $x"], stdin=True)
    e.resize(10, 10)
    f = c.recv(0)
    assert f[0] == ERROR and json.loads(f[2])["code"] == "enotty", f
    c.send(RESIZE, e.stream, {"rows": 0, "cols": 10})
    f = c.recv(0)
    assert f[0] == ERROR and json.loads(f[2])["code"] == "einval", f
    e.write(b"fine\n")
    e.wait()
    assert e.stdout == b"fine\n", vars(e)
    e = c.run(["true"], pty={"rows": 70000, "cols": 80})
    assert e.error and e.error["code"] == "einval", vars(e)


def check_file_ops(c, base, in_vm):
    def ok(op, path, **kw):
        kind, p, entries = c.file_op(op, path, **kw)
        assert kind == "OK", (op, path, kw, p)
        return p if entries is None else (p, entries)

    def err(code, op, path, **kw):
        kind, p, _ = c.file_op(op, path, **kw)
        assert kind == "ERROR" and p["code"] == code, (op, path, kw, kind, p)

    tree, outside = f"{base}/tree", f"{base}/outside"
    ok("mkdir", f"{tree}/a/b/c", parents=True, mode=0o700)
    ok("mkdir", f"{tree}/a/b/c", parents=True)  # exists: fine with parents
    err("eexist", "mkdir", f"{tree}/a/b/c")
    err("enoent", "mkdir", f"{tree}/x/y")
    ok("mkdir", outside)
    assert c.write_file(f"{outside}/keep.txt", b"keep")[0] == "OK"
    assert c.write_file(f"{tree}/a/f.txt", b"0123456789", mode=0o640)[0] == "OK"
    e = c.run(["sh", "-c", f"ln -s {outside} {tree}/a/link && ln -s {outside} {tree}/link2"])
    assert e.exit == {"exit_code": 0}, vars(e)

    st = ok("stat", f"{tree}/a/b/c")
    assert st["type"] == "dir" and st["mode"] == 0o700 and st["name"] == "c", st
    st = ok("stat", f"{tree}/a/f.txt")
    assert st["type"] == "file" and st["size"] == 10 and st["mode"] == 0o640 and st["name"] == "f.txt", st
    assert abs(st["mtime_ms"] / 1000 - time.time()) < 300 or in_vm, st
    assert isinstance(st["uid"], int) and isinstance(st["gid"], int) and "target" not in st, st
    st = ok("stat", f"{tree}/a/link")
    assert st["type"] == "symlink" and st["target"] == outside, st
    assert ok("stat", "/")["type"] == "dir"
    err("enoent", "stat", f"{tree}/nope")

    p, entries = ok("list", f"{tree}/a")
    byname = {x["name"]: x for x in entries}
    assert p == {"count": 3} and sorted(byname) == ["b", "f.txt", "link"], (p, entries)
    assert byname["b"]["type"] == "dir" and byname["f.txt"]["size"] == 10 and byname["link"]["target"] == outside
    err("enotdir", "list", f"{tree}/a/f.txt")
    err("enoent", "list", f"{tree}/nope")

    # A listing bigger than the window: without credit it stops within the
    # window; with credit it completes, in many chunks, each a JSON object
    # within a frame.
    n = 3200
    e = c.run(["sh", "-c", f"mkdir {tree}/big && cd {tree}/big && i=0; "
                           f"while [ $i -lt {n} ]; do : > {'n' * 240}$i; i=$((i+1)); done"])
    assert e.exit == {"exit_code": 0}, vars(e)
    s = c.new_stream()
    c.send(FILE_OP, s, {"op": "list", "path": f"{tree}/big"})
    names, chunks, uncredited, stalled = set(), 0, 0, None
    while True:
        try:
            ftype, _, payload = c.recv(s, 0.5 if stalled is None else 30)
        except (TimeoutError, socket.timeout):
            assert stalled is None and OUTPUT_WINDOW - MAX_PAYLOAD < uncredited <= OUTPUT_WINDOW, uncredited
            stalled = uncredited
            c.credit(s, uncredited)
            uncredited = 0
            continue
        if ftype == OK:
            assert json.loads(payload) == {"count": n}, payload
            break
        assert ftype == FILE_DATA and len(payload) <= MAX_PAYLOAD, (NAMES[ftype], len(payload))
        names |= {x["name"] for x in json.loads(payload)["entries"]}
        chunks += 1
        uncredited += len(payload)
        assert uncredited <= OUTPUT_WINDOW, uncredited
        if stalled is not None:
            c.credit(s, uncredited)
            uncredited = 0
    assert stalled and len(names) == n and chunks > 16, (stalled, len(names), chunks)

    ok("rename", f"{tree}/a/f.txt", to=f"{tree}/a/g.txt")
    err("enoent", "stat", f"{tree}/a/f.txt")
    assert ok("stat", f"{tree}/a/g.txt")["size"] == 10
    err("enoent", "rename", f"{tree}/a/f.txt", to=f"{tree}/a/h.txt")
    err("einval", "rename", f"{tree}/a/g.txt", to="relative")

    err("enotempty", "remove", f"{tree}/a")
    ok("remove", f"{tree}/link2", recursive=True)  # the link, not what it points to
    ok("remove", f"{tree}/a", recursive=True)  # holds a symlink to outside: not followed
    err("enoent", "stat", f"{tree}/a")
    assert c.read_file(f"{outside}/keep.txt") == ("OK", b"keep")
    ok("remove", f"{outside}/keep.txt")
    ok("remove", outside)
    err("enoent", "remove", outside)
    ok("remove", tree, recursive=True)
    err("ebusy", "remove", "/", recursive=True)
    err("ebusy", "remove", "//", recursive=True)
    err("einval", "remove", "/tmp/..", recursive=True)

    # Bad requests.
    err("einval", "stat", "relative")
    err("einval", "stat", "/tmp/a\0b")
    err("einval", "stat", "/" + "x" * 5000)
    err("einval", "chmod", "/tmp")
    c.send(FILE_OP, 905, b"[]")
    assert c.recv(905)[0] == ERROR


def check_file_read_window(c, base):
    blob = os.urandom(5 * MIB)
    path = f"{base}/big.bin"
    t0 = time.monotonic()
    assert c.write_file(path, blob) == ("OK", {"size": len(blob)})  # checks that every byte was credited
    t1 = time.monotonic()
    assert c.read_file(path) == ("OK", blob)
    t2 = time.monotonic()
    c.stalled = None
    assert c.read_file(path, auto_credit=False, stall_s=0.5) == ("OK", blob)
    assert c.stalled == OUTPUT_WINDOW, c.stalled
    assert c.file_op("remove", path)[0] == "OK"
    print(f"  5 MiB FILE_WRITE {t1 - t0:.2f} s, FILE_READ {t2 - t1:.2f} s")


def check_metrics(c, in_vm):
    kind, m = c.metrics()
    assert kind == "OK", m
    keys = ["cpu_usage_usec", "cpus", "mem_total_kib", "mem_available_kib", "disk_total_bytes", "disk_used_bytes",
            "uptime_ms", "processes"]
    assert sorted(m) == sorted(keys) and all(isinstance(m[k], int) for k in keys), m
    assert m["cpus"] >= 1 and m["cpu_usage_usec"] > 0 and m["uptime_ms"] > 0 and m["processes"] >= 1, m
    assert 0 < m["mem_available_kib"] <= m["mem_total_kib"], m
    assert 0 < m["disk_used_bytes"] <= m["disk_total_bytes"], m
    if in_vm:
        assert m["cpus"] == 1 and 128 * 1024 < m["mem_total_kib"] <= 256 * 1024, m
        assert m["disk_total_bytes"] < 128 * MIB, m  # the 64 MiB minimal template
    c.run(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"])  # burn some CPU
    kind, m2 = c.metrics()
    assert m2["cpu_usage_usec"] > m["cpu_usage_usec"] and m2["uptime_ms"] > m["uptime_ms"], (m, m2)
    c.send(METRICS, 906, b"nope")
    f = c.recv(906)
    assert f[0] == ERROR and json.loads(f[2])["code"] == "einval", f
    c.send(METRICS, 0, b"{}")
    assert c.recv(0)[0] == ERROR


def check_features(c, in_vm):
    base = "/tmp/airlock-harness" if in_vm else tempfile.mkdtemp(prefix="airlock-h-")
    try:
        times = []
        for name, check in [("output window", lambda: check_output_window(c)), ("pty", lambda: check_pty(c)),
                            ("file ops", lambda: check_file_ops(c, base, in_vm)),
                            ("file read", lambda: check_file_read_window(c, base)),
                            ("metrics", lambda: check_metrics(c, in_vm))]:
            t0 = time.monotonic()
            check()
            times.append(f"{name} {time.monotonic() - t0:.1f}")
        print("  checks (s): " + ", ".join(times))
    finally:
        if not in_vm:
            shutil.rmtree(base, ignore_errors=True)


def check_vm_only(c):
    e = c.run(["sh", "-c", "id -u; id -g; echo $HOME; hostname; cat /proc/1/comm; mount | grep ' / '"], uid=1000)
    lines = e.stdout.decode().splitlines()
    assert lines[:4] == ["1000", "1000", "/home/user", "airlock"], lines
    assert "/dev/vda" in lines[-1] and "ext4" in lines[-1], lines
    e = c.run(["sh", "-c", "touch /root/x"], uid=1000)
    assert e.exit == {"exit_code": 1}, vars(e)
    # Orphans are reaped by PID 1: no zombies pile up.
    c.run(["sh", "-c", "for i in 1 2 3 4 5; do (sleep 0.1 &) ; done"])
    time.sleep(0.5)
    e = c.run(["sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null | awk '$3==\"Z\"' | wc -l"])
    assert e.stdout.strip() == b"0", e.stdout
    # A recursive remove does not enter another filesystem mounted below.
    e = c.run(["sh", "-c", "mkdir -p /tmp/mnt-t/m && mount -t tmpfs none /tmp/mnt-t/m && echo x > /tmp/mnt-t/m/f"])
    assert e.exit == {"exit_code": 0}, vars(e)
    kind, p, _ = c.file_op("remove", "/tmp/mnt-t", recursive=True)
    assert kind == "ERROR" and p["code"] == "ebusy" and "mnt-t/m" in p["message"], (kind, p)
    assert c.read_file("/tmp/mnt-t/m/f") == ("OK", b"x\n")
    assert c.run(["umount", "/tmp/mnt-t/m"]).exit == {"exit_code": 0}
    assert c.file_op("remove", "/tmp/mnt-t", recursive=True)[0] == "OK"
    # Many concurrent streams.
    es = [c.start(["sh", "-c", f"echo {i}"]) for i in range(20)]
    for i, x in enumerate(es):
        x.wait()
        assert x.stdout == f"{i}\n".encode() and x.exit == {"exit_code": 0}


def host_proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):  # gone between open and read: reaped
        return None
    return text[text.rindex(")") + 2]


def wait_state(get, want, timeout=5):
    deadline = time.monotonic() + timeout
    while True:
        st = get()
        if st in want or time.monotonic() > deadline:
            return st
        time.sleep(0.02)


def check_thaw_errors(c):
    """Bad THAW payloads: ERROR einval, nothing done (the caller checks that)."""
    good = dict(generation=5, entropy=base64.b64encode(os.urandom(32)).decode(), time_ms=int(time.time() * 1000),
                sandbox_id="sb-0123abcd", hostname="sb-0123abcd", orphan_streams=False)
    bad = [("generation", -1), ("generation", "5"), ("generation", 1.5), ("generation", None),
           ("entropy", base64.b64encode(os.urandom(31)).decode()), ("entropy", base64.b64encode(os.urandom(513)).decode()),
           ("entropy", "not base64!"), ("entropy", 123), ("time_ms", 0), ("time_ms", "now"), ("time_ms", 10 ** 15),
           ("sandbox_id", "SB-UPPER"), ("sandbox_id", "sb_x"), ("sandbox_id", "s" * 64), ("sandbox_id", ""),
           ("hostname", "-bad"), ("hostname", "a..b"), ("hostname", "h" * 64), ("hostname", "bad_name"),
           ("hostname", "x\u00e9"), ("hostname", 7), ("orphan_streams", "yes"),
           # mac: exactly xx:xx:xx:xx:xx:xx, locally administered unicast
           ("mac", "00:1a:2b:3c:4d:5e"), ("mac", "03:1a:2b:3c:4d:5e"), ("mac", "ff:ff:ff:ff:ff:ff"),
           ("mac", "02:1a:2b:3c:4d"), ("mac", "02:1a:2b:3c:4d:5e:6f"), ("mac", "02-1a-2b-3c-4d-5e"),
           ("mac", "02:1a:2b:3c:4d:5g"), ("mac", " 02:1a:2b:3c:4d:5e"), ("mac", "02:1a:2b:3c:4d:5e\n"),
           ("mac", ""), ("mac", 2), ("mac", None)]
    for key, val in bad:
        req = dict(good)
        req[key] = val
        kind, p = c.thaw(raw=req)
        assert kind == "ERROR" and p["code"] == "einval", (key, val, kind, p)
    for key in ("generation", "entropy", "time_ms", "sandbox_id", "hostname"):
        req = {k: v for k, v in good.items() if k != key}
        kind, p = c.thaw(raw=req)
        assert kind == "ERROR" and p["code"] == "einval", (key, kind, p)
    for raw in (b"", b"[]", b"{nope"):
        s = c.new_stream()
        c.send(THAW, s, raw)
        f = c.recv(s)
        assert f[0] == ERROR and json.loads(f[2])["code"] == "einval", f
    kind, p = c.freeze(b"[1]")
    assert kind == "ERROR" and p["code"] == "einval", (kind, p)
    c.send(THAW, 0, good)
    assert c.recv(0)[0] == ERROR


def check_snapshot_local(c, run_dir):
    h0 = c.hello()
    sleeper = c.start(["sh", "-c", "echo $$; exec sleep 100"])
    sleeper.read_until(b"\n")
    spid = int(sleeper.stdout)
    # Blocked by its window with data in its pipe: what the agent reads after
    # FREEZE is held back until THAW.
    held = c.start(["sh", "-c", f"echo $$ >&2; exec head -c {OUTPUT_WINDOW + 100000} /dev/zero"], auto_credit=False)
    held.take_for(0.5)
    assert len(held.stdout) + len(held.stderr) == OUTPUT_WINDOW, len(held.stdout)
    hpid = int(held.stderr)
    first = len(held.stdout)

    kind, p = c.freeze()
    assert kind == "OK" and p["stopped"] >= 2, (kind, p)
    assert host_proc_state(spid) == "T" and host_proc_state(hpid) == "T", (host_proc_state(spid),
                                                                        host_proc_state(hpid))
    held.grant()  # the agent reads the pipe, but may not send it now
    held.take_for(0.5)
    assert len(held.stdout) == first and not held.done, len(held.stdout)
    assert c.run(["echo", "frozen"]).stdout == b"frozen\n"  # new streams work while frozen
    assert c.hello()["generation"] == 0

    check_thaw_errors(c)
    assert host_proc_state(spid) == "T" and not os.listdir(run_dir), os.listdir(run_dir)

    kind, p = c.thaw(generation=7, sandbox_id="sb-local")
    assert kind == "OK" and p == {"generation": 7}, (kind, p)
    assert wait_state(lambda: host_proc_state(spid), "SR") in "SR", host_proc_state(spid)
    held.wait()
    assert held.exit == {"exit_code": 0} and len(held.stdout) == OUTPUT_WINDOW + 100000, (held.exit, len(held.stdout))
    h = c.hello()
    assert h["generation"] == 7 and h["boot_id"] != h0["boot_id"] and len(h["boot_id"]) == 32, (h0, h)
    for name, want in (("generation", "7\n"), ("sandbox_id", "sb-local\n")):
        with open(os.path.join(run_dir, name)) as f:
            assert f.read() == want
        assert os.stat(os.path.join(run_dir, name)).st_mode & 0o777 == 0o644
    assert sorted(os.listdir(run_dir)) == ["generation", "sandbox_id"], os.listdir(run_dir)
    kind, p = c.thaw(generation=8)  # THAW without FREEZE is fine
    assert kind == "OK" and p == {"generation": 8}, (kind, p)
    sleeper.signal(9)
    sleeper.wait()
    assert sleeper.exit == {"signal": 9}, vars(sleeper)

    # orphan_streams: a flood goes silent, stdin gets EOF, an upload is
    # cancelled, and every id can be used again.
    marker = os.path.join(run_dir, "eof-seen")
    flood = c.start(["sh", "-c", "echo $$ >&2; exec yes"])
    reader = c.start(["sh", "-c", f"echo $$; cat >/dev/null; echo eof > {marker}; exec sleep 100"], stdin=True)
    reader.read_until(b"\n")
    rpid = int(reader.stdout)
    upload = c.new_stream()
    target = os.path.join(run_dir, "upload.bin")
    c.send(FILE_WRITE, upload, {"path": target, "mode": 0o644})
    c.send(FILE_DATA, upload, b"x" * 1000)
    assert c.recv(upload)[0] == CREDIT  # written: its temp file exists
    while len(flood.stdout) < 200000:
        flood._take(30)
    fpid = int(flood.stderr.split(b"\n")[0])
    assert any("upload.bin" in n for n in os.listdir(run_dir)), os.listdir(run_dir)  # its temp file
    # A read that ends while frozen: its last frames are held, then dropped.
    blob_path = os.path.join(run_dir, "blob")
    with open(blob_path, "wb") as f:
        f.write(b"b" * (OUTPUT_WINDOW + 1000))
    rd = c.new_stream()
    c.send(FILE_READ, rd, {"path": blob_path})
    got = 0
    while got < OUTPUT_WINDOW:
        ftype, _, p = c.recv(rd)
        assert ftype == FILE_DATA, NAMES[ftype]
        got += len(p)
    assert c.freeze()[0] == "OK"
    c.credit(rd, OUTPUT_WINDOW)  # the agent reads the rest and ends the stream, all held
    time.sleep(0.3)
    kind, p = c.thaw(generation=9, orphan_streams=True)
    assert kind == "OK", (kind, p)
    # rd's last frames were held since FREEZE: they never come. Of the
    # others, frames sent before the OK may still arrive; none after it.
    assert not [f for f in c.pending if f[1] == rd], [NAMES[f[0]] for f in c.pending if f[1] == rd]
    c.pending = [f for f in c.pending if f[1] not in (flood.stream, reader.stream, upload, rd)]
    time.sleep(0.5)
    try:
        while True:
            f = c.recv(None, 0.3)
            assert f[1] not in (flood.stream, reader.stream, upload, rd), (NAMES[f[0]], f[1], f[2][:50])
    except (TimeoutError, socket.timeout):
        pass
    assert host_proc_state(fpid) in ("R", "S"), host_proc_state(fpid)  # runs on, unread by anyone
    assert wait_state(lambda: os.path.exists(marker), (True,)), "stdin of an orphan not closed"
    assert not any("upload.bin" in n for n in os.listdir(run_dir)), os.listdir(run_dir)
    for sid in (flood.stream, reader.stream, upload, rd):
        e = Exec(c, sid, ["echo", f"reuse {sid}"])
        e.wait()
        assert e.exit == {"exit_code": 0} and e.stdout == f"reuse {sid}\n".encode(), vars(e)
    os.kill(fpid, 9)
    os.kill(rpid, 9)
    assert wait_state(lambda: host_proc_state(fpid), (None,)) is None  # reaped by the agent
    time.sleep(0.2)
    assert not c.pending, c.pending
    try:
        f = c.recv(None, 0.3)
        raise AssertionError(f"frame for an orphan: {NAMES[f[0]]} on {f[1]}")
    except (TimeoutError, socket.timeout):
        pass
    assert c.hello()["generation"] == 9


def guest_sh(c, script):
    e = c.run(["sh", "-c", script])
    assert e.exit == {"exit_code": 0}, (script, vars(e))
    return e.stdout.decode()


def check_freeze_thaw_vm(c):
    h0 = c.hello()
    sleeper = c.start(["sh", "-c", "echo $$; exec sleep 100"])
    sleeper.read_until(b"\n")
    spid = int(sleeper.stdout)
    kind, p = c.freeze()
    assert kind == "OK" and p["stopped"] >= 1, (kind, p)
    assert proc_state(c, spid) == "T", proc_state(c, spid)  # new execs run while frozen
    check_thaw_errors(c)
    assert proc_state(c, spid) == "T" and guest_sh(c, "ls /run/airlock 2>/dev/null; hostname") == "airlock\n"
    # This VM has no NIC: a MAC for it is an error that says so, and the
    # THAW stops there (nothing after the RNG step is done).
    kind, p = c.thaw(generation=2, hostname="no-nic", sandbox_id="sb-vmtest", mac="02:1a:2b:3c:4d:5e")
    assert kind == "ERROR" and p["code"] == "enodev" and "no network interface eth0" in p["message"], (kind, p)
    assert proc_state(c, spid) == "T" and guest_sh(c, "ls /run/airlock 2>/dev/null; hostname") == "airlock\n"

    ahead = int(time.time() * 1000) + 3600 * 1000
    kind, p = c.thaw(generation=3, time_ms=ahead, hostname="clone-a.example", sandbox_id="sb-vmtest")
    assert kind == "OK" and p == {"generation": 3}, (kind, p)
    out = guest_sh(c, "date +%s; hostname; cat /run/airlock/generation /run/airlock/sandbox_id; "
                      "stat -c %a /run/airlock /run/airlock/generation /run/airlock/sandbox_id")
    lines = out.split()
    assert abs(int(lines[0]) - ahead / 1000) < 60, (lines, ahead)
    assert lines[1:] == ["clone-a.example", "3", "sb-vmtest", "755", "644", "644"], lines
    assert wait_state(lambda: proc_state(c, spid), "S") == "S", proc_state(c, spid)
    h = c.hello()
    assert h["generation"] == 3 and h["boot_id"] != h0["boot_id"], (h0, h)
    kind, p = c.thaw(generation=3, hostname="airlock", sandbox_id="sb-vmtest")  # the clock back, no FREEZE
    assert kind == "OK", (kind, p)
    assert abs(int(guest_sh(c, "date +%s")) - time.time()) < 60
    sleeper.signal(9)
    sleeper.wait()


def urandom16(c):
    return guest_sh(c, "head -c 16 /dev/urandom | od -x | head -1")


def snapshot_take(vm, snap_dir, while_frozen=None):
    """FREEZE, stop, save memory and disk; the VM stays stopped (postmigrate)."""
    kind, p = vm.client.freeze()
    assert kind == "OK", (kind, p)
    if while_frozen:
        while_frozen()  # a test's look inside; a daemon sends nothing here
    t0 = time.monotonic()
    vm.qmp("stop")
    # As airlockd saves: QEMU gets an open file (it can start no program).
    fd = os.open(os.path.join(snap_dir, "mem.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        qemuutil.save(vm.qmp_path, fd, vm.proc)
    finally:
        os.close(fd)
    shutil.copyfile(vm.overlay, os.path.join(snap_dir, "disk.qcow2"))
    return p["stopped"], time.monotonic() - t0


def snapshot_restore(snap_dir, generation, sandbox_id, connect_first=False):
    """connect_first: connect to the channel (and send HELLO) before the
    state is loaded, as airlockd does; else after cont."""
    t0 = time.monotonic()
    vm = VmAgent(overlay=os.path.join(snap_dir, "disk.qcow2"), incoming=os.path.join(snap_dir, "mem.bin"),
                 connect=False)
    try:
        if connect_first:
            vm.client = Client(qemuutil.connect_unix(vm.sock_path, vm.proc, 30))
            vm.client.send(HELLO, 0, {})
        qemuutil.load(vm.qmp_path, vm.fds.incoming, vm.proc)
        vm.qmp("cont")
        t1 = vm.cont_t = time.monotonic()
        if connect_first:
            while True:
                ftype, _, p = vm.client.recv(0, 30)
                if ftype == HELLO:
                    vm.hello = json.loads(p)
                    break
        else:
            vm.connect(timeout=30, hello=True)
        t2 = time.monotonic()
        kind, p = vm.client.thaw(generation=generation, orphan_streams=True, sandbox_id=sandbox_id,
                                 hostname=sandbox_id)
        assert kind == "OK" and p == {"generation": generation}, (kind, p)
        print(f"  restore {sandbox_id}: loaded+cont {t1 - t0:.2f} s, HELLO {t2 - t1:.2f} s, "
              f"THAW {time.monotonic() - t2:.2f} s")
        return vm
    except BaseException:
        print(vm.console_text())
        vm.close()
        raise


def run_snapshot():
    """A real snapshot (QMP stop + migrate to a file + the disk overlay) and
    two restores from it, each made unique by THAW."""
    print("snapshot and restore (QEMU migration to a file, as airlockd's)")
    snap_dir = tempfile.mkdtemp(prefix="airlock-snap-")
    vms = []
    try:
        a = VmAgent()
        vms.append(a)
        c = a.client
        guest_sh(c, "(i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done) "
                    "</dev/null >/dev/null 2>&1 &")
        tick = c.start(["sh", "-c", "while :; do echo tick; sleep 0.1; done"])
        tick.read_until(b"tick\ntick\n")
        time.sleep(0.5)
        a_boot = c.hello()["boot_id"]
        saved = []
        stopped, dt = snapshot_take(a, snap_dir, lambda: saved.append(int(guest_sh(c, "cat /tmp/counter"))))
        v0 = saved[0]

        def counter_near_saved(vm):
            v = int(guest_sh(vm.client, "cat /tmp/counter"))
            ran = time.monotonic() - vm.cont_t  # it counts 10 a second, at most
            assert v0 <= v <= v0 + 10 * ran + 3, (v0, v, ran)
            return v
        print(f"  snapshot: {stopped} processes stopped, stop+migrate+disk {dt:.2f} s, "
              f"{os.path.getsize(os.path.join(snap_dir, 'mem.bin')) >> 20} MiB")
        # The original goes on: cont, then THAW (the agent must run to answer).
        a.qmp("cont")
        kind, p = c.thaw(generation=0, orphan_streams=False, sandbox_id="sb-orig", hostname="sb-orig")
        assert kind == "OK", (kind, p)
        v_a = int(guest_sh(c, "cat /tmp/counter"))
        n = tick.stdout.count(b"tick")
        tick.read_until(b"tick\n" * (n + 3))  # its stream survived on the original
        tick.signal(9)
        tick.wait()

        b = snapshot_restore(snap_dir, 1, "sb-clone-b")
        vms.append(b)
        assert b.hello["generation"] == 0 and b.hello["boot_id"] == a_boot, b.hello  # the snapshot's agent
        cb = b.client
        cb.next_stream = tick.stream  # the orphaned tick stream's id is free in the clone
        v_b = counter_near_saved(b)  # continues from the snapshot's value
        time.sleep(1)
        v_b2 = int(guest_sh(cb, "cat /tmp/counter"))
        assert v_b2 > v_b, (v_b, v_b2)
        h = cb.hello()
        assert h["generation"] == 1 and h["boot_id"] != a_boot, h
        assert guest_sh(cb, "hostname; cat /run/airlock/generation /run/airlock/sandbox_id").split() == [
            "sb-clone-b", "1", "sb-clone-b"]
        ticks = guest_sh(cb, "ps -o pid,args | grep -c '[e]cho tick' || true")
        assert ticks.strip() == "1", ticks  # the orphaned loop runs on, unseen
        try:
            f = cb.recv(None, 0.5)
            raise AssertionError(f"stale frame in the clone: {NAMES[f[0]]} on {f[1]}")
        except (TimeoutError, socket.timeout):
            pass

        cc = snapshot_restore(snap_dir, 2, "sb-clone-c", connect_first=True)
        vms.append(cc)
        counter_near_saved(cc)
        r = {"A": urandom16(c), "B": urandom16(cb), "C": urandom16(cc.client)}
        print("  /dev/urandom: " + "; ".join(f"{k} {v.split(None, 1)[1].strip()}" for k, v in r.items()))
        assert len(set(r.values())) == 3, r
        assert cc.client.hello()["boot_id"] not in (a_boot, h["boot_id"])
        print(f"  counter: {v0} at the snapshot, A at {v_a} after it, B from {v_b} to {v_b2}")
    except BaseException:
        for vm in vms:
            print(vm.console_text()[-3000:])
        raise
    finally:
        for vm in vms:
            vm.close()
        shutil.rmtree(snap_dir, ignore_errors=True)
    print("  ok")


def run_local():
    print("local agent (--channel-fd)")
    run_dir = tempfile.mkdtemp(prefix="airlock-run-")
    a = LocalAgent(run_dir=run_dir)
    try:
        assert a.hello["proto"] == 1
        check_common(a.client, in_vm=False)
        check_features(a.client, in_vm=False)
        t0 = time.monotonic()
        check_snapshot_local(a.client, run_dir)
        print(f"  freeze/thaw {time.monotonic() - t0:.1f} s")
    finally:
        a.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    print("  ok")


def run_vm():
    print("VM agent (QEMU microvm, TCG)")
    boots = []
    vm = VmAgent()
    try:
        boots.append(vm.boot_s)
        check_common(vm.client, in_vm=True)
        check_features(vm.client, in_vm=True)
        check_vm_only(vm.client)
        # Re-attach: a new connection gets a HELLO on request, and an exec
        # that outlived the old connection still delivers its output and EXIT.
        late = vm.client.start(["sh", "-c", "sleep 1; echo late"])
        flood = vm.client.start(["head", "-c", str(4 << 20), "/dev/zero"])
        vm.client.recv(flood.stream)
        vm.client.sock.close()
        time.sleep(0.3)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(vm.sock_path)
        c = vm.client = Client(sock)
        c.next_stream = 1000
        assert c.hello()["boot_id"] == vm.hello["boot_id"]
        late.conn = c
        late.wait()
        assert late.stdout == b"late\n" and late.exit == {"exit_code": 0}, vars(late)
        flood.conn = c
        flood.wait()  # part of its output went to the old connection
        assert flood.exit == {"exit_code": 0}, vars(flood)
        assert c.run(["echo", "again"]).stdout == b"again\n"
        t0 = time.monotonic()
        check_freeze_thaw_vm(c)  # after the re-attach: THAW changes the boot_id
        print(f"  freeze/thaw {time.monotonic() - t0:.1f} s")
        vm.client.send(SHUTDOWN, 0)
        assert vm.wait_exit(30) == 0
        print("  shutdown ended QEMU")
    except BaseException:
        print(vm.console_text())
        raise
    finally:
        vm.close()

    for _ in range(3):
        vm = VmAgent()
        boots.append(vm.boot_s)
        vm.close()
    print("  boot to HELLO: " + ", ".join(f"{b:.2f}" for b in boots) + " s")

    # A broken root filesystem: the agent says why, the kernel panics, QEMU exits.
    with tempfile.NamedTemporaryFile(suffix=".img") as bad:
        bad.truncate(64 * 1024 * 1024)
        vm = VmAgent(rootfs=bad.name, connect=False)
        try:
            t0 = time.monotonic()
            rc = vm.wait_exit(60)
            text = vm.console_text()
            assert "FATAL" in text and "mount root" in text, text
            print(f"  broken rootfs: QEMU exited by itself (rc {rc}) after {time.monotonic() - t0:.2f} s")
        finally:
            vm.close()
    print("  ok")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("local", "all"):
        run_local()
    if what in ("vm", "all"):
        run_vm()
    if what in ("snapshot", "all"):
        run_snapshot()
