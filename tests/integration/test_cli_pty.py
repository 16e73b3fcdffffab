# SPDX-License-Identifier: Apache-2.0
"""`airlock exec -it`: the CLI under a real pseudo-terminal (Python's pty
module) driving a shell with a PTY in a real guest."""
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from conftest import AIRLOCK


def skip_unless_attach(api, sid):
    r = api.request("GET", f"/v1/sandboxes/{sid}/processes")
    if r.status == 404 and "no such endpoint" in (r.error_message or ""):
        pytest.skip("airlockd does not implement background processes / PTY attach yet")
    r = api.request("GET", f"/v1/sandboxes/{sid}/processes/p-999999/attach",
                    headers={"Connection": "Upgrade", "Upgrade": "airlock-pty/1"})
    if r.status == 404 and "no such endpoint" in (r.error_message or ""):
        pytest.skip("airlockd does not implement PTY attach yet")


def set_winsize(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Term:
    """The CLI on the slave side of a pty; the test holds the master."""

    def __init__(self, daemon, args, rows=30, cols=100):
        self.master, slave = pty.openpty()
        set_winsize(self.master, rows, cols)
        self.proc = subprocess.Popen([AIRLOCK, "--socket", daemon.socket, *args], stdin=slave, stdout=slave,
                                     stderr=slave, start_new_session=True, close_fds=True)
        os.close(slave)
        self.out = b""

    def send(self, data):
        os.write(self.master, data)

    def read_until(self, needle, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while needle not in self.out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {needle!r}; got {self.out[-2000:]!r}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: the slave side is closed
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"terminal closed waiting for {needle!r}; got {self.out[-2000:]!r}")
                self.out += chunk
        return self.out

    def resize(self, rows, cols):
        set_winsize(self.master, rows, cols)
        self.proc.send_signal(signal.SIGWINCH)

    def wait(self, timeout_s=60):
        # Drain so that the CLI never blocks on a full terminal.
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.out += os.read(self.master, 65536)
                except OSError:
                    pass
        return self.proc.wait(timeout=1)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def term(daemon):
    made = []

    def make(args, **kw):
        t = Term(daemon, args, **kw)
        made.append(t)
        return t
    yield make
    for t in made:
        t.close()


@pytest.fixture(scope="module")
def sid(sandbox):
    return sandbox["id"]


def test_echo_roundtrip_and_exit_code(api, sid, term):
    skip_unless_attach(api, sid)
    t = term(["exec", "-it", sid, "--", "sh"])
    t.send(b"echo hi$((40+2))\r")
    t.read_until(b"hi42")
    t.send(b"exit 7\r")
    assert t.wait() == 7, t.out[-2000:]


def test_window_size_and_resize(api, sid, term):
    skip_unless_attach(api, sid)
    t = term(["exec", "-i", "-t", sid, "--", "sh"], rows=30, cols=100)
    t.send(b"stty size; echo size$((1+1))\r")
    t.read_until(b"size2")
    assert b"30 100" in t.out, t.out[-2000:]
    t.resize(41, 123)
    time.sleep(0.5)
    t.send(b"stty size; echo size$((1+2))\r")
    t.read_until(b"size3")
    assert b"41 123" in t.out, t.out[-2000:]
    t.send(b"exit\r")
    assert t.wait() == 0


def test_ctrl_c_interrupts(api, sid, term):
    skip_unless_attach(api, sid)
    t = term(["exec", "-it", sid, "--", "sh"])
    t.send(b"sleep 100; echo slept$((5+5))\r")
    time.sleep(1.5)
    started = time.monotonic()
    t.send(b"\x03")
    t.send(b"echo after$((2+3))\r")
    t.read_until(b"after5", timeout_s=30)
    assert time.monotonic() - started < 30
    assert b"slept10" not in t.out
    t.send(b"exit 3\r")
    assert t.wait() == 3


def test_raw_mode_is_restored(api, sid, term):
    """The CLI puts our terminal in raw mode and restores it when it exits."""
    skip_unless_attach(api, sid)
    t = term(["exec", "-it", sid, "--", "sh"])
    t.send(b"echo ready$((1+1))\r")
    t.read_until(b"ready2")
    attrs = termios.tcgetattr(t.master)
    assert not attrs[3] & termios.ICANON, "raw mode while attached"
    t.send(b"exit\r")
    assert t.wait() == 0
    attrs = termios.tcgetattr(t.master)
    assert attrs[3] & termios.ICANON and attrs[3] & termios.ECHO, "terminal not restored"


def test_without_a_terminal(api, cli, sid):
    """-it with stdin that is not a terminal: no raw mode; end of input is Ctrl-D."""
    skip_unless_attach(api, sid)
    p = cli("exec", "-it", sid, "--", "sh", input=b"echo x$((3+4))\nexit 5\n", timeout=120)
    assert p.returncode == 5, (p.returncode, p.stdout[-2000:], p.stderr)
    assert b"x7" in p.stdout
    p = cli("exec", "-it", sid, "--", "cat", input=b"abc\n", timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr)
    assert b"abc" in p.stdout


def test_attach_errors(cli, sid):
    p = cli("exec", "-it", "sb-0000000000000000", "--", "sh")
    assert p.returncode == 125 and p.stderr
    p = cli("exec", "-it", "bad id", "--", "sh")
    assert p.returncode == 2
