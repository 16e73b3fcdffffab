# SPDX-License-Identifier: Apache-2.0
"""The world bench/egress measures in, and its tiny HTTP server and clients.

Built on the fake internet of the network tests (tests/integration/fakenet.py:
alt-host-PID, where airlock-egress runs, and alt-inet-PID, the "internet"),
plus three namespaces of its own, made with tests/integration/egress_harness.py
as the egress tests make theirs (which also runs airlock-egress and plays
airlockd's part):

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

and a server of our own in alt-inet on BENCH_IP (bench.allowed.test and
bound.allowed.test in the fake DNS), HTTP on :80 and HTTPS on :443 (a
certificate for both names from a bench CA made with the openssl CLI, which
airlock-egress trusts with --trust-ca): `GET /bytes/N` sends N bytes (HTTP:
sendfile(2) from a memfd; HTTPS: from memory), `POST /upload` with a
Content-Length reads the body and drops it, any other path a 3-byte body,
always `Connection: close`. fakenet's own server (Python, every byte hashed)
would be what a throughput figure measured.

airlock-egress is sent an Airlock CA (openssl CLI too) and a secret binding
for bound.allowed.test (a placeholder in X-Api-Key is replaced): TLS to that
name is intercepted, TLS to bench.allowed.test spliced (the policy says
"tls":"passthrough": since issue 17 inspection is the default).

Nothing leaves these five namespaces; every address is a documentation or
private one that exists only inside them.

This file is also copied into the guest by bench/egress (`--serve`,
`--latency`): the part above "the host's world" needs nothing but the
standard library, and run as a script the file stops there.
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
BOUND_NAME = "bound.allowed.test"  # the same server; a secret binding names it, so the gateway intercepts
BENCH_IP = "192.0.2.30"
HTTP_PORT = 80
HTTPS_PORT = 443
HTTP_HEAD_MAX = 16 * 1024
PATTERN_BYTES = 16 * 1024 * 1024   # the memfd /bytes/N sends from, over and over
SMALL_BODY = b"ok\n"


# ------------------------------------------------------------ the server

def pattern_memfd():
    fd = os.memfd_create("egress-bench-pattern")
    block = bytes(range(256)) * 4096  # 1 MiB
    for _ in range(PATTERN_BYTES // len(block)):
        os.write(fd, block)
    return fd


def _read_head(c):
    """The request line, the header fields (lower-case names) and the bytes
    read after the head; None if the client ended first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(4096)
        if not chunk or len(data) > HTTP_HEAD_MAX:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    fields = dict((k.strip().lower(), v.strip()) for k, v in (h.split(":", 1) for h in lines[1:] if ":" in h))
    return lines[0], fields, rest


def _discard(c, n, got):
    """Reads and drops the rest of an n-byte body (got bytes already read)."""
    buf = bytearray(1 << 20)
    while got < n:
        k = c.recv_into(buf, min(len(buf), n - got))
        if not k:
            break
        got += k
    return got


def _send_bytes(c, n, pattern_fd, tls):
    if tls:
        # No sendfile through TLS: the same pattern, from memory.
        view = memoryview(_pattern_bytes(pattern_fd))
        sent = 0
        while sent < n:
            off = sent % PATTERN_BYTES
            k = min(n - sent, PATTERN_BYTES - off)
            c.sendall(view[off:off + k])
            sent += k
        return
    c.settimeout(None)
    sent = 0
    while sent < n:
        off = sent % PATTERN_BYTES
        sent += os.sendfile(c.fileno(), pattern_fd, off, min(n - sent, PATTERN_BYTES - off))


_PATTERN = {}


def _pattern_bytes(fd):
    if "b" not in _PATTERN:
        _PATTERN["b"] = os.pread(fd, PATTERN_BYTES, 0)
    return _PATTERN["b"]


def _serve_one(c, pattern_fd, tls=None):
    with c:
        c.settimeout(60)
        try:
            s = tls.wrap_socket(c, server_side=True) if tls else c
            req = _read_head(s)
            if req is None:
                return
            line, fields, rest = req
            parts = line.split(" ")
            method, path = (parts[0], parts[1]) if len(parts) == 3 else ("GET", "/")
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n"
            if method in ("POST", "PUT") and path == "/upload":
                n = int(fields.get("content-length", "0"))
                body = b"got %d\n" % _discard(s, n, len(rest))
                s.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
                return
            n = int(path[len("/bytes/"):]) if path.startswith("/bytes/") else None
            if n is None:
                s.sendall(f"{head}Content-Length: {len(SMALL_BODY)}\r\n\r\n".encode() + SMALL_BODY)
                return
            s.sendall(f"{head}Content-Length: {n}\r\n\r\n".encode())
            _send_bytes(s, n, pattern_fd, tls is not None)
        except (OSError, ValueError):
            pass


def _accept_loop(ls, pattern_fd, tls):
    while True:
        c, _ = ls.accept()
        threading.Thread(target=_serve_one, args=(c, pattern_fd, tls), daemon=True).start()


def _listen(ip, port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((ip, port))
    ls.listen(1024)
    return ls


def serve(ip, port, tls_port=None, cert=None, key=None):
    """Serves forever (a thread per connection): HTTP on port, and HTTPS on
    tls_port with cert and key if given; prints "ready" once listening."""
    pattern_fd = pattern_memfd()
    ls = _listen(ip, port)
    if tls_port:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["http/1.1"])
        threading.Thread(target=_accept_loop, args=(_listen(ip, tls_port), pattern_fd, ctx), daemon=True).start()
    print("ready", flush=True)
    _accept_loop(ls, pattern_fd, None)


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


def _head_lines(headers):
    return "".join(f"{k}: {v}\r\n" for k, v in headers)


def request_once(sock, addr, host, path="/", tls=None, headers=()):
    """Connects the (fresh, unconnected) socket to addr, sends one GET with
    Connection: close, reads to EOF, closes; tls is an SSLContext or None.
    Returns the seconds it took. Raises if the answer is not a 200."""
    t0 = time.monotonic()
    s = sock
    try:
        if tls is not None:
            s = tls.wrap_socket(sock, server_hostname=host)
        s.connect(addr)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: bench\r\n{_head_lines(headers)}"
                  "Connection: close\r\n\r\n".encode())
        resp = _read_to_eof(s)
    finally:
        s.close()
    dt = time.monotonic() - t0
    if not resp.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET {path} from {host} at {addr[0]}:{addr[1]} answered {resp[:200]!r}")
    return dt


def read_body_once(sock, addr, host, n, tls=None, headers=()):
    """GET /bytes/N with a 1 MiB recv_into buffer (through TLS if tls, an
    SSLContext); returns (bytes of body, seconds)."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    t0 = time.monotonic()
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname=host)
    with sock:
        sock.connect(addr)
        sock.sendall(f"GET /bytes/{n} HTTP/1.1\r\nHost: {host}\r\n{_head_lines(headers)}"
                     "Connection: close\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) <= HTTP_HEAD_MAX:
            got = sock.recv_into(view)
            if not got:
                break
            head += view[:got]
        total = len(head) - head.find(b"\r\n\r\n") - 4 if b"\r\n\r\n" in head else 0
        while True:
            try:
                got = sock.recv_into(view)
            except ssl.SSLEOFError:
                break
            if not got:
                break
            total += got
    return total, time.monotonic() - t0


def upload_once(sock, addr, host, n, pattern_fd):
    """POST /upload of n bytes (Content-Length; sendfile(2) from pattern_fd,
    a PATTERN_BYTES memfd); returns (bytes the server read, seconds)."""
    t0 = time.monotonic()
    with sock:
        sock.connect(addr)
        sock.settimeout(None)
        sock.sendall(f"POST /upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: {n}\r\n"
                     "Connection: close\r\n\r\n".encode())
        sent = 0
        while sent < n:
            off = sent % PATTERN_BYTES
            sent += os.sendfile(sock.fileno(), pattern_fd, off, min(n - sent, PATTERN_BYTES - off))
        resp = _read_to_eof(sock)
    dt = time.monotonic() - t0
    body = resp.split(b"\r\n\r\n", 1)[-1]
    if not resp.startswith(b"HTTP/1.1 200") or not body.startswith(b"got "):
        raise RuntimeError(f"POST /upload to {host} at {addr[0]}:{addr[1]} answered {resp[:200]!r}")
    return int(body[4:]), dt


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
    ap.add_argument("--tls-serve", nargs=3, metavar=("PORT", "CERT", "KEY"), help="with --serve: HTTPS too")
    ap.add_argument("--latency", action="store_true")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int, default=HTTP_PORT)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--cafile")
    ap.add_argument("-n", type=int, default=50)
    args = ap.parse_args()
    if args.serve:
        tls = args.tls_serve or (None, None, None)
        serve(args.serve[0], int(args.serve[1]), int(tls[0]) if tls[0] else None, tls[1], tls[2])
    elif args.latency:
        latency_main(args)
    else:
        ap.error("--serve or --latency")


if __name__ == "__main__":
    # The bench server (in the fake internet) and the guest's copy stop here:
    # what follows, the host's world, needs tests/integration.
    sys.exit(main())


# ------------------------------------------------------------ the host's world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import egress_harness as eh  # noqa: E402
import fakenet as fn  # noqa: E402

EGRESS = eh.EGRESS
PYTHON = "/usr/bin/python3"

NS_PREFIX = "aeb-"
DIRECT_IP, DIRECT_GW = "10.0.3.15", "10.0.3.2"
CONTROL_TIMEOUT_S = 10

# The secret bound to BOUND_NAME: the client sends the placeholder in a
# header, the gateway puts the value there (a header substitution).
PLACEHOLDER = "airlock-ph-" + "5e" * 32
SECRET_VALUE = "bench-secret-value-0123456789"
SECRET_HEADER = ("X-Api-Key", PLACEHOLDER)
BINDING = {"secret": "bench-key", "placeholder": PLACEHOLDER, "value": SECRET_VALUE, "hosts": [BOUND_NAME],
           "paths": None, "methods": None, "header": None, "format": None, "headers": [SECRET_HEADER[0]]}


class Certs:
    """Made with the openssl CLI in dir: the bench internet's CA (the bench
    server's certificate for BENCH_NAME and BOUND_NAME; airlock-egress
    trusts it with --trust-ca, as it would the system store) and the Airlock
    CA (sent to the gateway with "ca"; it issues the leaves of intercepted
    connections). EC P-256 everywhere, as the Airlock CA is."""

    def __init__(self, d):
        os.makedirs(d)
        # airlock-egress runs as nobody: it must reach net-ca.pem (only).
        os.chmod(d, 0o711)
        os.chmod(os.path.dirname(d), 0o711)
        self.net_ca, self.net_ca_key = eh.make_ca(d, "net-ca", "Airlock bench internet CA")
        self.airlock_ca, self.airlock_key = eh.make_ca(d, "airlock-ca", "Airlock bench CA")
        self.server_cert, self.server_key = eh.make_leaf(d, "server", "net-ca", [BENCH_NAME, BOUND_NAME])
        os.chmod(self.net_ca, 0o644)

    def client_context(self):
        """What a guest with the Airlock CA installed trusts."""
        return eh.guest_tls_context(self.airlock_ca, self.net_ca)


class World:
    """FakeNet + the three namespaces + airlock-egress + the bench server.
    start() builds everything; close() removes everything (idempotent), also
    after a failed start()."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.net = None
        self.certs = None
        self.ns_guest, self.ns_sbx, self.ns_direct = eh.namespace_names(NS_PREFIX, ("gst", "sbx", "dir"))
        self.egress = None
        self.ctl = None
        self.server = None
        self.created = []

    # -------------------------------------------------------- building

    def start_fakenet(self):
        # Ours of runs that were killed; fakenet.FakeNet().start() removes its own.
        eh.remove_stale_namespaces(NS_PREFIX)
        # The bench server's names, for the fake DNS (read when the server starts).
        fn.RECORDS[BENCH_NAME] = [("A", BENCH_IP)]
        fn.RECORDS[BOUND_NAME] = [("A", BENCH_IP)]
        self.certs = Certs(os.path.join(self.log_dir, "certs"))
        self.net = fn.FakeNet().start()
        eh.run("ip", "-n", self.net.inet_ns, "addr", "add", f"{BENCH_IP}/32", "dev", "lo")
        log = open(os.path.join(self.log_dir, "server.log"), "wb")
        self.server = subprocess.Popen(self.net.inet_argv([PYTHON, os.path.abspath(__file__), "--serve", BENCH_IP,
                                                           str(HTTP_PORT), "--tls-serve", str(HTTPS_PORT),
                                                           self.certs.server_cert, self.certs.server_key]),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                       start_new_session=True)
        log.close()
        line = self.server.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the bench server did not start: {line!r}; see {log.name}")
        return self

    def start_gateway_world(self, policy, bindings=()):
        """The namespaces, airlock-egress (sent the Airlock CA) and one
        sandbox with policy and bindings."""
        self._make_namespaces()
        # As airlockd runs it: in the host namespace.
        self.egress, self.ctl = eh.start_egress(
            self.net.host_argv([]), ["--resolver", self.net.resolver, "--public-cidr", "192.0.2.0/24",
                                     "--connect-timeout-ms", "2000", "--trust-ca", self.certs.net_ca],
            os.path.join(self.log_dir, "egress.log"), control=lambda sock: eh.Control(sock, CONTROL_TIMEOUT_S))
        reply = eh.send_ca(self.ctl, self.certs.airlock_ca, self.certs.airlock_key)
        if reply["op"] != "ack":
            raise RuntimeError(f"airlock-egress refused the CA: {reply}")
        reply = eh.add_sandbox(self.ctl, self.ns_sbx, "sb-bench", policy, tenant="bench", bindings=bindings)
        if reply["op"] != "ack":
            raise RuntimeError(f"airlock-egress refused the sandbox: {reply}")

    def _make_namespaces(self):
        host = self.net.host_ns
        names = [self.ns_guest, self.ns_sbx, self.ns_direct]
        self.created = names  # close_gateway_world() deletes them, also those not made
        eh.add_namespaces(*names)
        for ns in names:
            eh.run("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
                   "net.ipv4.ip_forward=0", ns=ns)
        eh.link_guest(self.ns_guest, self.ns_sbx)
        # direct client <-> alt-host, which routes it to the internet (whose
        # default route leads back to alt-host)
        eh.veth(self.ns_direct, "eth0", DIRECT_IP, host, "dir0", DIRECT_GW, 24)
        eh.run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1", ns=host)

    def client_sockets(self, ns, n):
        """n fresh TCP sockets (TCP_NODELAY) inside namespace ns."""
        return eh.call_in_netns(ns, lambda: [tcp_socket() for _ in range(n)])

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
        eh.delete_namespaces(*self.created)
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
