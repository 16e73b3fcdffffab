# SPDX-License-Identifier: Apache-2.0
"""A sandbox's ports from the CLI (docs/api.md, "Ports"): expose, unexpose,
ports and port-forward against a real airlockd and a real `base` guest
running `python3 -m http.server 8000`; auto_resume through a paused
sandbox; the counters and /metrics; and that the tunnel's nftables rules
opened nothing for the guest itself."""
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import time

import pytest

from apiutil import ListeningDaemon, free_port
from conftest import AIRLOCK, metrics, vmm_dir, wait_for

SERVER_PORT = 8000


def text(b):
    return b.decode(errors="replace")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One daemon for the module, with a TCP listener for port-forward over --host."""
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-ports"), free_port()).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture(scope="module")
def sid(daemon):
    """A base sandbox (python3) created by the CLI with --auto-resume, its
    http.server on port 8000 started as a background process."""
    env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_SOCKET"}
    p = subprocess.run([AIRLOCK, "--socket", daemon.socket, "create", "--template", "base", "--auto-resume",
                        "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=300)
    assert p.returncode == 0, text(p.stderr)
    sb = json.loads(p.stdout)
    assert sb["auto_resume"] is True and sb["ports"] == [], sb
    api = daemon.api
    r = api.request("POST", f"/v1/sandboxes/{sb['id']}/processes",
                    body={"cmd": ["python3", "-m", "http.server", str(SERVER_PORT)], "cwd": "/tmp",
                          "tag": "http-server"})
    assert r.status in (200, 201), r
    sb["server_pid"] = r.json["id"]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {SERVER_PORT}), 2)"

    def listening():
        return api.exec_ok(sb["id"], ["python3", "-c", probe])["exit_code"] == 0
    wait_for(listening, 120, "the guest's http.server to listen")
    yield sb["id"]
    api.delete(sb["id"])


class Forwarder:
    """`airlock port-forward` as a subprocess; its "Forwarding from" lines read."""

    def __init__(self, daemon, *args):
        self.proc = subprocess.Popen([AIRLOCK, "--socket", daemon.socket, "port-forward", *args],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.ports = {}  # remote port -> local port
        try:
            self._read_ports(args)
        except BaseException:
            self.proc.kill()  # no forwarder outlives a failed test
            self.proc.wait()
            raise

    def _read_ports(self, args):
        out = b""
        deadline = time.monotonic() + 30
        while out.count(b"\n") < len(args) - 1:
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, (out, self.stderr())
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                out += os.read(self.proc.stdout.fileno(), 4096)
        for line in out.splitlines():
            m = re.match(rb"Forwarding from 127\.0\.0\.1:(\d+) -> (\S+):(\d+)$", line.strip())
            assert m, line
            assert m.group(2).decode() == args[0]
            self.ports[int(m.group(3))] = int(m.group(1))

    def stderr(self):
        if self.proc.poll() is None:
            return ""
        return text(self.proc.stderr.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait(timeout=30)
        return rc, text(self.proc.stderr.read())


def http_get(port, path="/", timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def closed(s):
    """The forwarder closed s without a byte (a reset: it never read what we sent)."""
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


# ------------------------------------------------------------------ expose / ports / unexpose

def test_expose_ports_unexpose_round_trip(cli, sid):
    p = cli("expose", sid, str(SERVER_PORT))
    assert p.returncode == 0, text(p.stderr)
    out = text(p.stdout)
    assert f"{sid}:{SERVER_PORT} exposed, private" in out
    # This daemon runs no proxy: the CLI says how to reach the port instead.
    assert f"airlock port-forward {sid} LOCAL_PORT:{SERVER_PORT}" in out, out

    p = cli("ports", sid, "--json")
    assert p.returncode == 0, text(p.stderr)
    a = json.loads(p.stdout)
    assert a["proxy"] is False and a["auto_resume"] is True
    assert a["traffic_token"].startswith("att_")
    mine = [x for x in a["ports"] if x["port"] == SERVER_PORT]
    assert len(mine) == 1 and mine[0]["exposed"] and not mine[0]["public"] and mine[0]["url"] is None, a

    p = cli("expose", sid, str(SERVER_PORT), "--public", "--json")
    assert p.returncode == 0, text(p.stderr)
    assert [x["public"] for x in json.loads(p.stdout)["ports"] if x["port"] == SERVER_PORT] == [True]

    p = cli("ports", sid)
    assert p.returncode == 0, text(p.stderr)
    lines = text(p.stdout).splitlines()
    assert lines[0].split() == ["PORT", "EXPOSED", "PUBLIC", "REQUESTS", "BYTES_IN", "BYTES_OUT", "ERRORS", "URL"]
    row = next(x.split() for x in lines[1:] if x.split()[0] == str(SERVER_PORT))
    assert row[1:3] == ["yes", "yes"] and row[-1] == "-", lines
    assert any(x.startswith("traffic token") and a["traffic_token"] in x for x in lines), lines
    assert "auto-resume    on" in lines, lines

    # The sandbox's own JSON (inspect) carries the ports and auto_resume.
    p = cli("inspect", sid, "--json")
    sb = json.loads(p.stdout)
    assert sb["auto_resume"] is True and {"port": SERVER_PORT, "public": True, "url": None} in sb["ports"], sb

    p = cli("unexpose", sid, str(SERVER_PORT))
    assert p.returncode == 0 and text(p.stdout).strip() == f"{sid}:{SERVER_PORT} unexposed", text(p.stderr)
    p = cli("unexpose", sid, str(SERVER_PORT))
    assert p.returncode == 125 and "HTTP 404" in text(p.stderr), text(p.stderr)
    assert json.loads(cli("inspect", sid, "--json").stdout)["ports"] == []


@pytest.mark.parametrize("port", ["0", "70000", "80x", ""])
def test_expose_bad_ports_are_usage_errors(cli, sid, port):
    for verb in ("expose", "unexpose"):
        p = cli(verb, sid, port)
        assert p.returncode == 2 and "PORT must be a number 1-65535" in text(p.stderr), text(p.stderr)


def test_daemon_checks_the_port_too(api, sid):
    for port in ("0", "70000", "x"):
        r = api.request("PUT", f"/v1/sandboxes/{sid}/ports/{port}")
        assert r.status == 400 and "1-65535" in r.error_message, r


def test_expose_unknown_sandbox(cli):
    for args in (["expose", "sb-nosuchsandbox", "80"], ["ports", "sb-nosuchsandbox"],
                 ["port-forward", "sb-nosuchsandbox", "0:80"]):
        p = cli(*args)
        assert p.returncode == 125 and "HTTP 404" in text(p.stderr), (args, text(p.stderr))


def test_seventeenth_port_is_refused(cli, sid):
    ports = [str(9000 + i) for i in range(16)]
    try:
        for port in ports:
            p = cli("expose", sid, port)
            assert p.returncode == 0, text(p.stderr)
        p = cli("expose", sid, "9100")
        assert p.returncode == 125 and "HTTP 409" in text(p.stderr), text(p.stderr)
        # Exposing one again is not a new port.
        assert cli("expose", sid, ports[0]).returncode == 0
    finally:
        for port in ports:
            cli("unexpose", sid, port)
    assert json.loads(cli("ports", sid, "--json").stdout)["ports"] == [] or all(
        not x["exposed"] for x in json.loads(cli("ports", sid, "--json").stdout)["ports"])


# ------------------------------------------------------------------ port-forward

def test_port_forward_usage_errors(cli, sid):
    for spec, says in (("8080:0", "REMOTE_PORT"), ("70000:80", "LOCAL_PORT"), ("a b:1:80", "LOCAL_ADDR"),
                       ("[::1:1:80", "IPv6"), (":", "REMOTE_PORT")):
        p = cli("port-forward", sid, spec)
        assert p.returncode == 2 and says in text(p.stderr), (spec, text(p.stderr))
    p = cli("port-forward", sid)
    assert p.returncode == 2 and "port-forward takes" in text(p.stderr)


def test_port_forward_get_and_counters(daemon, api, cli, sid):
    policy_before = api.request("GET", f"/v1/sandboxes/{sid}/network").json["policy"]
    before = {x["port"]: x for x in json.loads(cli("ports", sid, "--json").stdout)["ports"]}
    f = Forwarder(daemon, sid, f"0:{SERVER_PORT}")
    try:
        local = f.ports[SERVER_PORT]
        assert local > 0
        status, body = http_get(local)
        assert status == 200 and b"Directory listing" in body, body[:200]
        status, _ = http_get(local, "/nothing-here")
        assert status == 404
    finally:
        rc, err = f.stop()
    assert rc == 0, err

    def counted():
        a = json.loads(cli("ports", sid, "--json").stdout)
        return next((x for x in a["ports"] if x["port"] == SERVER_PORT), None)
    old = before.get(SERVER_PORT, {"requests": 0, "bytes_in": 0, "bytes_out": 0})
    row = wait_for(lambda: (lambda x: x if x and x["requests"] >= old["requests"] + 2 else None)(counted()), 30,
                   "two requests counted on port 8000")
    assert row["bytes_in"] > old["bytes_in"] and row["bytes_out"] > old["bytes_out"], row
    m = metrics(api)
    series = [k for k in m if k.startswith("airlock_port_requests_total{") and f'sandbox="{sid}"' in k
              and f'port="{SERVER_PORT}"' in k]
    assert series and m[series[0]] >= 2, series
    assert any(k.startswith("airlock_port_bytes_out_total{") and f'sandbox="{sid}"' in k for k in m)

    # The guest saw the connections come from the namespace's side, 10.0.2.2.
    p = cli("logs", sid, _server_pid(api, sid))
    log = text(p.stdout) + text(p.stderr)
    assert re.search(r'^10\.0\.2\.2 - - \[.*\] "GET / HTTP/1\.1" 200', log, re.M), log[-2000:]
    # Its egress policy is what it was.
    assert api.request("GET", f"/v1/sandboxes/{sid}/network").json["policy"] == policy_before


def _server_pid(api, sid):
    procs = api.request("GET", f"/v1/sandboxes/{sid}/processes").json["processes"]
    return next(p["id"] for p in procs if p.get("tag") == "http-server")


def test_port_forward_survives_a_failed_tunnel(daemon, api, sid):
    """Nothing listens on 9: that client's connection is closed and stderr
    says why; the forwarder goes on serving (here its other forward)."""
    f = Forwarder(daemon, sid, "0:9", f"0:{SERVER_PORT}")
    try:
        with socket.create_connection(("127.0.0.1", f.ports[9]), timeout=60) as s:
            s.sendall(b"hello")
            assert closed(s)
        status, _ = http_get(f.ports[SERVER_PORT])
        assert status == 200
        assert f.proc.poll() is None
    finally:
        rc, err = f.stop()
    assert rc == 0
    assert "HTTP 502" in err and "closed the connection from 127.0.0.1:" in err and f"{sid}:9" in err, err


def test_port_forward_over_tcp_with_a_token(daemon, cli, sid):
    """--host and --token: the tunnel's upgrade carries the token; a tenant
    reaches its own sandbox's port (a busybox nc in a minimal guest)."""
    p = cli("token", "create", "--tenant", "ports-t", "--json")
    assert p.returncode == 0, text(p.stderr)
    tcp = ["--host", f"tcp://127.0.0.1:{daemon.port}", "--token", json.loads(p.stdout)["token"]]
    env = {k: v for k, v in os.environ.items() if k not in ("AIRLOCK_SOCKET", "AIRLOCK_HOST", "AIRLOCK_TOKEN")}

    def run(*args):
        return subprocess.run([AIRLOCK, *tcp, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, timeout=300)
    p = run("create")
    assert p.returncode == 0, text(p.stderr)
    tsid = text(p.stdout).strip()
    try:
        p = run("exec", "-d", tsid, "--", "sh", "-c", "while :; do echo hello-over-tcp | nc -l -p 7000; done")
        assert p.returncode == 0, text(p.stderr)
        f = subprocess.Popen([AIRLOCK, *tcp, "port-forward", tsid, "0:7000"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            line = f.stdout.readline()
            m = re.match(rb"Forwarding from 127\.0\.0\.1:(\d+) -> ", line)
            assert m, (line, f.stderr.read() if f.poll() is not None else b"")
            local = int(m.group(1))

            def greeted():
                with socket.create_connection(("127.0.0.1", local), timeout=60) as s:
                    got = b""
                    while True:
                        try:
                            chunk = s.recv(100)
                        except ConnectionResetError:
                            return False
                        if not chunk:
                            return b"hello-over-tcp" in got
                        got += chunk
            wait_for(greeted, 120, "the guest's nc to greet through the forward")
        finally:
            f.send_signal(signal.SIGINT)
            assert f.wait(timeout=30) == 0
        # The tenant's token does not see the operator's sandbox: 404 before anything listens.
        p = run("port-forward", sid, f"0:{SERVER_PORT}")
        assert p.returncode == 125 and "HTTP 404" in text(p.stderr) and b"Forwarding" not in p.stdout
    finally:
        run("rm", tsid)


def test_port_forward_auto_resumes_a_paused_sandbox(daemon, api, cli, sid):
    assert cli("timeout", sid, "--auto-resume", "on").returncode == 0
    p = cli("pause", sid)
    assert p.returncode == 0, text(p.stderr)
    assert api.get(sid).json["state"] == "paused"
    f = Forwarder(daemon, sid, f"0:{SERVER_PORT}")
    try:
        status, _ = http_get(f.ports[SERVER_PORT])
        assert status == 200
    finally:
        f.stop()
    assert api.get(sid).json["state"] == "running"
    r = api.request("GET", f"/v1/events?sandbox={sid}&type=sandbox.auto_resumed")
    events = [json.loads(x) for x in r.raw.decode().splitlines() if x.strip()]
    assert any(e["type"] == "sandbox.auto_resumed" for e in events), r.raw


def test_port_forward_to_a_paused_sandbox_without_auto_resume(daemon, api, cli, sid):
    p = cli("timeout", sid, "--auto-resume", "off")
    assert p.returncode == 0 and "auto-resume off" in text(p.stdout), text(p.stdout + p.stderr)
    assert api.get(sid).json["auto_resume"] is False
    assert cli("pause", sid).returncode == 0
    f = Forwarder(daemon, sid, f"0:{SERVER_PORT}")
    try:
        with socket.create_connection(("127.0.0.1", f.ports[SERVER_PORT]), timeout=60) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert closed(s)
        assert f.proc.poll() is None
    finally:
        rc, err = f.stop()
        assert cli("resume", sid).returncode == 0
        assert cli("timeout", sid, "--auto-resume", "on").returncode == 0
    assert "HTTP 409" in err and "auto_resume" in err, err
    assert api.get(sid).json["state"] == "running"


def test_timeout_auto_resume_usage(cli, sid):
    p = cli("timeout", sid, "--auto-resume", "maybe")
    assert p.returncode == 2 and "on or off" in text(p.stderr)
    p = cli("timeout", sid)
    assert p.returncode == 2 and "timeout takes a sandbox id" in text(p.stderr)


NS_LISTENER = """
import select, socket, sys, time
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", PORT)); t.listen(8)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", PORT))
print("ready", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    r, _, _ = select.select([t, u, sys.stdin], [], [], 1)
    if t in r:
        c, peer = t.accept(); print("tcp", peer, flush=True)
    if u in r:
        data, peer = u.recvfrom(100); print("udp", peer, data, flush=True)
    if sys.stdin in r:
        break
print("done", flush=True)
"""

GUEST_PROBE = """
import socket
for i in range(3):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"probe", ("10.0.2.2", PORT)); u.close()
s = socket.socket(); s.settimeout(5)
try:
    s.connect(("10.0.2.2", PORT)); s.sendall(b"probe"); print("tcp answer", s.recv(100))
except OSError as e:
    print("tcp", e)
"""


def sandbox_vmm_pid(daemon, sid):
    pids = [pid for pid in daemon.qemus() if sid in vmm_dir(pid)]
    assert len(pids) == 1, pids
    return pids[0]


def test_guest_cannot_reach_the_namespace_side(daemon, api, sid):
    """The rules that let the daemon's marked sockets reach the guest (and
    the guest's replies back) open nothing for the guest: a listener in the
    sandbox's namespace (TCP and UDP, a port that is neither DNS nor the
    gateway's) gets nothing the guest sends to 10.0.2.2 (TCP is the
    gateway's to decide, its policy denies; UDP is dropped and counted)."""
    port = 5555
    policy = api.request("GET", f"/v1/sandboxes/{sid}/network").json
    ns = f"/proc/{sandbox_vmm_pid(daemon, sid)}/ns/net"
    listener = subprocess.Popen(["nsenter", f"--net={ns}", "--", "/usr/bin/python3", "-c",
                                 NS_LISTENER.replace("PORT", str(port))],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert listener.stdout.readline().strip() == b"ready"
        r = api.exec_ok(sid, ["python3", "-c", GUEST_PROBE.replace("PORT", str(port))], timeout_s=60)
        assert r["exit_code"] == 0, (r["stdout"], r["stderr"])
    finally:
        out, _ = listener.communicate(b"stop\n", timeout=30)
    assert out.strip().splitlines() == [b"done"], out
    after = api.request("GET", f"/v1/sandboxes/{sid}/network").json
    assert after["policy"] == policy["policy"]
    assert after["dropped"]["packets"] >= policy["dropped"]["packets"] + 3, (policy, after)


# ------------------------------------------------------------------ a tunnel ends with its sandbox

def _open_tunnel(daemon, sid, port, timeout=30):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(daemon.socket)
    s.sendall(f"GET /v1/sandboxes/{sid}/ports/{port}/connect HTTP/1.1\r\nHost: x\r\n"
              "Connection: Upgrade\r\nUpgrade: airlock-tcp/1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        assert c, head
        head += c
    return s, head.split(b"\r\n")[0]


def test_deleting_a_sandbox_hangs_up_its_tunnels(daemon, api):
    """A guest server that never closes (and a client that never does):
    the tunnel must still end when the sandbox is deleted, at once, not
    after the relay's idle hour."""
    sb = api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    victim = sb["id"]
    try:
        r = api.request("POST", f"/v1/sandboxes/{victim}/processes",
                        body={"cmd": ["sh", "-c", "while true; do nc -l -p 7000; done"], "tag": "holder"})
        assert r.status == 201, r
        status = None
        for _ in range(60):
            s, status = _open_tunnel(daemon, victim, 7000)
            if status.endswith(b"101 Switching Protocols"):
                break
            s.close()
            time.sleep(0.5)
        assert status.endswith(b"101 Switching Protocols"), status
        s.sendall(b"held\n")
        assert api.request("DELETE", f"/v1/sandboxes/{victim}").status == 200
        # Without the hang-up the relay waits an hour for a guest that is gone.
        s.settimeout(60)
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
        except socket.timeout:
            pytest.fail("the tunnel outlived its deleted sandbox")
        finally:
            s.close()
    finally:
        api.request("DELETE", f"/v1/sandboxes/{victim}")
