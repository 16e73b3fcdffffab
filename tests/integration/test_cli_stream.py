# SPDX-License-Identifier: Apache-2.0
"""`airlock exec`/`run` streaming, stdin streaming, exit codes, and the
background-process verbs (exec -d, ps, logs, kill, wait) against a real daemon."""
import json
import os
import select
import subprocess
import time

import pytest

from conftest import AIRLOCK


def text(b):
    return b.decode("utf-8", "replace")


def skip_unless_endpoint(api, method, path, body=None):
    """Skips while the daemon does not have the endpoint yet."""
    r = api.request(method, path, body=body)
    msg = r.error_message or ""
    if r.status == 404 and "no such endpoint" in msg:
        pytest.skip(f"airlockd does not implement {method} {path.split('?')[0]} yet")
    return r


def skip_unless_streaming(api, sid):
    r = skip_unless_endpoint(api, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"], "stream": True})
    if r.status == 400 and "stream" in (r.error_message or ""):
        pytest.skip("airlockd does not implement streaming exec yet")
    assert r.status == 200, r


def popen_cli(daemon, *args, stdin=subprocess.DEVNULL):
    return subprocess.Popen([AIRLOCK, "--socket", daemon.socket, *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def read_line_within(f, timeout_s):
    """One line from a pipe, or None if none came within timeout_s."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    fd = f.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        buf += chunk
        if chunk == b"\n":
            return buf
    return buf or None


@pytest.fixture(scope="module")
def sid(sandbox):
    return sandbox["id"]


def test_output_arrives_before_the_process_ends(daemon, api, sid):
    skip_unless_streaming(api, sid)
    p = popen_cli(daemon, "exec", sid, "--", "sh", "-c", "echo first; sleep 3; echo second")
    try:
        line = read_line_within(p.stdout, 60)
        assert line == b"first\n", (line, p.poll())
        # The command sleeps 3 s after the first line: we read it while it still runs.
        assert p.poll() is None, "the CLI exited before the second line: output was not streamed"
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert rest == b"second\n", text(err)
    assert p.returncode == 0, text(err)


def test_run_streams_too(daemon, api, sid):
    skip_unless_streaming(api, sid)
    p = popen_cli(daemon, "run", "--", "sh", "-c", "echo first; sleep 3; echo second; exit 4")
    try:
        line = read_line_within(p.stdout, 120)
        assert line == b"first\n", line
        assert p.poll() is None
        rest, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert rest == b"second\n"
    assert p.returncode == 4, text(err)


@pytest.mark.parametrize("script,code", [("exit 0", 0), ("exit 3", 3), ("exit 255", 255),
                                          ("kill -TERM $$", 128 + 15), ("kill -KILL $$", 128 + 9)])
def test_exit_codes(cli, api, sid, script, code):
    skip_unless_streaming(api, sid)
    p = cli("exec", sid, "--", "sh", "-c", script)
    assert p.returncode == code, (p.returncode, text(p.stderr))


def test_timeout_exits_124(cli, api, sid):
    skip_unless_streaming(api, sid)
    p = cli("exec", "--timeout", "1", sid, "--", "sleep", "600")
    assert p.returncode == 124, (p.returncode, text(p.stderr))
    assert b"timed out" in p.stderr


def test_stdout_stderr_and_binary_bytes(cli, api, sid):
    skip_unless_streaming(api, sid)
    p = cli("exec", sid, "--", "sh", "-c", r"printf 'a\000\001\377b'; echo oops >&2")
    assert p.returncode == 0, text(p.stderr)
    assert p.stdout == b"a\x00\x01\xffb"
    assert p.stderr == b"oops\n"


def test_large_output(cli, api, sid):
    skip_unless_streaming(api, sid)
    p = cli("exec", sid, "--", "sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x")
    assert p.returncode == 0, text(p.stderr)
    assert p.stdout == b"x" * 3000000


def test_stdin_is_streamed(cli, api, sid):
    skip_unless_streaming(api, sid)
    data = os.urandom(3 << 20)
    p = cli("exec", sid, "--", "sh", "-c", "cat | md5sum", input=data)
    assert p.returncode == 0, text(p.stderr)
    import hashlib
    assert p.stdout.split()[0].decode() == hashlib.md5(data).hexdigest()


def test_stdin_reaches_the_process_before_eof(daemon, api, sid):
    """A line written to our stdin comes back from `cat` while stdin is still open."""
    skip_unless_streaming(api, sid)
    p = popen_cli(daemon, "exec", sid, "--", "cat", stdin=subprocess.PIPE)
    try:
        p.stdin.write(b"ping\n")
        p.stdin.flush()
        assert read_line_within(p.stdout, 60) == b"ping\n"
        p.stdin.write(b"pong\n")
        p.stdin.close()
        rest = p.stdout.read()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert rest == b"pong\n"
    assert p.returncode == 0, text(p.stderr.read())


def test_no_stream_keeps_the_buffered_mode(cli, sid):
    p = cli("exec", "--no-stream", sid, "--", "sh", "-c", "cat; echo err >&2; exit 6", input=b"in\n")
    assert p.returncode == 6, text(p.stderr)
    assert p.stdout == b"in\n"
    assert p.stderr.startswith(b"err\n")


def test_errors(cli, api, sid):
    p = cli("exec", "sb-0000000000000000", "--", "true")
    assert p.returncode == 125 and p.stderr
    p = cli("exec", sid, "--", "/no/such/binary")
    assert p.returncode == 125, (p.returncode, text(p.stderr))
    assert b"no/such/binary" in p.stderr or b"No such file" in p.stderr or b"not found" in p.stderr, text(p.stderr)
    for args in (["exec", "-d", "-t", sid, "--", "sh"], ["exec", "--tag", "x", sid, "--", "sh"],
                 ["exec", "--no-stream", "-d", sid, "--", "sh"], ["kill", sid], ["logs", sid],
                 ["kill", "-s", "NOPE", sid, "p-1"], ["wait", sid, "p-1", "--timeout", "x"]):
        p = cli(*args)
        assert p.returncode == 2, (args, p.returncode, text(p.stderr))


# ------------------------------------------------------------ background processes

def test_detached_ps_logs_wait(cli, api, sid):
    skip_unless_endpoint(api, "GET", f"/v1/sandboxes/{sid}/processes")
    p = cli("exec", "-d", "--tag", "job", sid, "--", "sh", "-c", "echo out; echo err >&2; sleep 2; exit 7")
    assert p.returncode == 0, text(p.stderr)
    pid = text(p.stdout).strip()
    assert pid.startswith("p-"), pid

    p = cli("ps", sid)
    assert p.returncode == 0, text(p.stderr)
    row = [l for l in text(p.stdout).splitlines() if l.startswith(pid + " ")]
    assert row and "job" in row[0] and "sleep 2" in row[0], text(p.stdout)
    assert text(p.stdout).splitlines()[0].split() == ["ID", "STATE", "EXIT", "TAG", "CMD"]

    p = cli("wait", sid, pid)
    assert p.returncode == 7, text(p.stderr)

    p = cli("ps", sid, "--json")
    procs = {x["id"]: x for x in json.loads(p.stdout)}
    assert procs[pid]["state"] == "exited" and procs[pid]["exit_code"] == 7

    p = cli("logs", sid, pid)
    assert p.returncode == 0, text(p.stderr)
    assert p.stdout == b"out\n" and p.stderr == b"err\n"
    p = cli("logs", "-f", "--from", "now", sid, pid)
    assert p.returncode == 0 and p.stdout == b""


def test_logs_follow_streams(daemon, cli, api, sid):
    skip_unless_endpoint(api, "GET", f"/v1/sandboxes/{sid}/processes")
    p = cli("exec", "-d", sid, "--", "sh", "-c", "echo one; sleep 3; echo two")
    pid = text(p.stdout).strip()
    f = popen_cli(daemon, "logs", "-f", sid, pid)
    try:
        assert read_line_within(f.stdout, 60) == b"one\n"
        assert f.poll() is None
        rest, _ = f.communicate(timeout=60)
    finally:
        if f.poll() is None:
            f.kill()
    assert rest == b"two\n" and f.returncode == 0


def test_kill_and_wait(cli, api, sid):
    skip_unless_endpoint(api, "GET", f"/v1/sandboxes/{sid}/processes")
    pid = text(cli("exec", "-d", sid, "--", "sleep", "300").stdout).strip()
    p = cli("wait", "--timeout", "1", sid, pid)
    assert p.returncode == 124 and b"still running" in p.stderr, (p.returncode, text(p.stderr))
    p = cli("kill", sid, pid)
    assert p.returncode == 0, text(p.stderr)
    assert cli("wait", sid, pid).returncode == 128 + 15

    pid = text(cli("exec", "-d", sid, "--", "sleep", "300").stdout).strip()
    assert cli("kill", "-s", "SIGKILL", sid, pid).returncode == 0
    assert cli("wait", sid, pid).returncode == 128 + 9
    pid = text(cli("exec", "-d", sid, "--", "sleep", "300").stdout).strip()
    assert cli("kill", "-s", "2", sid, pid).returncode == 0
    assert cli("wait", sid, pid).returncode == 128 + 2

    p = cli("kill", sid, "p-999999")
    assert p.returncode == 125 and p.stderr
