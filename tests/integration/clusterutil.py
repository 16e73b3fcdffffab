# SPDX-License-Identifier: Apache-2.0
"""A whole Airlock cluster on one machine (docs/cluster.md), for the cluster
tests and bench/cluster:

    PostgreSQL     pgserver.PgServer (private, 127.0.0.1 and a unix socket)
    N airlockd     each in a network namespace of its own (alc<pid>n<k>), with
                   a veth pair to this namespace: 10.<net>.<k>.1 here,
                   10.<net>.<k>.2 the node's, whose TCP API listens there
                   (<net> from the pid: two runs at once do not meet);
                   each its own state dir; PostgreSQL over its unix socket
    M airlock-api  fronts here, on 127.0.0.1 at free ports, each with an
                   operator socket
    a shared snapshot store (a directory) and a cluster key

    c = Cluster(tmp_path, nodes=3, fronts=2).start()
    tok = c.token("acme")
    r = c.http(0, "POST", "/v1/sandboxes", {"template": "minimal"}, token=tok)
    c.kill_node(1); c.start_node(1); c.stop()

Nothing but loopback, the veth pairs and the namespaces made here carries a
packet; stop() removes them.
"""
import base64
import hashlib
import hmac
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time

from conftest import BUILD, Daemon, kill_pids, qemu_processes, vmm_dir
from pgserver import PgServer, _free_port

FRONT = os.path.join(BUILD, "airlock-api")
NODE_PORT = 7070
NET = 100 + os.getpid() % 150  # 10.NET.k.0/30: a run's own
LEASE_S = 4
GRACE_S = 2


def _run(*argv):
    subprocess.run(argv, check=True, capture_output=True)


class Response:
    def __init__(self, status, body, headers):
        self.status, self.body, self.headers = status, body, headers
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


class Node:
    def __init__(self, cluster, k):
        self.k = k
        self.name = f"n{k}"
        self.ns = f"alc{os.getpid() % 100000}n{k}"
        self.veth = f"alc{os.getpid() % 100000}v{k}"
        self.ip = f"10.{NET}.{k}.2"
        self.url = f"http://{self.ip}:{NODE_PORT}"
        base = os.path.join(cluster.base, self.name)
        os.makedirs(base, exist_ok=True)
        self.daemon = Daemon(base, netns=self.ns, extra_args=[
            "--listen", f"{self.ip}:{NODE_PORT}", "--cluster-db", cluster.pg.socket_conninfo,
            "--cluster-key-file", cluster.key_path, "--node-name", self.name, "--node-url", self.url,
            "--shared-store", cluster.store, "--node-lease-s", str(LEASE_S),
            # Hosts of their own would have cgroup trees of their own: here
            # the killed node's VMs still hold theirs when their sandboxes
            # come back elsewhere under the same ids.
            "--cgroup-parent", f"airlock-{self.ns}"])

    def net_up(self):
        _run("ip", "netns", "add", self.ns)
        _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        _run("ip", "addr", "add", f"10.{NET}.{self.k}.1/30", "dev", self.veth)
        _run("ip", "link", "set", self.veth, "up")
        _run("ip", "-n", self.ns, "addr", "add", f"{self.ip}/30", "dev", "eth0")
        _run("ip", "-n", self.ns, "link", "set", "eth0", "up")
        _run("ip", "-n", self.ns, "link", "set", "lo", "up")

    def net_down(self):
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


class Front:
    def __init__(self, cluster, i):
        self.i = i
        self.port = _free_port()
        self.socket = os.path.join(cluster.base, f"front{i}.sock")
        self.log_path = os.path.join(cluster.base, f"front{i}.log")
        self.argv = [FRONT, "--cluster-db", cluster.pg.conninfo, "--cluster-key-file", cluster.key_path,
                     "--listen", f"127.0.0.1:{self.port}", "--socket", self.socket,
                     "--place-k", str(cluster.place_k), "--lost-grace-s", str(GRACE_S),
                     "--reaper-interval-ms", "500"]
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"airlock-api exited: {self.log()}"
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"airlock-api did not answer /healthz: {self.log()}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()[-4000:]
        except OSError:
            return ""


class Cluster:
    def __init__(self, base, nodes=3, fronts=2, place_k=3):
        self.base = str(base)
        self.place_k = place_k
        self.pg = PgServer()
        self.key_path = os.path.join(self.base, "cluster.key")
        self.store = os.path.join(self.base, "store")
        self.n_nodes, self.n_fronts = nodes, fronts
        self.nodes, self.fronts = [], []

    def start(self):
        self.pg.start()
        with open(os.open(self.key_path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(32))
        self.key = open(self.key_path, "rb").read()
        os.makedirs(self.store, exist_ok=True)
        self.nodes = [Node(self, k) for k in range(1, self.n_nodes + 1)]
        for n in self.nodes:
            n.net_up()
            n.daemon.start()
        self.fronts = [Front(self, i).start() for i in range(self.n_fronts)]
        self.wait_nodes_up(len(self.nodes))
        return self

    def stop(self):
        for f in self.fronts:
            f.kill()
        for n in self.nodes:
            try:
                n.daemon.cleanup()
            except Exception:
                pass
            if n.daemon.proc and n.daemon.proc.poll() is None:
                n.daemon.proc.kill()
            kill_pids(qemu_processes(n.daemon.state_dir))
            n.net_down()
        self.pg.stop()

    # ---- state ----

    def sql(self, statement):
        return self.pg.sql(statement)

    def node_rows(self):
        rows = {}
        for line in self.sql("SELECT name, epoch, state, lease_until > now(), memory_free_mib, sandboxes "
                             "FROM airlock_nodes ORDER BY name"):
            name, epoch, state, live, free, sbs = line.split("|")
            rows[name] = {"epoch": int(epoch), "state": state, "live": live == "t", "memory_free_mib": int(free),
                          "sandboxes": int(sbs)}
        return rows

    def row(self, sid):
        lines = self.sql(f"SELECT coalesce(node, ''), state, coalesce(snapshot, '') FROM airlock_sandboxes "
                         f"WHERE id = '{sid}'")
        if not lines:
            return None
        node, state, snap = lines[0].split("|")
        return {"node": node or None, "state": state, "snapshot": snap or None}

    def events(self, sid):
        return [line.split("|") for line in self.sql(
            f"SELECT type, coalesce(node, '') FROM airlock_events WHERE sandbox = '{sid}' ORDER BY seq")]

    def debug(self):
        """What a failed wait shows: the nodes, the rows, the fronts' logs."""
        rows = self.sql("SELECT id, coalesce(node, '-'), state, coalesce(snapshot, '-') FROM airlock_sandboxes "
                        "WHERE state != 'deleted'")
        return (f"nodes {self.node_rows()}\nrows {rows}\n" +
                "".join(f"---- front {f.i} ----\n{f.log()[-1500:]}\n" for f in self.fronts))

    def wait_nodes_up(self, count, timeout_s=30):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            up = [n for n, r in self.node_rows().items() if r["state"] == "up" and r["live"]]
            if len(up) >= count:
                return up
            time.sleep(0.2)
        raise AssertionError(f"not {count} nodes up: {self.node_rows()}")

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    def vms(self, name, sid=None):
        """The QEMU processes of a node (of one sandbox with sid)."""
        state = self.node(name).daemon.state_dir
        return [pid for pid in qemu_processes(state) if sid is None or f"/sandboxes/{sid}/" in vmm_dir(pid) + "/"]

    # ---- processes ----

    def kill_node(self, name):
        """kill -9 of the node's airlockd (its VMs keep running, as after a crash)."""
        d = self.node(name).daemon
        d.proc.kill()
        d.proc.wait()

    def start_node(self, name):
        self.node(name).daemon.start()

    # ---- HTTP ----

    def token(self, tenant):
        r = self.admin(0, "POST", "/v1/tokens", {"tenant": tenant, "description": "cluster test"})
        assert r.status == 201, r
        return r.json["token"]

    def admin(self, i, method, path, body=None):
        return _http_unix(self.fronts[i].socket, method, path, body)

    def http(self, i, method, path, body=None, token=None, headers=None, timeout=120, raw=None):
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        return _http_tcp("127.0.0.1", self.fronts[i].port, method, path, body, h, timeout, raw)

    def delegation(self, principal, exp_s=60, key=None):
        value = f"{principal};exp={int(time.time()) + exp_s}"
        mac = hmac.new(key or self.key, b"airlock-cluster-v1\n" + value.encode(), hashlib.sha256).digest()
        return {"X-Airlock-Principal": value,
                "Authorization": "Bearer acl_" + base64.urlsafe_b64encode(mac).decode().rstrip("=")}

    def node_http(self, name, method, path, body=None, principal="operator", headers=None, timeout=120, raw=None):
        """A request straight to a node, with a delegation as a front makes
        one (from the node's namespace: nothing else routes there)."""
        n = self.node(name)
        h = {**self.delegation(principal), **(headers or {})} if principal else dict(headers or {})
        return _http_tcp(n.ip, NODE_PORT, method, path, body, h, timeout, raw)


def _http_tcp(host, port, method, path, body, headers, timeout, raw=None):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    return _send(c, method, path, body, headers, raw)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def _http_unix(path, method, url, body):
    return _send(_UnixConnection(path), method, url, body, {})


def _send(c, method, path, body, headers, raw=None):
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        headers = {**headers, "Content-Type": "application/json"}
    try:
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        return Response(r.status, r.read(), dict(r.getheaders()))
    finally:
        c.close()
