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

and a server of our own in alt-inet on BENCH_IP (bench.allowed.test and
bound.allowed.test in the fake DNS), HTTP on :80 and HTTPS on :443 (a
certificate for both names from a bench CA made with the openssl CLI, which
airlock-egress trusts with --trust-ca): `GET /bytes/N` sends N bytes (HTTP:
sendfile(2) from a memfd; HTTPS: from memory), `POST /upload` with a
Content-Length reads the body and drops it, any other path a 3-byte body,
always `Connection: close`. fakenet's own server (Python, every byte hashed)
would be what a throughput figure measured.

airlock-egress is sent an Airlock CA (openssl CLI too) and a secret binding
for bound.allowed.test (a placeholder in a header value is replaced): TLS to
that name is intercepted, TLS to bench.allowed.test spliced.

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

# The secret bound to BOUND_NAME: the client sends the placeholder in a
# header, the gateway puts the value there (a header substitution).
PLACEHOLDER = "airlock-ph-" + "5e" * 32
SECRET_VALUE = "bench-secret-value-0123456789"
SECRET_HEADER = ("X-Api-Key", PLACEHOLDER)
BINDING = {"secret": "bench-key", "placeholder": PLACEHOLDER, "value": SECRET_VALUE, "hosts": [BOUND_NAME],
           "paths": None, "methods": None, "header": None, "format": None}

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


def run(*cmd, ns=None, input=None, cwd=None):
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    r = subprocess.run(full, input=input, capture_output=True, text=True, timeout=60, cwd=cwd)
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
        self.substituted = 0  # network.secret events with verdict "substituted"
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
                    self.substituted += (m.get("type") == "network.secret"
                                         and m.get("data", {}).get("verdict") == "substituted")
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
        return self._wait_count("allowed", n, timeout_s)

    def wait_substituted(self, n, timeout_s=5):
        """The count of substitutions ("network.secret" events) once it reaches n (or after timeout_s)."""
        return self._wait_count("substituted", n, timeout_s)

    def _wait_count(self, what, n, timeout_s):
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while getattr(self, what) < n and not self.closed and time.monotonic() < deadline:
                self.cond.wait(0.05)
            return getattr(self, what)

    def request(self, msg, fds=()):
        self.seq += 1
        seq = self.seq
        socket.send_fds(self.sock, [json.dumps(dict(msg, seq=seq)).encode()], list(fds))
        return self.wait_for(lambda m: m.get("op") in ("ack", "nack") and m.get("seq") == seq,
                             f"reply to {msg['op']} #{seq}")


def _openssl(*args, cwd):
    run("openssl", *args, cwd=cwd)


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
        self.net_ca, self.net_ca_key = self._ca(d, "net-ca", "Airlock bench internet CA")
        self.airlock_ca, self.airlock_key = self._ca(d, "airlock-ca", "Airlock bench CA")
        with open(os.path.join(d, "server.ext"), "w") as f:
            f.write(f"basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                    f"subjectAltName=DNS:{BENCH_NAME},DNS:{BOUND_NAME}\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key",
                 "-out", "server.csr", "-subj", f"/CN={BENCH_NAME}", cwd=d)
        _openssl("x509", "-req", "-in", "server.csr", "-CA", "net-ca.pem", "-CAkey", "net-ca.key",
                 "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
        self.server_cert, self.server_key = os.path.join(d, "server.pem"), os.path.join(d, "server.key")
        os.chmod(self.net_ca, 0o644)

    @staticmethod
    def _ca(d, name, cn):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={cn}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 cwd=d)
        return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")

    def client_context(self):
        """What a guest with the Airlock CA installed trusts: the Airlock CA
        and (as its system store) the bench internet's CA."""
        ctx = ssl.create_default_context(cafile=self.airlock_ca)
        ctx.load_verify_locations(self.net_ca)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx


class World:
    """FakeNet + the three namespaces + airlock-egress + the bench server.
    start() builds everything; close() removes everything (idempotent), also
    after a failed start()."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.net = None
        self.fn = None
        self.certs = None
        self.ns_guest, self.ns_sbx, self.ns_direct = _ns_names(TAG)
        self.egress = None
        self.ctl = None
        self.server = None
        self.created = []

    # -------------------------------------------------------- building

    def start_fakenet(self):
        self.fn = _fakenet()
        remove_stale_namespaces()
        # The bench server's names, for the fake DNS (read when the server starts).
        self.fn.RECORDS[BENCH_NAME] = [("A", BENCH_IP)]
        self.fn.RECORDS[BOUND_NAME] = [("A", BENCH_IP)]
        self.certs = Certs(os.path.join(self.log_dir, "certs"))
        self.net = self.fn.FakeNet().start()
        run("ip", "-n", self.net.inet_ns, "addr", "add", f"{BENCH_IP}/32", "dev", "lo")
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
        self._start_egress()
        with open(self.certs.airlock_ca) as f, open(self.certs.airlock_key) as k:
            reply = self.ctl.request({"op": "ca", "cert_pem": f.read(), "key_pem": k.read()})
        if reply["op"] != "ack":
            raise RuntimeError(f"airlock-egress refused the CA: {reply}")
        listeners = [
            self.socket_in(self.ns_sbx, bind=(GATEWAY_IP, EGRESS_PORT), listen=True),
            self.socket_in(self.ns_sbx, socket.SOCK_DGRAM, bind=(GATEWAY_IP, 53)),
            self.socket_in(self.ns_sbx, bind=(GATEWAY_IP, 53), listen=True),
        ]
        try:
            reply = self.ctl.request({"op": "add", "sandbox": "sb-bench", "tenant": "bench", "policy": policy,
                                      "bindings": list(bindings)}, [s.fileno() for s in listeners])
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
                                  "--public-cidr", "192.0.2.0/24", "--connect-timeout-ms", "2000",
                                  "--trust-ca", self.certs.net_ca])
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
