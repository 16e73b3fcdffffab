# SPDX-License-Identifier: Apache-2.0
"""The world bench/egress measures in, and its tiny HTTP server and clients.

Built on the fake internet of the network tests (tests/integration/fakenet.py:
alt-host-PID, where airlock-egress runs, and alt-inet-PID, the "internet"),
plus three namespaces of its own, as tests/integration/test_egress_standalone.py
builds them (copied here: that file is a test, not a library):

    aeb-gst-PID   the "guest": GUEST_IP/24 on a veth, default route via GATEWAY_IP
    aeb-sbx-PID   the "sandbox" namespace: GATEWAY_IP/24 on the other end, the
                  nftables redirect airlockd installs (DNS to :53, every other
                  TCP connection to :EGRESS_PORT), no forwarding; the three
                  listeners airlock-egress serves are created there by us and
                  handed over with SCM_RIGHTS, as airlockd does
    aeb-dir-PID   the baseline client: DIRECT_IP/24 on a veth whose other end
                  is in alt-host (DIRECT_GW), which forwards: the same two links
                  as the gateway's path (client -> alt-host -> internet), a
                  kernel router where the gateway would be

and a server of our own in alt-inet on BENCH_IP:80 (bench.allowed.test in the
fake DNS): `GET /bytes/N` sends N bytes with sendfile(2) from a memfd, any
other path a 3-byte body, always `Connection: close`. fakenet's own server
(Python, every byte hashed) would be what a throughput figure measured.

Nothing leaves these five namespaces; every address is a documentation or
private one that exists only inside them.

This file is also copied into the guest by bench/egress (`--serve`,
`--latency`): the part above "the host's world" needs nothing but the
standard library.
"""
import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

BENCH_NAME = "bench.allowed.test"
BENCH_IP = "192.0.2.30"
HTTP_PORT = 80
HTTP_HEAD_MAX = 16 * 1024
PATTERN_BYTES = 16 * 1024 * 1024   # the memfd /bytes/N sends from, over and over
SMALL_BODY = b"ok\n"


# ------------------------------------------------------------ the server

def _pattern_fd():
    fd = os.memfd_create("egress-bench-pattern")
    block = bytes(range(256)) * 4096  # 1 MiB
    for _ in range(PATTERN_BYTES // len(block)):
        os.write(fd, block)
    return fd


def _read_head(c):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(4096)
        if not chunk or len(data) > HTTP_HEAD_MAX:
            return None
        data += chunk
    return data.split(b"\r\n", 1)[0].decode("latin-1")


def _serve_one(c, pattern_fd):
    with c:
        c.settimeout(60)
        try:
            line = _read_head(c)
            if line is None:
                return
            parts = line.split(" ")
            path = parts[1] if len(parts) == 3 else "/"
            n = int(path[len("/bytes/"):]) if path.startswith("/bytes/") else None
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n"
            if n is None:
                c.sendall(f"{head}Content-Length: {len(SMALL_BODY)}\r\n\r\n".encode() + SMALL_BODY)
                return
            c.sendall(f"{head}Content-Length: {n}\r\n\r\n".encode())
            c.settimeout(None)
            sent = 0
            while sent < n:
                off = sent % PATTERN_BYTES
                sent += os.sendfile(c.fileno(), pattern_fd, off, min(n - sent, PATTERN_BYTES - off))
        except (OSError, ValueError):
            pass


def serve(ip, port):
    """Serves forever (a thread per connection); prints "ready" once listening."""
    pattern_fd = _pattern_fd()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(1024)
    print("ready", flush=True)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=_serve_one, args=(c, pattern_fd), daemon=True).start()


# ------------------------------------------------------------ the clients

def _read_to_eof(s):
    data = bytearray()
    while True:
        try:
            chunk = s.recv(65536)
        except (ssl.SSLEOFError, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def request_once(sock, addr, host, path="/", tls=None):
    """Connects the (fresh, unconnected) socket to addr, sends one GET with
    Connection: close, reads to EOF, closes; tls is an SSLContext or None.
    Returns the seconds it took. Raises if the answer is not a 200."""
    t0 = time.monotonic()
    s = sock
    try:
        if tls is not None:
            s = tls.wrap_socket(sock, server_hostname=host)
        s.connect(addr)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: bench\r\nConnection: close\r\n\r\n".encode())
        resp = _read_to_eof(s)
    finally:
        s.close()
    dt = time.monotonic() - t0
    if not resp.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET {path} from {host} at {addr[0]}:{addr[1]} answered {resp[:200]!r}")
    return dt


def read_body_once(sock, addr, host, n):
    """GET /bytes/N with a 1 MiB recv_into buffer; returns (bytes of body, seconds)."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    t0 = time.monotonic()
    with sock:
        sock.connect(addr)
        sock.sendall(f"GET /bytes/{n} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) <= HTTP_HEAD_MAX:
            got = sock.recv_into(view)
            if not got:
                break
            head += view[:got]
        total = len(head) - head.find(b"\r\n\r\n") - 4 if b"\r\n\r\n" in head else 0
        while True:
            got = sock.recv_into(view)
            if not got:
                break
            total += got
    return total, time.monotonic() - t0


def tcp_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(30)
    return s


def tls_context(cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    return ctx


def latency_main(args):
    """--latency: n requests one after another from here (the guest); prints
    the seconds of each as a JSON list."""
    addr = (socket.gethostbyname(args.host), args.port)
    tls = tls_context(args.cafile) if args.tls else None
    out = [request_once(tcp_socket(), addr, args.host, tls=tls) for _ in range(args.n)]
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description="bench/egress's server and client (see bench/egress)")
    ap.add_argument("--serve", nargs=2, metavar=("IP", "PORT"))
    ap.add_argument("--latency", action="store_true")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int, default=HTTP_PORT)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--cafile")
    ap.add_argument("-n", type=int, default=50)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
    elif args.latency:
        latency_main(args)
    else:
        ap.error("--serve or --latency")


# ------------------------------------------------------------ the host's world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
EGRESS = os.path.join(BUILD, "airlock-egress")
PYTHON = "/usr/bin/python3"

NS_PREFIX = "aeb-"
TAG = str(os.getpid())
GUEST_IP, GATEWAY_IP = "10.0.2.15", "10.0.2.2"
DIRECT_IP, DIRECT_GW = "10.0.3.15", "10.0.3.2"
EGRESS_PORT = 15001
CONTROL_TIMEOUT_S = 10

NFT_RULES = f"""
table inet airlock {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        iifname "veth-sbx" udp dport 53 redirect to :53
        iifname "veth-sbx" tcp dport 53 redirect to :53
        iifname "veth-sbx" meta l4proto tcp redirect to :{EGRESS_PORT}
    }}
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname "veth-sbx" meta nfproto ipv6 drop
    }}
}}
"""


def _fakenet():
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import fakenet
    return fakenet


def run(*cmd, ns=None, input=None):
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    r = subprocess.run(full, input=input, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} exited with {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def _ns_names(tag):
    return [f"{NS_PREFIX}{kind}-{tag}" for kind in ("gst", "sbx", "dir")]


def remove_stale_namespaces():
    """Deletes aeb-*-PID namespaces of runs whose process is gone (a crashed
    or killed earlier run); fakenet.remove_stale_namespaces() does its own."""
    fn = _fakenet()
    removed = []
    for ns in fn.netns_list():
        parts = ns.split("-")
        if ns.startswith(NS_PREFIX) and len(parts) == 3 and parts[2].isdigit() and not fn._pid_alive(int(parts[2])):
            fn._delete_ns(ns)
            removed.append(ns)
    return removed


class Control:
    """airlockd's end of the control channel (as in test_egress_standalone.py)."""

    def __init__(self, sock):
        self.sock = sock
        self.seq = 0
        self.cond = threading.Condition()
        self.messages = []  # every reply, only the first few events
        self.events = 0
        self.allowed = 0     # network.allow events
        self.closed = False
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 512 * 1024, 4)
            except OSError:
                data = b""
            for fd in fds:
                os.close(fd)
            with self.cond:
                if not data:
                    self.closed = True
                    self.cond.notify_all()
                    return
                m = json.loads(data)
                if m.get("op") == "event":
                    self.events += 1
                    self.allowed += m.get("type") == "network.allow"
                    if self.events > 64:
                        continue
                self.messages.append(m)
                self.cond.notify_all()

    def wait_for(self, pred, what):
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        with self.cond:
            while True:
                for m in self.messages:
                    if pred(m):
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise RuntimeError(f"airlock-egress: no {what} within {CONTROL_TIMEOUT_S} s; "
                                       f"got {self.messages[-5:]}")
                self.cond.wait(left)

    def wait_allowed(self, n, timeout_s=5):
        """The count of network.allow events once it reaches n (or after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.allowed < n and not self.closed and time.monotonic() < deadline:
                self.cond.wait(0.05)
            return self.allowed

    def request(self, msg, fds=()):
        self.seq += 1
        seq = self.seq
        socket.send_fds(self.sock, [json.dumps(dict(msg, seq=seq)).encode()], list(fds))
        return self.wait_for(lambda m: m.get("op") in ("ack", "nack") and m.get("seq") == seq,
                             f"reply to {msg['op']} #{seq}")


class World:
    """FakeNet + the three namespaces + airlock-egress + the bench server.
    start() builds everything; close() removes everything (idempotent), also
    after a failed start()."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.net = None
        self.fn = None
        self.ns_guest, self.ns_sbx, self.ns_direct = _ns_names(TAG)
        self.egress = None
        self.ctl = None
        self.server = None
        self.created = []

    # -------------------------------------------------------- building

    def start_fakenet(self):
        self.fn = _fakenet()
        remove_stale_namespaces()
        # The bench server's name, for the fake DNS (read when the server starts).
        self.fn.RECORDS[BENCH_NAME] = [("A", BENCH_IP)]
        self.net = self.fn.FakeNet().start()
        run("ip", "-n", self.net.inet_ns, "addr", "add", f"{BENCH_IP}/32", "dev", "lo")
        log = open(os.path.join(self.log_dir, "server.log"), "wb")
        self.server = subprocess.Popen(self.net.inet_argv([PYTHON, os.path.abspath(__file__), "--serve", BENCH_IP,
                                                           str(HTTP_PORT)]),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                       start_new_session=True)
        log.close()
        line = self.server.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the bench server did not start: {line!r}; see {log.name}")
        return self

    def start_gateway_world(self, policy):
        self._make_namespaces()
        self._start_egress()
        listeners = [
            self.socket_in(self.ns_sbx, bind=(GATEWAY_IP, EGRESS_PORT), listen=True),
            self.socket_in(self.ns_sbx, socket.SOCK_DGRAM, bind=(GATEWAY_IP, 53)),
            self.socket_in(self.ns_sbx, bind=(GATEWAY_IP, 53), listen=True),
        ]
        try:
            reply = self.ctl.request({"op": "add", "sandbox": "sb-bench", "tenant": "bench", "policy": policy},
                                     [s.fileno() for s in listeners])
        finally:
            for s in listeners:
                s.close()
        if reply["op"] != "ack":
            raise RuntimeError(f"airlock-egress refused the sandbox: {reply}")

    def _make_namespaces(self):
        host = self.net.host_ns
        for ns in (self.ns_guest, self.ns_sbx, self.ns_direct):
            run("ip", "netns", "add", ns)
            self.created.append(ns)
            run("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
                "net.ipv4.ip_forward=0", ns=ns)
            run("ip", "link", "set", "lo", "up", ns=ns)
        # guest <-> sandbox, with the daemon's redirect
        run("ip", "link", "add", "veth-cli", "netns", self.ns_guest, "type", "veth", "peer", "name", "veth-sbx",
            "netns", self.ns_sbx)
        run("ip", "addr", "add", f"{GUEST_IP}/24", "dev", "veth-cli", ns=self.ns_guest)
        run("ip", "link", "set", "veth-cli", "up", ns=self.ns_guest)
        run("ip", "route", "add", "default", "via", GATEWAY_IP, ns=self.ns_guest)
        run("ip", "addr", "add", f"{GATEWAY_IP}/24", "dev", "veth-sbx", ns=self.ns_sbx)
        run("ip", "link", "set", "veth-sbx", "up", ns=self.ns_sbx)
        run("nft", "-f", "-", ns=self.ns_sbx, input=NFT_RULES)
        # direct client <-> alt-host, which routes it to the internet (whose
        # default route leads back to alt-host)
        run("ip", "link", "add", "eth0", "netns", self.ns_direct, "type", "veth", "peer", "name", "dir0",
            "netns", host)
        run("ip", "addr", "add", f"{DIRECT_IP}/24", "dev", "eth0", ns=self.ns_direct)
        run("ip", "link", "set", "eth0", "up", ns=self.ns_direct)
        run("ip", "route", "add", "default", "via", DIRECT_GW, ns=self.ns_direct)
        run("ip", "addr", "add", f"{DIRECT_GW}/24", "dev", "dir0", ns=host)
        run("ip", "link", "set", "dir0", "up", ns=host)
        run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1", ns=host)

    def _start_egress(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = open(os.path.join(self.log_dir, "egress.log"), "ab")
        # As airlockd runs it: unprivileged (nobody), in the host namespace.
        cmd = self.net.host_argv(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs",
                                  EGRESS, "--control-fd", str(theirs.fileno()), "--resolver", self.net.resolver,
                                  "--public-cidr", "192.0.2.0/24", "--connect-timeout-ms", "2000"])
        self.egress = subprocess.Popen(cmd, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=log, start_new_session=True)
        theirs.close()
        log.close()
        self.ctl = Control(ours)
        ready = self.ctl.wait_for(lambda m: True, "ready message")
        if ready != {"op": "ready", "version": 1}:
            raise RuntimeError(f"airlock-egress said {ready} first")

    def socket_in(self, ns, kind=socket.SOCK_STREAM, bind=None, listen=False):
        def make():
            s = socket.socket(socket.AF_INET, kind)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if bind:
                s.bind(bind)
            if listen:
                s.listen(1024)
            return s
        return self.fn.call_in_netns(ns, make)

    def client_sockets(self, ns, n):
        """n fresh TCP sockets (TCP_NODELAY) inside namespace ns."""
        return self.fn.call_in_netns(ns, lambda: [tcp_socket() for _ in range(n)])

    # -------------------------------------------------------- removing

    def close_gateway_world(self):
        """Stops airlock-egress and deletes the three namespaces (the fake
        internet stays)."""
        if self.ctl is not None:
            try:
                self.ctl.sock.close()  # the gateway exits when its control socket closes
            except OSError:
                pass
            self.ctl = None
        if self.egress is not None:
            try:
                self.egress.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.egress.pid, 9)
                self.egress.wait()
            self.egress = None
        for ns in self.created:
            self.fn._delete_ns(ns)
        self.created = []
        if self.net is not None and not self.net.closed:
            subprocess.run(self.net.host_argv(["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"]),
                           capture_output=True)

    def close(self):
        try:
            self.close_gateway_world()
        finally:
            if self.server is not None:
                try:
                    os.killpg(self.server.pid, 9)
                except ProcessLookupError:
                    pass
                self.server.wait()
                self.server.stdout.close()
                self.server = None
            if self.net is not None:
                self.net.teardown()


if __name__ == "__main__":
    main()
