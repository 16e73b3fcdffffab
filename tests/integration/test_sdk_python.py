# SPDX-License-Identifier: Apache-2.0
"""Airlock's Python SDK (sdk/python, package `airlock`) against a real
airlockd with real VMs: over its unix socket (the operator) and its TCP
listener with a tenant's token, one daemon for the module. Every method
group runs once for real, the API's errors come back as typed exceptions,
the SDK reaches every route of docs/api/openapi.yaml (or names why not in
airlock.routes.EXCLUDED), and examples/python/agent_loop.py solves its task."""
import asyncio
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

import pytest
import yaml

from apiutil import ListeningDaemon, free_port
from conftest import AIRLOCKD, ROOT
from lifecycleutil import vmm_pid

SDK = os.path.join(ROOT, "sdk", "python")
sys.path.insert(0, SDK)
import airlock  # noqa: E402
from airlock import aio  # noqa: E402
from airlock._http import raise_for_answer  # noqa: E402
from airlock.routes import EXCLUDED, ROUTES  # noqa: E402

SPEC = os.path.join(ROOT, "docs", "api", "openapi.yaml")
EXAMPLE = os.path.join(ROOT, "examples", "python", "agent_loop.py")
TENANT = "sdk-py"
METHODS = ("get", "put", "post", "delete", "patch")

# (method, route template) of every request the SDK made in this module.
CALLED = set()


def spec_routes():
    with open(SPEC) as f:
        spec = yaml.safe_load(f)
    return {(m.upper(), p) for p, item in spec["paths"].items() for m in METHODS if m in item}


def _route_regexes():
    out = []
    for method, route in ROUTES.keys() | EXCLUDED.keys():
        rx = "^" + re.sub(r"\\\{[a-z]+\\\}", "[^/]+", re.escape(route)) + "$"
        out.append((method, route, re.compile(rx)))
    # Longer templates first so /files/stat is not taken for /files.
    return sorted(out, key=lambda t: -len(t[1]))


ROUTE_RX = _route_regexes()


def record(method, path):
    for m, route, rx in ROUTE_RX:
        if m == method and rx.match(path):
            CALLED.add((m, route))
            return
    CALLED.add((method, path))


def recorded(client):
    client.transport.on_request = record
    return client


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-sdk"), free_port()).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture(scope="module")
def admin(daemon):
    """The SDK over the unix socket (no token: the operator)."""
    return recorded(airlock.Client(socket_path=daemon.socket))


@pytest.fixture(scope="module")
def token(admin):
    return admin.tokens.create(TENANT, description="python sdk tests")


@pytest.fixture(scope="module")
def tenant(daemon, token):
    """The SDK over TCP with a tenant's token."""
    return recorded(airlock.Client(host=f"tcp://127.0.0.1:{daemon.port}", token=token["token"]))


@pytest.fixture(scope="module")
def sb(admin):
    """A running minimal sandbox for exec, processes, PTY and files."""
    s = airlock.Sandbox.create(template="minimal", vcpus=1, memory_mib=256, env={"GREETING": "hello"},
                               metadata={"suite": "sdk-py"}, client=admin)
    yield s
    s.delete()


# ------------------------------------------------------------------ without a VM

def test_install_with_pip_offline(tmp_path):
    # From a copy: setuptools builds in the source tree (build/, *.egg-info).
    src = tmp_path / "src"
    shutil.copytree(SDK, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = tmp_path / "site"
    r = subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "--no-index", "--no-build-isolation",
                        "--no-deps", "--target", str(target), str(src)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    r = subprocess.run(["/usr/bin/python3", "-c", "import airlock, airlock.aio; print(airlock.__file__)"],
                       cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(target)}, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0 and str(target) in r.stdout, r.stdout


def served_routes():
    """`airlockd --print-routes` without E2B's API (not Airlock's, docs/e2b.md)."""
    out = subprocess.run([AIRLOCKD, "--print-routes"], check=True, stdout=subprocess.PIPE, text=True).stdout
    found = set()
    for line in out.splitlines():
        method, _, path = line.partition(" ")
        if line and not path.startswith("/e2b/"):
            found.add((method.upper(), path))
    assert found, "airlockd --print-routes printed nothing"
    return found


def test_route_table_covers_the_spec():
    spec = spec_routes()
    assert spec, "no routes in docs/api/openapi.yaml"
    if os.path.exists(AIRLOCKD):  # test_openapi.py checks the two agree; the daemon's table wins here too
        spec |= served_routes()
    table = set(ROUTES) | set(EXCLUDED)
    missing = sorted(spec - table)
    assert not missing, (f"routes of docs/api/openapi.yaml without an SDK method: {missing}; add a method and "
                         "a row to sdk/python/airlock/routes.py ROUTES, or an EXCLUDED entry with the reason "
                         "(and say so in sdk/python/README.md)")
    stale = sorted(table - spec)
    assert not stale, f"routes in airlock.routes that docs/api/openapi.yaml no longer has: {stale}"
    assert not set(ROUTES) & set(EXCLUDED), "a route both covered and excluded"
    for route, reason in EXCLUDED.items():
        assert isinstance(reason, str) and len(reason) > 20, f"{route}: say why it is excluded"
    classes = {"Client": airlock.Client, "Sandbox": airlock.Sandbox, "Process": airlock.Process,
               "Files": airlock.Files, "Snapshots": airlock.client.Snapshots, "Secrets": airlock.client.Secrets,
               "Tokens": airlock.client.Tokens, "Tenants": airlock.client.Tenants, "Pools": airlock.client.Pools,
               "Templates": airlock.Templates}
    for route, name in ROUTES.items():
        cls, _, meth = name.partition(".")
        assert callable(getattr(classes[cls], meth, None)), f"{route}: {name} does not exist"


def test_errors_from_answers():
    """Every code of the API's error table maps to its class; Retry-After is kept."""
    table = {"invalid_argument": (400, airlock.InvalidArgument), "unauthorized": (401, airlock.Unauthorized),
             "forbidden": (403, airlock.Forbidden), "not_found": (404, airlock.NotFound),
             "method_not_allowed": (405, airlock.MethodNotAllowed), "conflict": (409, airlock.Conflict),
             "payload_too_large": (413, airlock.PayloadTooLarge),
             "unsupported_media_type": (415, airlock.UnsupportedMediaType),
             "quota_exceeded": (429, airlock.QuotaExceeded), "boot_failed": (500, airlock.BootFailed),
             "internal": (500, airlock.InternalError), "guest_error": (502, airlock.GuestError),
             "unavailable": (503, airlock.Unavailable), "timeout": (504, airlock.Timeout)}
    for code, (status, cls) in table.items():
        body = ('{"error":{"code":"%s","message":"what went wrong"}}' % code).encode()
        with pytest.raises(cls) as e:
            raise_for_answer(status, {"Retry-After": "3"}, body, "X")
        assert e.value.code == code and e.value.status == status and e.value.retry_after == 3
        assert e.value.message == "what went wrong" and isinstance(e.value, airlock.AirlockError)
    with pytest.raises(airlock.Unavailable):  # no JSON: the status decides
        raise_for_answer(503, {}, b"<html>", "X")


def test_connection_settings(daemon, monkeypatch, tmp_path):
    monkeypatch.delenv("AIRLOCK_HOST", raising=False)
    monkeypatch.delenv("AIRLOCK_TOKEN", raising=False)
    monkeypatch.setenv("AIRLOCK_SOCKET", daemon.socket)
    c = airlock.Client()
    assert c.transport.socket_path == daemon.socket and c.health()["status"] == "ok"
    monkeypatch.setenv("AIRLOCK_SOCKET", str(tmp_path / "nothing.sock"))
    with pytest.raises(airlock.ConnectionFailed, match="AIRLOCK_SOCKET"):
        airlock.Client().health()
    for spec in ("tcp://", "http://"):
        monkeypatch.setenv("AIRLOCK_HOST", f"{spec}127.0.0.1:{daemon.port}")
        with pytest.raises(airlock.Unauthorized):
            airlock.Client().health()
    with pytest.raises(ValueError):
        airlock.Client(host="tcp://127.0.0.1")


# ------------------------------------------------------------------ over TCP with a token

def test_tcp_tenant(admin, tenant, token, sb):
    assert tenant.health()["status"] == "ok"
    assert tenant.ca().startswith("-----BEGIN CERTIFICATE-----")
    # A secret of the tenant's own, given to its sandbox as a placeholder.
    s = tenant.secrets.set("sdk-key", "s3cr3t-value", hosts=["api.example.com"], header="Authorization",
                           format="Bearer {value}")
    assert s["name"] == "sdk-key" and s["tenant"] == TENANT and "value" not in s
    assert [x["name"] for x in tenant.secrets.list()] == ["sdk-key"]
    assert tenant.secrets.get("sdk-key")["hosts"] == ["api.example.com"]
    with airlock.Sandbox.create(template="minimal", network={"allow": ["api.example.com"], "deny": []},
                                secrets={"API_KEY": "sdk-key"}, metadata={"via": "tcp"}, auto_resume=True,
                                client=tenant) as t:
        assert t.state == "running" and t.metadata == {"via": "tcp"} and t.data["auto_resume"] is True
        env_key = t.exec(["sh", "-c", "echo $API_KEY"]).stdout.strip()
        assert env_key.startswith("airlock-ph-") and "s3cr3t" not in env_key, env_key
        net = t.get_network()
        assert net["policy"]["allow"] == ["api.example.com"], net
        net = t.set_network(allow=["*.example.org"], deny=["bad.example.org"])
        assert net["policy"] == {"allow": ["*.example.org"], "deny": ["bad.example.org"]}, net
        with t.pty(["sh"]) as term:  # the upgrade over TCP, with the token
            term.write("echo t''cp-$((2*3))\r")
            term.read_until("tcp-6")
            term.write("exit\r")
            assert term.wait(timeout=60)["exit_code"] == 0
        # The tenant sees its own sandbox, not the operator's.
        assert [x.id for x in airlock.Sandbox.list(client=tenant)] == [t.id]
        with pytest.raises(airlock.NotFound):
            airlock.Sandbox.get(sb.id, client=tenant)
        usage = tenant.tenants.get(TENANT)
        assert usage["usage"]["sandboxes"] == 1, usage
        # A quota: the next create is refused before anything boots.
        admin.tenants.set_quotas(TENANT, max_sandboxes=1)
        try:
            with pytest.raises(airlock.QuotaExceeded) as e:
                airlock.Sandbox.create(template="minimal", client=tenant)
            assert e.value.status == 429
        finally:
            assert admin.tenants.set_quotas(TENANT)["quotas"]["max_sandboxes"] == 0
    assert t.state == "deleted"
    # The operator's routes are not a token's.
    with pytest.raises(airlock.Forbidden):
        tenant.metrics()
    with pytest.raises(airlock.Forbidden):
        tenant.tokens.list()
    tenant.secrets.delete("sdk-key")
    with pytest.raises(airlock.NotFound):
        tenant.secrets.get("sdk-key")


def test_tokens_and_secrets_as_operator(admin, daemon, token):
    other = admin.tokens.create("sdk-other", description="revoked at once")
    assert other["token"].startswith("alk_")
    ids = {t["id"]: t for t in admin.tokens.list()}
    assert token["id"] in ids and other["id"] in ids and "token" not in ids[other["id"]]
    admin.tokens.revoke(other["id"])
    with pytest.raises(airlock.Unauthorized):
        airlock.Client(host=f"http://127.0.0.1:{daemon.port}", token=other["token"]).health()
    with pytest.raises(airlock.NotFound):
        admin.tokens.revoke(other["id"])
    admin.secrets.set("op-key", "v1", hosts=["*.example.com"], tenant="sdk-other")
    assert admin.secrets.get("op-key", tenant="sdk-other")["tenant"] == "sdk-other"
    assert "op-key" in [s["name"] for s in admin.secrets.list(tenant="sdk-other")]
    admin.secrets.delete("op-key", tenant="sdk-other")
    with pytest.raises(airlock.InvalidArgument):
        admin.secrets.set("op-key", "bad\nvalue", hosts=["x.example.com"])


def test_pools(admin, tenant):
    """Warm pools: the operator's shared pool and a tenant's own, set and
    removed again (size 0) before any VM of theirs is needed."""
    answer = admin.pools.set("minimal", 1, vcpus=1, memory_mib=288)
    try:
        shared = [p for p in answer["pools"] if p["memory_mib"] == 288]
        assert len(shared) == 1 and shared[0]["tenant"] is None and shared[0]["size"] == 1, answer
        assert set(answer["host_memory"]) == {"total_bytes", "available_bytes", "high_pct", "shedding"}
        # A token sees the shared pool and sets only its own.
        mine = tenant.pools.set("minimal", 0, memory_mib=288)
        assert [p["tenant"] for p in mine["pools"] if p["memory_mib"] == 288] == [None], mine
        with pytest.raises(airlock.Forbidden):
            tenant.pools.set("minimal", 1, tenant="sdk-other")
        with pytest.raises(airlock.InvalidArgument):
            tenant.pools.set("minimal", 65)
        assert any(p["memory_mib"] == 288 for p in tenant.pools.list()["pools"])
    finally:
        answer = admin.pools.set("minimal", 0, memory_mib=288)
    assert not [p for p in answer["pools"] if p["memory_mib"] == 288], answer


# ------------------------------------------------------------------ commands

def test_exec(sb):
    r = sb.exec(["sh", "-c", "echo $GREETING; echo oops >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr, r.ok) == (3, "hello\n", "oops\n", False), r
    assert r.process_id.startswith("p-")
    assert sb.exec("cat", stdin="from stdin").stdout == "from stdin"
    blob = bytes(range(256))
    assert sb.exec(["cat"], stdin=blob).stdout_bytes == blob  # base64 both ways
    assert sb.exec("pwd; echo $X", cwd="/tmp", env={"X": "y"}).stdout == "/tmp\ny\n"
    chunks = []
    r = sb.exec(["sh", "-c", "echo one; echo two >&2; echo three"], stream=chunks.append)
    assert r.exit_code == 0 and r.stdout == "one\nthree\n" and r.stderr == "two\n", r
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"one\nthree\n", chunks
    r = sb.exec(["sleep", "30"], timeout=1)
    assert r.timed_out and r.exit_code is None and r.signal, r
    with pytest.raises(airlock.CommandFailed) as e:
        sb.exec("exit 7", check=True)
    assert e.value.result.exit_code == 7
    with pytest.raises(airlock.InvalidArgument):
        sb.exec(["/no/such/binary"])
    with sb.exec_stream(["sh", "-c", "echo streamed"]) as s:
        assert [c.text for c in s] == ["streamed\n"] and s.exit["exit_code"] == 0 and s.process_id


def test_background_processes(sb):
    p = sb.start(["cat"], stdin_stream=True, tag="echo")
    assert p.state == "running" and p.tag == "echo"
    p.write_stdin("line one\n")
    p.write_stdin(b"line two\n", eof=True)
    with p.output(follow=True) as out:
        got = b"".join(c.data for c in out)
    assert got == b"line one\nline two\n" and out.exit["exit_code"] == 0, (got, out.exit)
    assert p.wait().exit_code == 0 and p.state == "exited"
    s = sb.start("sleep 300", tag="sleeper")
    assert {"echo", "sleeper"} <= {x.tag for x in sb.processes()}
    with pytest.raises(airlock.Timeout) as e:
        s.wait(timeout=1)
    assert e.value.status == 408 and e.value.process.state == "running"
    s.signal("TERM")
    assert s.wait(timeout=60).exit_signal == 15
    assert sb.process(s.id).state == "exited"
    with pytest.raises(airlock.Conflict):
        s.signal("KILL")  # it has ended
    with pytest.raises(airlock.NotFound):
        sb.process("p-999999")


def test_ports(sb):
    """Expose, list, unexpose; a tunnel to a busybox nc in the guest (docs/api.md, "Ports")."""
    a = sb.expose(7000)
    mine = [p for p in a["ports"] if p["port"] == 7000]
    assert mine and mine[0]["exposed"] and not mine[0]["public"] and a["proxy"] is False, a
    assert sb.data["ports"] == [{"port": 7000, "public": False, "url": None}]
    assert sb.get_host(7000) is None  # this daemon runs no proxy
    assert [p["public"] for p in sb.expose(7000, public=True)["ports"] if p["port"] == 7000] == [True]
    assert sb.ports()["traffic_token"].startswith("att_")
    with pytest.raises(ValueError):
        sb.expose(0)
    with pytest.raises(airlock.GuestError):  # nothing listens there
        sb.connect_port(7001)
    sb.start(["sh", "-c", "echo hello-from-guest | nc -l -p 7000"])
    deadline = time.monotonic() + 60
    while True:
        try:
            tunnel = sb.connect_port(7000)
            break
        except airlock.GuestError:
            assert time.monotonic() < deadline, "nc did not listen within 60 s"
            time.sleep(0.2)
    with tunnel:
        got = b""
        while b"hello-from-guest" not in got:
            chunk = tunnel.recv()
            assert chunk, got
            got += chunk
    # The daemon's side of the tunnel ends (and counts) once nc closed too:
    # wait for it, so that no tunnel outlives the test.
    deadline = time.monotonic() + 60
    while not [p for p in sb.ports()["ports"] if p["port"] == 7000 and p["requests"] >= 1]:
        assert time.monotonic() < deadline, sb.ports()
        time.sleep(0.2)
    assert sb.set_timeout(auto_resume=True).data["auto_resume"] is True
    assert sb.ports()["auto_resume"] is True
    assert sb.set_timeout(auto_resume=False).data["auto_resume"] is False
    sb.unexpose(7000)
    assert sb.data["ports"] == []
    with pytest.raises(airlock.NotFound):
        sb.unexpose(7000)


def test_pty(sb):
    with sb.pty(["sh"], rows=24, cols=80) as t:
        assert t.process.pty is True
        t.write("echo h''i-$((1+2))\r")
        t.read_until("hi-3")
        t.resize(33, 111)
        t.write("stty size\r")
        t.read_until("33 111")
        t.process.resize(40, 100)  # the same through the API
        t.write("stty size\r")
        t.read_until("40 100")
        t.write("exit 4\r")
        assert t.wait(timeout=60)["exit_code"] == 4
    assert t.process.wait().exit_code == 4


# ------------------------------------------------------------------ files

def test_files(sb, tmp_path):
    f = sb.files
    f.mkdir("/work/sub/deeper")
    assert f.write("/work/sub/a.bin", bytes(range(256)))["size"] == 256
    assert f.read("/work/sub/a.bin") == bytes(range(256))
    f.write_text("/work/sub/b.txt", "héllo\n", mode=0o600)
    assert f.read_text("/work/sub/b.txt") == "héllo\n"
    st = f.stat("/work/sub/b.txt")
    assert st["type"] == "file" and st["size"] == len("héllo\n".encode()) and st["mode"] & 0o777 == 0o600, st
    f.write("/work/sub/c.bin", io.BytesIO(b"x" * 100000))  # a file object, streamed
    with f.open_read("/work/sub/c.bin") as s:
        assert sum(len(c) for c in s) == 100000
    assert {e["name"] for e in f.list("/work/sub")} == {"a.bin", "b.txt", "c.bin", "deeper"}
    f.rename("/work/sub/b.txt", "/work/sub/deeper/b.txt")
    assert not f.exists("/work/sub/b.txt") and f.exists("/work/sub/deeper/b.txt")
    with pytest.raises(airlock.NotFound):
        f.read("/work/nothing")
    with pytest.raises(airlock.Conflict):
        f.mkdir("/work/sub", parents=False)
    with pytest.raises(airlock.Conflict):
        f.remove("/work/sub")  # not empty
    # Trees both ways through the archive endpoints.
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "m.py").write_text("print('m')\n")
    (src / "run.sh").write_text("#!/bin/sh\necho run\n")
    (src / "run.sh").chmod(0o755)
    (src / "link").symlink_to("run.sh")
    assert f.upload(src, "/work/up") == "/work/up/proj"
    assert sb.exec("/work/up/proj/link; cat /work/up/proj/pkg/m.py").stdout == "run\nprint('m')\n"
    out = f.download("/work/up/proj", tmp_path / "back")
    assert open(os.path.join(out, "pkg", "m.py")).read() == "print('m')\n"
    assert os.readlink(os.path.join(out, "link")) == "run.sh" and os.access(os.path.join(out, "run.sh"), os.X_OK)
    f.remove("/work/up", recursive=True)
    assert not f.exists("/work/up")


def test_download_refuses_hostile_entries(sb, tmp_path):
    """The guest makes the archive: an entry leaving the target is refused."""
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        d = tarfile.TarInfo("evil")
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(d)
        info = tarfile.TarInfo("evil/escape")
        info.type, info.linkname = tarfile.SYMTYPE, "../../outside"
        tar.addfile(info)
    sb.files.mkdir("/work/evil-src")
    sb.files.upload_archive("/work/evil-src", evil.getvalue())
    with pytest.raises(airlock.ProtocolError, match="points outside"):
        sb.files.download("/work/evil-src/evil", tmp_path / "dl")
    assert not os.path.lexists(tmp_path / "dl" / "evil" / "escape")


# ------------------------------------------------------------------ lifecycle, events, metrics

def test_lifecycle(admin, daemon):
    a = airlock.Sandbox.create(template="minimal", metadata={"role": "origin"}, client=admin)
    made = [a]
    snap = None
    try:
        with admin.events(sandbox=a.id) as ev:
            seen = [e["type"] for e in ev]
        assert "sandbox.state" in seen, seen
        since = ev.last_seq
        follow = admin.events(sandbox=a.id, type="sandbox.", since=since, follow=True, timeout=60)
        assert a.pause().state == "paused"
        with pytest.raises(airlock.Conflict):
            a.exec("true")
        a.auto_resume = True  # ?resume=true on exec, processes, files
        assert a.exec("echo resumed").stdout == "resumed\n"
        assert a.refresh().state == "running"
        a.auto_resume = False
        states = []
        for e in follow:
            states.append(e["data"]["state"])
            if states[-2:] == ["paused", "running"]:
                break
        follow.close()
        assert a.resume().state == "running"  # idempotent
        a.pause()
        assert airlock.Sandbox.connect(a.id, client=admin).state == "running"  # resumes

        a.files.write_text("/root/mark", "before the snapshot\n")
        snap = a.snapshot(name="sdk snapshot")
        assert snap.sandbox_id == a.id and snap.name == "sdk snapshot"
        assert [s.id for s in admin.snapshots.list(sandbox=a.id)] == [snap.id]
        assert admin.snapshots.get(snap.id).size_bytes > 0
        b = snap.restore(metadata={"role": "restored"})
        made.append(b)
        assert b.boot == "snapshot" and b.files.read_text("/root/mark") == "before the snapshot\n"
        (c,) = a.fork(count=1)
        made.append(c)
        assert c.id != a.id and c.exec("cat /root/mark").stdout == "before the snapshot\n"
        assert [x.id for x in airlock.Sandbox.list(metadata={"role": "restored"}, client=admin)] == [b.id]

        t = a.set_timeout(timeout=3600, on_timeout="pause", idle_timeout=600)
        assert (t.timeout_s, t.on_timeout, t.idle_timeout_s) == (3600, "pause", 600)

        m = a.metrics()
        assert m["cpus"] == 1 and m["mem_total_kib"] > 0, m
        prom = admin.metrics(parse=True)
        assert prom['airlock_sandboxes{state="running"}'] >= 3, prom

        # A VMM killed from outside: the sandbox goes to error, recover boots its disk.
        os.kill(vmm_pid(c.id), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while c.refresh().state != "error":
            assert time.monotonic() < deadline, f"{c.id} still {c.state} after its VMM was killed"
            time.sleep(0.2)
        with pytest.raises(airlock.Conflict):
            c.exec("true")
        assert c.recover(memory=False).state == "running"
        assert c.exec("echo back").stdout == "back\n"
        with pytest.raises(airlock.Conflict):
            c.recover()

        with pytest.raises(airlock.InvalidArgument):
            airlock.Sandbox.create(vcpus=999, client=admin)
        with pytest.raises(airlock.NotFound):
            airlock.Sandbox.get("sb-0123456789abcdef", client=admin)
    finally:
        for s in made:
            s.delete()
        if snap is not None:
            admin.snapshots.delete(snap.id)
    assert a.state == "deleted" and a.delete().state == "deleted"  # idempotent
    with pytest.raises(airlock.NotFound):
        admin.snapshots.get(snap.id)
    with pytest.raises(airlock.Conflict):
        a.exec("true")
    assert a.id not in [s.id for s in airlock.Sandbox.list(client=admin)]
    assert a.id in [s.id for s in airlock.Sandbox.list(all=True, client=admin)]


def test_async_wrappers(admin, sb):
    async def run():
        s = await aio.AsyncSandbox.get(sb.id, client=admin)
        r = await s.exec(["echo", "async"])
        assert r.stdout == "async\n"
        await s.files.write_text("/tmp/async.txt", "a")
        assert await s.files.read_text("/tmp/async.txt") == "a"
        client = aio.AsyncProxy(admin)
        events = await client.events(sandbox=sb.id, type="exec.")
        kinds = [e["type"] async for e in events]
        assert "exec.start" in kinds and "exec.exit" in kinds, kinds
        p = await s.start("echo out")
        out = await p.output(follow=True)
        assert b"".join([c.data async for c in out]) == b"out\n"
    asyncio.run(run())


# ------------------------------------------------------------------ templates

def test_templates(admin, tenant, tmp_path):
    """Build from a context directory (with a .dockerignore), then import a
    docker save archive, as a tenant; list, get, use, delete."""
    from test_oci_import import docker_save, entry, layer_tar
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM minimal\nENV SDK=py\nCOPY app.txt /opt/\nRUN cat /opt/app.txt\n")
    (ctx / "app.txt").write_text("from the sdk\n")
    (ctx / "secret.txt").write_text("not sent\n")
    (ctx / ".dockerignore").write_text("secret.txt\n")
    events = []
    t = tenant.templates.build("sdk-built", str(ctx), on_progress=events.append)
    assert t["name"] == "sdk-built" and t["tenant"] == TENANT and t["parent"] == "minimal", t
    assert any(e["type"] == "output" and "from the sdk" in e["data"] for e in events), events
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3, 4], events
    assert "sdk-built" in [x["name"] for x in tenant.templates.list()]
    assert tenant.templates.get("sdk-built")["config"]["env"] == ["SDK=py"]
    with pytest.raises(airlock.AirlockError, match="secret.txt"):
        tenant.templates.build("sdk-bad", bytes(_tar({"Dockerfile": b"FROM minimal\nCOPY secret.txt /x\n"})))
    s = airlock.Sandbox.create(template="sdk-built", client=tenant)
    try:
        assert s.exec("cat /opt/app.txt; echo $SDK").stdout == "from the sdk\npy\n"
    finally:
        s.delete()
    with open("/bin/busybox", "rb") as f:
        bb = f.read()
    arch = docker_save([layer_tar([entry("bin/", "dir"), entry("bin/busybox", data=bb, mode=0o755),
                                   entry("bin/sh", "sym", link="busybox")])], tmp_path / "img.tar")
    imp = tenant.templates.import_("sdk-imported", str(arch))
    assert imp["source"] == "image" and imp["tenant"] == TENANT, imp
    with pytest.raises(airlock.AirlockError):
        tenant.templates.delete("minimal")
    for name in ("sdk-built", "sdk-imported"):
        tenant.templates.delete(name)
    assert not {"sdk-built", "sdk-imported"} & {x["name"] for x in admin.templates.list()}


def _tar(files):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


# ------------------------------------------------------------------ the example

def test_agent_loop_example(daemon):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["AIRLOCK_SOCKET"] = daemon.socket
    r = subprocess.run([sys.executable, EXAMPLE, "--template", "base"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, f"{EXAMPLE} failed:\n{r.stdout}\n---- airlockd log ----\n{daemon.log()}"
    assert "attempt 1: failed: NameError" in r.stdout, r.stdout
    assert "attempt 2: solved: 2 3 5 7 11 13 17 19 23 29" in r.stdout, r.stdout
    assert "[stderr] checked 10 primes" in r.stdout, r.stdout


# ------------------------------------------------------------------ last: what the run reached

def test_every_route_was_called(request):
    """Runs last: every route of the table was reached by the tests above
    through the SDK method that the table names (or one that shares it)."""
    names = {item.name for item in request.session.items if item.module is request.module}
    if len(names) < len([n for n in dir(request.module) if n.startswith("test_")]):
        pytest.skip("only with the whole module (some of its tests were deselected)")
    missing = sorted(set(ROUTES) - CALLED)
    assert not missing, f"routes no test reached through the SDK: {missing}"
    unknown = sorted(CALLED - set(ROUTES) - set(EXCLUDED))
    assert not unknown, f"requests the SDK made to paths outside the route table: {unknown}"
