# SPDX-License-Identifier: Apache-2.0
"""The `airlock` CLI against a real daemon (docs/cli.md)."""
import json
import os
import subprocess

from conftest import AIRLOCK, Cli


def text(b):
    return b.decode("utf-8", "replace")


def test_run_prints_output_and_exits_with_the_commands_status(cli, api):
    before = {s["id"] for s in api.list()}
    p = cli("run", "--", "sh", "-c", "echo hi; exit 3")
    assert p.returncode == 3, (p.returncode, text(p.stdout), text(p.stderr))
    assert p.stdout == b"hi\n", text(p.stderr)
    # run deletes its sandbox.
    assert {s["id"] for s in api.list()} == before


def test_run_stderr_and_signal(cli):
    p = cli("run", "--", "sh", "-c", "echo err >&2; kill -TERM $$")
    assert p.stderr.startswith(b"err\n"), text(p.stderr)
    assert p.returncode == 128 + 15, (p.returncode, text(p.stderr))


def test_run_passes_stdin(cli):
    data = "line one\nline two\n" * 500
    p = cli("run", "--", "cat", input=data)
    assert p.returncode == 0, text(p.stderr)
    assert p.stdout == data.encode()


def test_run_passes_binary_stdin(cli):
    data = bytes(range(256)) * 16
    p = cli("run", "--", "sh", "-c", "cat | wc -c", input=data)
    assert p.returncode == 0, text(p.stderr)
    assert p.stdout.strip() == str(len(data)).encode()


def test_run_with_options(cli):
    p = cli("run", "--template", "minimal", "--vcpus", "2", "--memory", "320", "--env", "GREETING=hello there",
            "--", "sh", "-c", 'echo "$GREETING"; grep -c ^processor /proc/cpuinfo; pwd')
    assert p.returncode == 0, text(p.stderr)
    lines = text(p.stdout).splitlines()
    assert lines[0] == "hello there"
    assert lines[1] == "2"
    assert lines[2] == "/"


def test_run_timeout_exits_124(cli):
    p = cli("run", "--timeout", "1", "--", "sleep", "600")
    assert p.returncode == 124, (p.returncode, text(p.stderr))
    assert p.stderr, "a timeout must be explained on stderr"


def test_create_exec_inspect_ls_rm(cli, api, daemon):
    p = cli("create", "--env", "A=1", "--metadata", "owner=alice")
    assert p.returncode == 0, text(p.stderr)
    sid = text(p.stdout).strip()
    assert sid.startswith("sb-") and "\n" not in sid
    try:
        sb = api.get(sid).json
        assert sb["state"] == "running"
        assert sb["env"] == {"A": "1"} and sb["metadata"] == {"owner": "alice"}

        p = cli("exec", sid, "--", "sh", "-c", 'echo "$A"; exit 5')
        assert p.returncode == 5
        assert p.stdout == b"1\n"
        p = cli("exec", "--env", "A=2", "--cwd", "/tmp", sid, "--", "sh", "-c", 'echo "$A $(pwd)"')
        assert p.returncode == 0, text(p.stderr)
        assert p.stdout == b"2 /tmp\n"
        p = cli("exec", sid, "--", "cat", input="via stdin\n")
        assert p.stdout == b"via stdin\n"

        # inspect: indented JSON by default, compact with --json; the same object.
        p = cli("inspect", sid)
        assert p.returncode == 0, text(p.stderr)
        pretty = json.loads(p.stdout)
        assert "\n  " in text(p.stdout)
        assert pretty["id"] == sid and pretty["state"] == "running"
        p = cli("inspect", sid, "--json")
        assert p.returncode == 0
        assert len(text(p.stdout).strip().splitlines()) == 1
        assert json.loads(p.stdout)["id"] == sid

        # ls: a table with a header, and --json.
        p = cli("ls")
        assert p.returncode == 0, text(p.stderr)
        lines = text(p.stdout).splitlines()
        assert lines[0].split()[:6] == ["ID", "STATE", "TEMPLATE", "VCPUS", "MEMORY", "CREATED"]
        row = [ln for ln in lines if ln.startswith(sid)]
        assert len(row) == 1 and row[0].split()[1:3] == ["running", "minimal"]
        p = cli("ls", "--json")
        assert p.returncode == 0
        listed = json.loads(p.stdout)
        assert sid in [s["id"] for s in listed]
    finally:
        p = cli("rm", sid)
    assert p.returncode == 0, text(p.stderr)
    assert text(p.stdout).strip() == sid
    assert api.get(sid).json["state"] == "deleted"
    assert not os.path.exists(daemon.sandbox_dir(sid))
    # Deleted sandboxes are listed only with --all.
    assert sid not in text(cli("ls").stdout)
    p = cli("ls", "--all", "--json")
    assert {s["id"]: s["state"] for s in json.loads(p.stdout)}.get(sid) == "deleted"


def test_create_json_prints_the_object(cli, api):
    p = cli("create", "--json")
    assert p.returncode == 0, text(p.stderr)
    sb = json.loads(p.stdout)
    try:
        assert sb["state"] == "running" and sb["template"] == "minimal"
    finally:
        assert cli("rm", sb["id"]).returncode == 0


def test_errors_from_the_daemon(cli, api):
    before = api.list(all=True)
    p = cli("inspect", "sb-0000000000000000")
    assert p.returncode == 125, p
    assert p.stdout == b""
    assert b"not_found" in p.stderr or b"404" in p.stderr, text(p.stderr)

    p = cli("create", "--template", "no-such-template")
    assert p.returncode == 125
    assert b"no-such-template" in p.stderr, text(p.stderr)

    p = cli("rm", "sb-0000000000000000")
    assert p.returncode == 125 and p.stderr

    p = cli("exec", "sb-0000000000000000", "--", "true")
    assert p.returncode == 125 and p.stderr
    assert api.list(all=True) == before


def test_usage_errors_exit_2(cli):
    for args in (["frobnicate"], ["run"], ["run", "--vcpus", "many", "--", "true"], ["inspect"],
                 ["create", "--env", "novalue"], ["rm"], []):
        p = cli(*args)
        assert p.returncode == 2, (args, p.returncode, text(p.stderr))
        assert p.stderr, args


def test_unreachable_socket(tmp_path):
    missing = str(tmp_path / "nobody-listens.sock")
    for args in (["ls"], ["run", "--", "true"], ["create"]):
        p = Cli(missing)(*args)
        assert p.returncode == 125, (args, p.returncode)
        err = text(p.stderr)
        assert missing in err, err
        # It says what to do, not just that it failed.
        assert "airlockd" in err or "daemon" in err, err


def test_socket_from_environment(daemon):
    p = subprocess.run([AIRLOCK, "ls", "--json"], stdin=subprocess.DEVNULL, capture_output=True,
                       env={**os.environ, "AIRLOCK_SOCKET": daemon.socket}, timeout=60)
    assert p.returncode == 0, text(p.stderr)
    json.loads(p.stdout)


def test_version(cli):
    p = cli("version")
    assert p.returncode == 0
    assert p.stdout.startswith(b"airlock ")
