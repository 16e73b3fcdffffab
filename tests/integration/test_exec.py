# SPDX-License-Identifier: Apache-2.0
"""Running commands through POST /v1/sandboxes/{id}/exec: output, exit
status, stdin, env, cwd, large and binary output, several sandboxes at once."""
import base64
import hashlib
import threading

from conftest import stdout_bytes, decode_stream

MIB = 1024 * 1024


def test_healthz(api):
    r = api.healthz()
    assert r.status == 200, r
    assert r.json["status"] == "ok"
    assert r.json["backend"] == "qemu"
    assert r.json["accel"] in ("kvm", "tcg")
    assert r.json["version"]


def test_sandbox_object(api, sandbox):
    r = api.get(sandbox["id"])
    assert r.status == 200, r
    sb = r.json
    assert sb["id"] == sandbox["id"] and sb["id"].startswith("sb-")
    assert sb["state"] == "running"
    assert sb["template"] == "minimal"
    assert sb["vcpus"] == 1 and sb["memory_mib"] == 256
    assert sb["env"] == {} and sb["metadata"] == {}
    assert sb["backend"] == "qemu"
    assert sb["error"] is None
    assert isinstance(sb["boot_ms"], int) and sb["boot_ms"] >= 0
    assert sb["created_at"].endswith("Z") and sb["updated_at"].endswith("Z")
    assert sb["id"] in [s["id"] for s in api.list()]


def test_exit_code_stdout_stderr(api, sandbox):
    res = api.exec_ok(sandbox["id"], ["sh", "-c", "echo hi; echo oops >&2; exit 3"])
    assert res["exit_code"] == 3, res
    assert res["signal"] is None
    assert res["timed_out"] is False
    assert res["stdout"] == "hi\n" and res["stdout_encoding"] == "utf8"
    assert res["stderr"] == "oops\n" and res["stderr_encoding"] == "utf8"
    assert res["stdout_truncated"] is False and res["stderr_truncated"] is False
    assert isinstance(res["duration_ms"], int)


def test_killed_by_signal(api, sandbox):
    res = api.exec_ok(sandbox["id"], ["sh", "-c", "kill -9 $$"])
    assert res["exit_code"] is None, res
    assert res["signal"] == 9, res


def test_timeout_kills_the_command(api, sandbox):
    res = api.exec_ok(sandbox["id"], ["sh", "-c", "echo started; sleep 600"], timeout_s=1)
    assert res["timed_out"] is True, res
    assert res["stdout"] == "started\n"
    # The sandbox is still usable afterwards.
    assert api.exec_ok(sandbox["id"], ["echo", "after"])["stdout"] == "after\n"


def test_command_that_cannot_start(api, sandbox):
    r = api.exec(sandbox["id"], ["/no/such/program"])
    assert r.status == 400, r
    assert r.error_code == "invalid_argument", r
    assert r.error_message
    r = api.exec(sandbox["id"], ["pwd"], cwd="/no/such/dir")
    assert r.status == 400, r


def test_stdin_reaches_the_command(api, sandbox):
    text = "hello\nworld\n" * 1000
    res = api.exec_ok(sandbox["id"], ["cat"], stdin=text)
    assert res["exit_code"] == 0, res
    assert res["stdout"] == text


def test_stdin_binary_base64(api, sandbox):
    data = bytes(range(256)) * 64 + b"\0\0\xff"
    res = api.exec_ok(sandbox["id"], ["sh", "-c", "cat | sha256sum"],
                      stdin=base64.b64encode(data).decode(), stdin_encoding="base64")
    assert res["exit_code"] == 0, res
    assert res["stdout"].split()[0] == hashlib.sha256(data).hexdigest()


def test_no_stdin_means_dev_null(api, sandbox):
    res = api.exec_ok(sandbox["id"], ["cat"])
    assert res["exit_code"] == 0 and res["stdout"] == "", res


def test_env_and_cwd(api):
    sb = api.create_ok(env={"FOO": "from-create", "BAR": "kept"})
    try:
        assert api.get(sb["id"]).json["env"] == {"FOO": "from-create", "BAR": "kept"}
        res = api.exec_ok(sb["id"], ["sh", "-c", 'echo "$FOO $BAR"'])
        assert res["stdout"] == "from-create kept\n", res
        res = api.exec_ok(sb["id"], ["sh", "-c", 'echo "$FOO $BAR $NEW"'], env={"FOO": "override", "NEW": "x"})
        assert res["stdout"] == "override kept x\n", res
        # The override was for that exec only.
        res = api.exec_ok(sb["id"], ["sh", "-c", 'echo "$FOO"'])
        assert res["stdout"] == "from-create\n", res

        assert api.exec_ok(sb["id"], ["pwd"], cwd="/tmp")["stdout"] == "/tmp\n"
        assert api.exec_ok(sb["id"], ["pwd"])["stdout"] == "/\n"
    finally:
        api.delete(sb["id"])


def test_ten_mib_of_output_arrives_intact(api, sandbox):
    n = 10 * MIB
    res = api.exec_ok(sandbox["id"], ["sh", "-c", f"yes 0123456789abcdef | head -c {n}"])
    assert res["exit_code"] == 0, {k: v for k, v in res.items() if k not in ("stdout", "stderr")}
    out = stdout_bytes(res)
    expected = (b"0123456789abcdef\n" * (n // 17 + 1))[:n]
    assert len(out) == n
    assert hashlib.sha256(out).hexdigest() == hashlib.sha256(expected).hexdigest()
    assert res["stdout_truncated"] is False


def test_binary_output_through_base64(api, sandbox):
    sid = sandbox["id"]
    n = 4 * MIB
    res = api.exec_ok(sid, ["sh", "-c", f"head -c {n} /dev/urandom > /tmp/random.bin && sha256sum /tmp/random.bin"])
    assert res["exit_code"] == 0, res
    guest_sum = res["stdout"].split()[0]
    res = api.exec_ok(sid, ["cat", "/tmp/random.bin"])
    assert res["exit_code"] == 0
    assert res["stdout_encoding"] == "base64"  # random bytes are not UTF-8
    out = stdout_bytes(res)
    assert len(out) == n
    assert hashlib.sha256(out).hexdigest() == guest_sum
    # stderr gets the same treatment.
    res = api.exec_ok(sid, ["sh", "-c", "head -c 1000 /tmp/random.bin >&2"])
    assert res["stderr_encoding"] == "base64"
    assert decode_stream(res["stderr"], res["stderr_encoding"]) == out[:1000]


def test_output_truncated_at_max_output_bytes(api, sandbox):
    res = api.exec_ok(sandbox["id"], ["sh", "-c", "yes | head -c 100000; yes e | head -c 5000 >&2"],
                      max_output_bytes=1000)
    assert res["stdout_truncated"] is True, res
    assert res["stdout"] == "y\n" * 500
    assert res["stderr_truncated"] is True
    assert len(res["stderr"]) == 1000


def test_three_sandboxes_at_once(api):
    results, errors = {}, []

    def create(i):
        try:
            results[i] = api.create(template="minimal", vcpus=1, memory_mib=256)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r.json["id"] for r in results.values() if r.status == 201]
    try:
        assert not errors, errors
        for r in results.values():
            assert r.status == 201, r
        assert len(set(ids)) == 3
        listed = {s["id"]: s["state"] for s in api.list()}
        for sid in ids:
            assert listed.get(sid) == "running"

        # Each writes its own file, then each reads: it sees only its own.
        for sid in ids:
            api.exec_ok(sid, ["sh", "-c", f"echo {sid} > /tmp/whoami"])
        boot_ids = set()
        for sid in ids:
            res = api.exec_ok(sid, ["sh", "-c", "cat /tmp/whoami; cat /proc/sys/kernel/random/boot_id"])
            lines = res["stdout"].split()
            assert lines[0] == sid, res
            boot_ids.add(lines[1])
        assert len(boot_ids) == 3, boot_ids

        # Concurrent execs in all three.
        outs, exec_errors = {}, []

        def run(sid):
            try:
                outs[sid] = api.exec_ok(sid, ["sh", "-c", "yes $(cat /tmp/whoami) | head -n 20000 | sort -u"])
            except Exception as e:  # noqa: BLE001
                exec_errors.append(e)

        threads = [threading.Thread(target=run, args=(sid,)) for sid in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not exec_errors, exec_errors
        for sid in ids:
            assert outs[sid]["stdout"] == sid + "\n"
    finally:
        for sid in ids:
            api.delete(sid)
