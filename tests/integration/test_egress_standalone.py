# SPDX-License-Identifier: Apache-2.0
"""airlock-egress alone: no airlockd, no VM.

The test plays airlockd. It builds a small world of network namespaces:

    aeg-cli-PID   the "guest": 10.0.2.15/24 on a veth, default route via
                  10.0.2.2
    aeg-sbx-PID   the "sandbox" namespace: 10.0.2.2/24 on the other end,
                  nftables redirecting DNS (UDP/TCP 53, any destination) to
                  10.0.2.2:53 and every other TCP connection to
                  10.0.2.2:15001, no forwarding; the listening sockets
                  bound there are created by this test (as airlockd does)
    aeg-egr-PID   where airlock-egress runs, as its own uid: 203.0.113.1/30 on
                  a veth, default route via 203.0.113.2; none of the test
                  hosts' addresses is here (the gateway never dials its own
                  namespace's addresses)
    aeg-net-PID   the "internet": 203.0.113.2/30 on the other end (the
                  route back is that link's own), the test hosts' addresses
                  on lo, tiny servers (HTTP :80, a TLS-ish :443 that logs the
                  ClientHello, TCP echo :7000, bulk :8000) and an
                  authoritative DNS server that logs every query

The namespaces, the control channel and airlockd's part are
egress_harness.py's (shared with test_egress_intercept.py and bench/):
airlock-egress gets one end of a SOCK_SEQPACKET pair as --control-fd; the
test sends "add" with the three listeners and a policy, then acts as the
guest. Nothing leaves the four namespaces. Run with `pytest-3`; needs root
and build/airlock-egress.
"""
import hashlib
import os
import random
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

import egress_harness as eh
from egress_harness import DNS_IP, EGRESS, EGRESS_LINK_IP, NET_LINK_IP, request_bytes

NS_PREFIX = "aeg-"
NS_CLIENT, NS_SBX, NS_EGRESS, NS_NET = NAMESPACES = eh.world_namespaces(NS_PREFIX)

ALLOWED_IP = "192.0.2.10"
OTHER_IP = "192.0.2.20"
PRIVATE_IP = "10.1.2.3"

RECORDS = {
    "www.allowed.test": ALLOWED_IP,
    "api.allowed.test": ALLOWED_IP,
    "echo.allowed.test": ALLOWED_IP,
    "blocked.allowed.test": ALLOWED_IP,
    "private.allowed.test": PRIVATE_IP,
    "local.allowed.test": EGRESS_LINK_IP,
    "www.other.test": OTHER_IP,
}

POLICY = {
    "allow": ["*.allowed.test", "echo.allowed.test:7000", "echo.allowed.test:8000"],
    "deny": ["blocked.allowed.test"],
}

SANDBOX = "sb-standalone"
LOG = os.path.join(eh.BUILD, "test-egress-standalone.log")  # the gateways' stderr
TIMEOUT = 5


def pattern(n):
    block = bytes(range(256)) * 256
    return (block * (n // len(block) + 1))[:n]


# ------------------------------------------------------------- the "internet"

class Internet:
    """Servers inside NS_NET (or, for a test, NS_EGRESS); every connection
    and query is logged."""

    def __init__(self):
        self.lock = threading.Lock()
        self.log = []  # (kind, local_ip, detail)
        self.sockets = []

    def record(self, kind, local, detail):
        with self.lock:
            self.log.append((kind, local, detail))

    def entries(self, kind):
        with self.lock:
            return [(local, detail) for k, local, detail in self.log if k == kind]

    def dns_names(self):
        return [name for _, (name, _) in self.entries("dns")]

    def serve_tcp(self, ip, port, handler, ns=NS_NET):
        s = eh.socket_in(ns, bind=(ip, port), listen=True)
        self.sockets.append(s)

        def loop():
            while True:
                try:
                    c, _ = s.accept()
                except OSError:
                    return
                threading.Thread(target=self._handle, args=(handler, c), daemon=True).start()
        threading.Thread(target=loop, daemon=True).start()

    @staticmethod
    def _handle(handler, c):
        with c:
            c.settimeout(TIMEOUT)
            try:
                handler(c)
            except OSError:
                pass

    def http(self, c):
        """HTTP/1.1 with keep-alive and pipelining. Each request is logged
        ("http": its Host; "http-req": (Host, method, path, body length, body
        sha256)) and answered "hello from LOCAL for HOST" (with a body: then
        "body LENGTH SHA256"); a request with Connection: close, or the
        client's end, ends the connection, which is logged too ("http-conn":
        (the paths of its requests, every byte received))."""
        local = c.getsockname()[0]
        conn = {"buf": b"", "total": 0}
        paths = []

        def fill():
            chunk = c.recv(65536)
            if not chunk:
                raise EOFError
            conn["buf"] += chunk
            conn["total"] += len(chunk)

        def take(n):
            while len(conn["buf"]) < n:
                fill()
            out, conn["buf"] = conn["buf"][:n], conn["buf"][n:]
            return out

        def line(end=b"\r\n"):
            while end not in conn["buf"]:
                fill()
            out, conn["buf"] = conn["buf"].split(end, 1)
            return out

        try:
            while True:
                head = line(b"\r\n\r\n").decode("latin-1").split("\r\n")
                method, path = head[0].split(" ")[:2]
                fields = [(k.strip().lower(), v.strip()) for k, v in (h.split(":", 1) for h in head[1:] if ":" in h)]
                field = dict(fields).get
                host = field("host")
                self.record("http", local, host)
                paths.append(path)
                digest, n = hashlib.sha256(), 0
                if (field("transfer-encoding") or "").lower() == "chunked":
                    while True:
                        size = int(line().split(b";")[0], 16)
                        if size == 0:
                            while line():  # trailers
                                pass
                            break
                        digest.update(take(size))
                        n += size
                        take(2)
                elif field("content-length"):
                    n = int(field("content-length"))
                    for off in range(0, n, 1 << 20):
                        digest.update(take(min(1 << 20, n - off)))
                self.record("http-req", local, (host, method, path, n, digest.hexdigest()))
                body = f"hello from {local} for {host}\n"
                if n or method in ("POST", "PUT"):
                    body += f"body {n} {digest.hexdigest()}\n"
                close = (field("connection") or "").lower() == "close"
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (
                    len(body), b"Connection: close\r\n" if close else b"") + body.encode())
                if close:
                    return
        except (EOFError, ValueError, IndexError):
            pass
        finally:
            self.record("http-conn", local, (paths, conn["total"]))

    def tls(self, c):
        data = b""
        while len(data) < 5 or len(data) < 5 + struct.unpack(">H", data[3:5])[0]:
            chunk = c.recv(65536)
            if not chunk:
                return
            data += chunk
        local = c.getsockname()[0]
        self.record("tls", local, data)
        c.sendall(f"tls-ish server {local}\n".encode())

    def bulk(self, c):
        """Sends the number of bytes asked for ("N\\n"), then closes."""
        line = b""
        while not line.endswith(b"\n"):
            chunk = c.recv(100)
            if not chunk:
                return
            line += chunk
        n = int(line)
        self.record("bulk", c.getsockname()[0], n)
        c.sendall(pattern(n))

    def echo(self, c):
        self.record("echo", c.getsockname()[0], None)
        while True:
            chunk = c.recv(65536)
            if not chunk:
                return
            c.sendall(chunk)

    def serve_dns(self):
        self.sockets.append(eh.serve_dns(NS_NET, DNS_IP, self.dns_answer))

    def dns_answer(self, q):
        name, qtype, reply = eh.dns_answer(q, RECORDS.get)
        self.record("dns", DNS_IP, (name, qtype))
        return reply

    def close(self):
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


# ------------------------------------------------------------- airlockd's part

def start_egress(extra=()):
    return eh.start_egress(["ip", "netns", "exec", NS_EGRESS], [*eh.WORLD_EGRESS_ARGS, *extra], LOG)


def add_sandbox(ctl, policy=POLICY, sandbox=SANDBOX):
    return eh.add_sandbox(ctl, NS_SBX, sandbox, policy)


class World:
    def __init__(self, internet, proc, ctl):
        self.internet, self.proc, self.ctl = internet, proc, ctl


@pytest.fixture(scope="module")
def world():
    eh.prepare_world(NS_PREFIX, (ALLOWED_IP, OTHER_IP, DNS_IP, PRIVATE_IP), LOG)
    internet = Internet()
    proc = None
    try:
        for ip in (ALLOWED_IP, OTHER_IP, PRIVATE_IP):
            internet.serve_tcp(ip, 80, internet.http)
            internet.serve_tcp(ip, 443, internet.tls)
            internet.serve_tcp(ip, 7000, internet.echo)
            internet.serve_tcp(ip, 8000, internet.bulk)
        internet.serve_dns()
        proc, ctl = start_egress()
        reply = add_sandbox(ctl)
        assert reply["op"] == "ack", reply
        yield World(internet, proc, ctl)
    finally:
        if proc:
            proc.kill()
            proc.wait()
        internet.close()
        eh.delete_namespaces(*NAMESPACES)


# ------------------------------------------------------------- the guest's side

def guest_connect(ip, port):
    s = eh.socket_in(NS_CLIENT)
    s.settimeout(TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.connect((ip, port))
    return s


def read_all(s):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def assert_closed_at_once(ip, port, data=b""):
    """The gateway resets the connection without a byte (it may do so
    before connect() even returns)."""
    try:
        with guest_connect(ip, port) as s:
            if data:
                s.sendall(data)
            assert read_all(s) == b""
    except (ConnectionResetError, BrokenPipeError):
        pass


def http_get(ip, host, port=80):
    with guest_connect(ip, port) as s:
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: t\r\nConnection: close\r\n\r\n".encode())
        return read_all(s)


def read_response(f):
    """(status, {lower-case name: value}, body) of the next response on a
    socket's file, or None at its end."""
    try:
        head = eh.read_response_head(f)
        if head is None:
            return None
        headers = {k.strip().lower(): v for k, v in head[1]}
        return head[0], headers, f.read(int(headers.get("content-length", "0")))
    except ConnectionResetError:
        return None


def server_conn(internet, first_path):
    """(paths of its requests, bytes received) of the server connection
    whose first request was for first_path, once it has ended; else None."""
    for _, (paths, total) in internet.entries("http-conn"):
        if paths and paths[0] == first_path:
            return paths, total
    return None


def client_hello(sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def tls_hello(ip, sni, chunks=1):
    hello = client_hello(sni)
    with guest_connect(ip, 443) as s:
        step = -(-len(hello) // chunks)
        for i in range(0, len(hello), step):
            s.sendall(hello[i:i + step])
            if chunks > 1:
                time.sleep(0.05)
        return hello, read_all(s)


def dns_query(name, qtype=1, server="8.8.8.8", tcp=False, timeout=TIMEOUT):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    q += struct.pack(">HH", qtype, 1)
    if tcp:
        with guest_connect(server, 53) as s:
            s.sendall(struct.pack(">H", len(q)) + q)
            data = b""
            while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
                chunk = s.recv(4096)
                assert chunk, "DNS over TCP: connection closed"
                data += chunk
            resp = data[2:]
    else:
        s = eh.socket_in(NS_CLIENT, socket.SOCK_DGRAM)
        with s:
            s.settimeout(timeout)
            s.sendto(q, (server, 53))
            resp = s.recv(4096)
    rid, flags, qd, an = struct.unpack(">HHHH", resp[:8])
    assert rid == qid and flags & 0x8000
    i = 12
    for _ in range(qd):
        while resp[i]:
            i += 1 + resp[i]
        i += 5
    answers = []
    for _ in range(an):
        i += 2  # a pointer to the question
        rtype, _, _, rdlen = struct.unpack(">HHIH", resp[i:i + 10])
        rdata = resp[i + 10:i + 10 + rdlen]
        i += 10 + rdlen
        if rtype == 1:
            answers.append(socket.inet_ntoa(rdata))
    return flags & 0xF, answers


def wait_until(pred, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


# ------------------------------------------------------------- tests

def test_allowed_http_reaches_the_server(world):
    resp = http_get(ALLOWED_IP, "www.allowed.test")
    assert resp.startswith(b"HTTP/1.1 200 OK"), resp
    assert b"hello from 192.0.2.10 for www.allowed.test" in resp
    ev = world.ctl.wait_event("network.allow", host="www.allowed.test", proto="http")
    assert ev["sandbox"] == SANDBOX
    d = ev["data"]
    assert d["dst"] == "192.0.2.10:80" and d["port"] == 80
    assert d["addr"] == "192.0.2.10:80" and d["verdict"] == "allow"
    assert d["rule"] == "*.allowed.test" and d["reason"] is None
    close = world.ctl.wait_event("network.close", host="www.allowed.test", proto="http")["data"]
    assert close["bytes_up"] > 0 and close["bytes_down"] == len(resp)
    assert close["duration_ms"] >= 0 and close["verdict"] == "allow"


def test_denied_http_host_gets_403_and_nothing_is_resolved(world):
    resp = http_get(OTHER_IP, "www.other.test")
    assert resp.startswith(b"HTTP/1.1 403 Forbidden"), resp
    assert b"egress policy" in resp and b"www.other.test" in resp
    d = world.ctl.wait_event("network.deny", host="www.other.test")["data"]
    assert d["proto"] == "http" and d["dst"] == "192.0.2.20:80" and d["verdict"] == "deny"
    assert d["addr"] is None and d["rule"] is None and d["reason"]
    assert "www.other.test" not in world.internet.dns_names()
    assert not [e for e in world.internet.entries("http") if e[0] == OTHER_IP]


def test_denied_host_to_the_address_of_an_allowed_host(world):
    # The Host decides, not the address: a non-allowed Host to an allowed
    # host's address is refused.
    resp = http_get(ALLOWED_IP, "evil.example")
    assert resp.startswith(b"HTTP/1.1 403"), resp
    world.ctl.wait_event("network.deny", host="evil.example", dst="192.0.2.10:80")
    assert "evil.example" not in world.internet.dns_names()


def test_deny_rule_wins(world):
    resp = http_get(ALLOWED_IP, "blocked.allowed.test")
    assert resp.startswith(b"HTTP/1.1 403"), resp
    d = world.ctl.wait_event("network.deny", host="blocked.allowed.test")["data"]
    assert d["rule"] == "blocked.allowed.test"


def test_host_port_must_be_the_destination_port(world):
    resp = http_get(ALLOWED_IP, "www.allowed.test:8080")
    assert resp.startswith(b"HTTP/1.1 403"), resp
    d = world.ctl.wait_event("network.deny", asked_host="www.allowed.test:8080")["data"]
    assert "port" in d["reason"]


def test_unescaped_guest_bytes_never_reach_events(world):
    with guest_connect(ALLOWED_IP, 80) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: \xc3\xa9vil\\.test\r\n\r\n")
        resp = read_all(s)
    assert resp.startswith(b"HTTP/1.1 403"), resp
    d = world.ctl.wait_event("network.deny", dst="192.0.2.10:80", asked_host="\\xc3\\xa9vil\\x5c.test")["data"]
    assert d["host"] is None


# Plain HTTP checks every request of a connection, not only the first: a
# kept-alive connection to a shared server (virtual hosts, a CDN) must not
# carry a request for another site (domain fronting over plain HTTP).
WWW = "www.allowed.test"


@pytest.mark.parametrize("other", ["api.allowed.test", "www.other.test"])
def test_keep_alive_request_for_another_host_is_misdirected(world, other):
    # Both names resolve to the address the connection was dialled to; one
    # is allowed, one is not: either way the connection stays WWW's.
    first = f"/ka-first-{other}"
    with guest_connect(ALLOWED_IP, 80) as s, s.makefile("rb") as f:
        s.sendall(request_bytes("GET", first, WWW))
        assert read_response(f) == (200, {"content-length": "43"}, b"hello from 192.0.2.10 for www.allowed.test\n")
        s.sendall(request_bytes("GET", "/ka-second", other))
        status, headers, body = read_response(f)
        assert status == 421 and headers["connection"] == "close", body
        assert read_response(f) is None
    d = world.ctl.wait_event("network.deny", proto="http", path="/ka-second", asked_host=other)["data"]
    assert d["host"] == WWW and d["method"] == "GET" and d["addr"] == "192.0.2.10:80"
    assert "not this connection's host" in d["reason"]
    assert wait_until(lambda: server_conn(world.internet, first))
    assert server_conn(world.internet, first) == ([first], len(request_bytes("GET", first, WWW)))
    world.ctl.wait_event("network.close", proto="http", reason=d["reason"])


def test_keep_alive_request_after_a_policy_change_is_forbidden(world):
    ctl = world.ctl
    with guest_connect(ALLOWED_IP, 80) as s, s.makefile("rb") as f:
        s.sendall(request_bytes("GET", "/pc-first", WWW))
        assert read_response(f)[0] == 200
        denied = {"allow": POLICY["allow"], "deny": POLICY["deny"] + [WWW]}
        assert ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": denied})["op"] == "ack"
        try:
            # The same host, on the open connection: the policy in force now.
            s.sendall(request_bytes("GET", "/pc-second", WWW))
            status, headers, body = read_response(f)
            assert status == 403 and headers["connection"] == "close"
            assert b"www.allowed.test is not allowed" in body
            assert read_response(f) is None
        finally:
            assert ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": POLICY})["op"] == "ack"
    d = ctl.wait_event("network.deny", proto="http", path="/pc-second")["data"]
    assert d["host"] == WWW and d["rule"] == WWW and "asked_host" not in d
    assert wait_until(lambda: server_conn(world.internet, "/pc-first"))
    assert server_conn(world.internet, "/pc-first")[0] == ["/pc-first"]


def test_pipelined_requests_to_the_same_host_reach_the_server(world):
    # The same host, spelled three ways (canonicalised alike).
    data = (request_bytes("GET", "/pipe-1", WWW)
            + request_bytes("POST", "/pipe-2", "www.allowed.test:80", body=b"hello")
            + request_bytes("GET", "/pipe-3", "WWW.Allowed.Test.", close=True))
    with guest_connect(ALLOWED_IP, 80) as s, s.makefile("rb") as f:
        s.sendall(data)
        r1, r2, r3 = read_response(f), read_response(f), read_response(f)
        assert read_response(f) is None
    assert (r1[0], r2[0], r3[0]) == (200, 200, 200)
    assert r2[2].endswith(b"body 5 %s\n" % hashlib.sha256(b"hello").hexdigest().encode())
    assert wait_until(lambda: server_conn(world.internet, "/pipe-1"))
    assert server_conn(world.internet, "/pipe-1") == (["/pipe-1", "/pipe-2", "/pipe-3"], len(data))


def chunked(body, seed):
    """body in chunks of mixed sizes (with an extension), then a trailer."""
    rng, out, i = random.Random(seed), [], 0
    while i < len(body):
        n = rng.choice((1, 7, 4096, 65536, 300000, 1 << 20))
        out.append(b"%x;ext=1\r\n" % len(body[i:i + n]) + body[i:i + n] + b"\r\n")
        i += n
    return b"".join(out) + b"0\r\nX-Trailer: done\r\n\r\n"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_uploads_arrive_intact(world, framing):
    # Two 8 MiB uploads on one connection: the first request's body and a
    # later one's both go through the parser, streamed.
    size = 8 * 1024 * 1024
    bodies = [os.urandom(size), os.urandom(size)]
    first = f"/upload-{framing}-1"
    with guest_connect(ALLOWED_IP, 80) as s, s.makefile("rb") as f:
        for i, body in enumerate(bodies):
            path, close = (first, False) if i == 0 else (f"/upload-{framing}-2", True)
            if framing == "chunked":
                head = f"PUT {path} HTTP/1.1\r\nHost: {WWW}\r\nTransfer-Encoding: chunked\r\n"
                s.sendall((head + ("Connection: close\r\n" if close else "") + "\r\n").encode()
                          + chunked(body, i))
            else:
                s.sendall(request_bytes("POST", path, WWW, body=body, close=close))
            status, _, answer = read_response(f)
            assert status == 200
            assert answer.endswith(b"body %d %s\n" % (size, hashlib.sha256(body).hexdigest().encode()))
        assert read_response(f) is None
    d = world.ctl.wait_for(lambda m: m.get("op") == "event" and m["type"] == "network.close"
                           and m["data"]["host"] == WWW and m["data"]["bytes_up"] > 2 * size, what="close")["data"]
    assert d["reason"] == "closed"
    assert wait_until(lambda: server_conn(world.internet, first))
    assert server_conn(world.internet, first)[0] == [first, f"/upload-{framing}-2"]


def test_smuggling_in_a_later_request_is_refused(world):
    # Content-Length and Transfer-Encoding together: one server would read
    # a body, another a second request for another host. Nothing of it,
    # nor anything after it, reaches the server.
    first = request_bytes("GET", "/smuggle-1", WWW)
    smuggled = (b"POST /smuggle-2 HTTP/1.1\r\nHost: www.allowed.test\r\nContent-Length: 48\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggle-3 HTTP/1.1\r\nHost: www.other.test\r\n\r\n")
    with guest_connect(ALLOWED_IP, 80) as s, s.makefile("rb") as f:
        s.sendall(first + smuggled)
        assert read_response(f)[0] == 200
        status, headers, body = read_response(f)
        assert status == 400 and headers["connection"] == "close", body
        assert b"both Content-Length and Transfer-Encoding" in body
        assert read_response(f) is None
    d = world.ctl.wait_for(lambda m: m.get("op") == "event" and m["type"] == "network.deny"
                           and "both Content-Length and Transfer-Encoding" in m["data"]["reason"], what="deny")["data"]
    assert d["proto"] == "http" and d["host"] == WWW and d["addr"] == "192.0.2.10:80"
    assert wait_until(lambda: server_conn(world.internet, "/smuggle-1"))
    assert server_conn(world.internet, "/smuggle-1") == (["/smuggle-1"], len(first))


@pytest.mark.parametrize("head,status", [
    (b"POST /first HTTP/1.1\r\nHost: www.allowed.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"TRACE /first HTTP/1.1\r\nHost: www.allowed.test\r\n\r\n", 405),
    (b"GET /first HTTP/1.1\r\nHost: www.allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 403),
], ids=["content-length-and-chunked", "trace", "websocket-upgrade"])
def test_first_request_refused_by_the_stream_parser(world, head, status):
    # The first head reader accepts these; the parser that reads the rest
    # of the connection does not: refused before anything is dialled.
    mark = len(world.ctl.events("network.deny"))
    with guest_connect(ALLOWED_IP, 80) as s:
        s.sendall(head)
        resp = read_all(s)
    assert resp.startswith(b"HTTP/1.1 %d " % status) and b"Connection: close" in resp, resp
    world.ctl.wait_for(lambda m: len(world.ctl.events("network.deny")) > mark, what="network.deny")
    d = world.ctl.events("network.deny")[mark]["data"]
    assert d["proto"] == "http" and d["host"] == WWW and d["addr"] is None
    assert not [e for e in world.internet.entries("http-req") if e[1][2] == "/first"]


def test_allowed_sni_reaches_only_the_allowed_host(world):
    # SNI www.allowed.test sent to the other host's address: the gateway
    # dials the SNI's name, so the bytes reach 192.0.2.10, never .20.
    hello, resp = tls_hello(OTHER_IP, "www.allowed.test")
    assert resp == b"tls-ish server 192.0.2.10\n"
    assert (ALLOWED_IP, hello) in world.internet.entries("tls")
    assert not [e for e in world.internet.entries("tls") if e[0] == OTHER_IP]
    d = world.ctl.wait_event("network.allow", host="www.allowed.test", proto="tls")["data"]
    assert d["dst"] == "192.0.2.20:443" and d["addr"] == "192.0.2.10:443"


def test_client_hello_split_over_segments(world):
    hello, resp = tls_hello(ALLOWED_IP, "api.allowed.test", chunks=4)
    assert resp == b"tls-ish server 192.0.2.10\n"
    world.ctl.wait_event("network.allow", host="api.allowed.test", proto="tls")


def test_denied_sni_is_closed(world):
    before = len(world.internet.entries("tls"))
    hello, resp = tls_hello(OTHER_IP, "www.other.test")
    assert resp == b""
    d = world.ctl.wait_event("network.deny", host="www.other.test", proto="tls")["data"]
    assert d["addr"] is None
    assert len(world.internet.entries("tls")) == before
    assert "www.other.test" not in world.internet.dns_names()


def test_tls_without_sni_is_denied(world):
    with guest_connect(ALLOWED_IP, 443) as s:
        s.sendall(b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00")  # truncated nonsense
        assert read_all(s) == b""
    world.ctl.wait_event("network.deny", proto="tls", dst="192.0.2.10:443")


def test_allowed_name_with_a_private_address_is_refused(world):
    resp = http_get(ALLOWED_IP, "private.allowed.test")
    assert resp.startswith(b"HTTP/1.1 403"), resp
    d = world.ctl.wait_event("network.deny", host="private.allowed.test")["data"]
    assert "forbidden address (private)" in d["reason"]
    assert not [e for e in world.internet.entries("http") if e[0] == PRIVATE_IP]


def test_an_explicit_rule_outside_the_ceiling_is_not_dialled(world):
    # SECURITY (issue 17, defense in depth): airlockd refuses a policy whose
    # rule names a network outside the operator's ceiling; should one reach
    # the gateway anyway (here sent straight to it), the rule still opens
    # nothing outside --ceiling-cidr (this gateway has none: public only).
    ctl, internet = world.ctl, world.internet
    new = {"allow": POLICY["allow"] + [f"{PRIVATE_IP}:7000", "10.0.0.0/8"], "deny": POLICY["deny"]}
    assert ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": new})["op"] == "ack"
    try:
        assert_closed_at_once(PRIVATE_IP, 7000, b"ping")
        d = ctl.wait_event("network.deny", dst=f"{PRIVATE_IP}:7000")["data"]
        assert d["addr"] is None, d
        resp = http_get(PRIVATE_IP, PRIVATE_IP)
        assert resp.startswith(b"HTTP/1.1 403"), resp
    finally:
        assert ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": POLICY})["op"] == "ack"
    assert not [e for kind in ("http", "echo") for e in internet.entries(kind) if e[0] == PRIVATE_IP]


def test_an_explicit_rule_inside_the_ceiling_is_dialled():
    """The same kind of rule with --ceiling-cidr 10.1.2.0/24: dialled (a
    world of its own, "aec-", so that the module's gateway keeps its flags)."""
    log = os.path.join(eh.BUILD, "test-egress-standalone-ceiling.log")
    cli, sbx, egr, net = names = eh.prepare_world("aec-", (DNS_IP, PRIVATE_IP), log)
    internet = Internet()
    proc = None
    try:
        internet.serve_tcp(PRIVATE_IP, 7000, internet.echo, ns=net)
        proc, ctl = eh.start_egress(["ip", "netns", "exec", egr],
                                    [*eh.WORLD_EGRESS_ARGS, "--ceiling-cidr", "10.1.2.0/24"], log)
        assert eh.add_sandbox(ctl, sbx, "sb-ceiling", {"allow": [f"{PRIVATE_IP}:7000"]})["op"] == "ack"
        with eh.socket_in(cli) as s:
            s.settimeout(TIMEOUT)
            s.connect((PRIVATE_IP, 7000))
            s.sendall(b"ping")
            assert s.recv(100) == b"ping"
        ctl.wait_event("network.allow", dst=f"{PRIVATE_IP}:7000")
    finally:
        if proc:
            proc.kill()
            proc.wait()
        internet.close()
        eh.delete_namespaces(*names)


def test_the_gateways_own_address_is_never_dialled(world):
    # SECURITY: an address of the gateway's own namespace reaches the host's
    # services, not the internet: refused even though --public-cidr covers it
    # and the policy names it, and whether the guest asks for it directly,
    # as an IP-literal Host, or through an allowed name whose answer it is.
    # The other end of the same link, just as named, shows that it is the
    # address being local that is refused, not its range.
    ctl, internet = world.ctl, world.internet
    internet.serve_tcp(EGRESS_LINK_IP, 80, internet.http, ns=NS_EGRESS)
    internet.serve_tcp(EGRESS_LINK_IP, 7000, internet.echo, ns=NS_EGRESS)
    internet.serve_tcp(NET_LINK_IP, 7000, internet.echo)
    link = EGRESS_LINK_IP.rsplit(".", 1)[0] + ".0/30"
    new = {"allow": POLICY["allow"] + [f"{EGRESS_LINK_IP}:7000", f"{NET_LINK_IP}:7000", link],
           "deny": POLICY["deny"]}
    assert ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": new})["op"] == "ack"
    try:
        with guest_connect(NET_LINK_IP, 7000) as s:
            s.sendall(b"ping")
            assert s.recv(100) == b"ping"
        d = ctl.wait_event("network.allow", dst=f"{NET_LINK_IP}:7000")["data"]
        assert d["addr"] == f"{NET_LINK_IP}:7000"

        # An IP rule with the port names it.
        assert_closed_at_once(EGRESS_LINK_IP, 7000, b"ping")
        d = ctl.wait_event("network.deny", dst=f"{EGRESS_LINK_IP}:7000")["data"]
        assert d["proto"] == "tcp" and d["addr"] is None and "own address" in d["reason"]

        # An IP-literal Host, allowed by the link's CIDR.
        resp = http_get(EGRESS_LINK_IP, EGRESS_LINK_IP)
        assert resp.startswith(b"HTTP/1.1 403"), resp
        d = ctl.wait_event("network.deny", host=EGRESS_LINK_IP, dst=f"{EGRESS_LINK_IP}:80")["data"]
        assert d["addr"] is None and "own address" in d["reason"]

        # An allowed name whose only address is the gateway's own: no DNS
        # answer for the guest, and a connection by name is denied.
        assert dns_query("local.allowed.test") == (0, [])
        d = ctl.wait_event("network.dns", host="local.allowed.test")["data"]
        assert d["verdict"] == "deny" and d["answers"] == [] and "own address" in d["reason"]
        resp = http_get(ALLOWED_IP, "local.allowed.test")
        assert resp.startswith(b"HTTP/1.1 403"), resp
        d = ctl.wait_event("network.deny", host="local.allowed.test")["data"]
        assert d["addr"] is None and "local.allowed.test resolves to a forbidden address" in d["reason"]
    finally:
        assert ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": POLICY})["op"] == "ack"
    assert not [e for kind in ("http", "echo") for e in internet.entries(kind) if e[0] == EGRESS_LINK_IP]
    assert (NET_LINK_IP, None) in internet.entries("echo")


def test_dns_answers_allowed_names_only(world):
    rcode, answers = dns_query("www.allowed.test")
    assert (rcode, answers) == (0, [ALLOWED_IP])
    d = world.ctl.wait_event("network.dns", host="www.allowed.test", qtype="A")["data"]
    assert d["verdict"] == "allow" and d["answers"] == [ALLOWED_IP] and d["rule"] == "*.allowed.test"

    for name in ("www.other.test", "blocked.allowed.test", "nothing.example"):
        rcode, answers = dns_query(name)
        assert (rcode, answers) == (3, []), name
        d = world.ctl.wait_event("network.dns", host=name)["data"]
        assert d["verdict"] == "deny" and d["answers"] == []
        assert name not in world.internet.dns_names(), f"{name} was asked upstream"

    # DNS over TCP, to any server address, the same way.
    assert dns_query("api.allowed.test", tcp=True, server="1.1.1.1") == (0, [ALLOWED_IP])
    assert dns_query("www.other.test", tcp=True) == (3, [])
    # Other types are refused; an allowed name resolving to a private
    # address gets no answer.
    assert dns_query("www.allowed.test", qtype=16)[0] == 5
    assert dns_query("private.allowed.test") == (0, [])
    d = world.ctl.wait_event("network.dns", host="private.allowed.test")["data"]
    assert d["verdict"] == "deny" and "forbidden address" in d["reason"]


def test_other_ports_need_a_rule_for_that_port(world):
    # Direct IP, no DNS answer named it, no IP rule: refused.
    assert_closed_at_once(OTHER_IP, 7000, b"ping")
    d = world.ctl.wait_event("network.deny", dst="192.0.2.20:7000")["data"]
    assert d["proto"] == "tcp" and d["host"] is None

    # echo.allowed.test:7000 is allowed once the guest's DNS named the address.
    assert dns_query("echo.allowed.test") == (0, [ALLOWED_IP])
    with guest_connect(ALLOWED_IP, 7000) as s:
        s.sendall(b"ping")
        assert s.recv(100) == b"ping"
    d = world.ctl.wait_event("network.allow", host="echo.allowed.test", proto="tcp")["data"]
    assert d["rule"] == "echo.allowed.test:7000" and d["addr"] == "192.0.2.10:7000"

    # www.allowed.test names the same address, but its rule opens 80/443 only.
    assert_closed_at_once(ALLOWED_IP, 7001)
    world.ctl.wait_event("network.deny", dst="192.0.2.10:7001")


def test_bulk_transfer_and_half_close(world):
    assert dns_query("echo.allowed.test") == (0, [ALLOWED_IP])
    size = 16 * 1024 * 1024
    with guest_connect(ALLOWED_IP, 8000) as s:
        s.sendall(b"%d\n" % size)
        got = read_all(s)
    assert len(got) == size and got == pattern(size)
    d = world.ctl.wait_event("network.close", host="echo.allowed.test", port=8000)["data"]
    assert d["bytes_down"] == size and d["bytes_up"] == len(b"%d\n" % size)

    # The guest closes its sending side; the answer still comes back whole.
    data = os.urandom(3 * 1024 * 1024 + 17)
    with guest_connect(ALLOWED_IP, 7000) as s:
        sender = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
        sender.start()
        got = read_all(s)
        sender.join()
    assert got == data
    d = world.ctl.wait_event("network.close", port=7000, bytes_up=len(data))["data"]
    assert d["bytes_down"] == len(data) and d["reason"] == "closed"


def test_policy_update_takes_effect(world):
    assert http_get(OTHER_IP, "www.other.test").startswith(b"HTTP/1.1 403")
    new = {"allow": POLICY["allow"] + ["www.other.test"], "deny": POLICY["deny"]}
    assert world.ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": new})["op"] == "ack"
    try:
        resp = http_get(OTHER_IP, "www.other.test")
        assert resp.startswith(b"HTTP/1.1 200"), resp
        assert b"hello from 192.0.2.20 for www.other.test" in resp
        assert dns_query("www.other.test") == (0, [OTHER_IP])

        # A bad policy is refused whole, naming the rule; the current one stays.
        bad = {"allow": ["ok.test", "*bad.test"]}
        reply = world.ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": bad})
        assert reply["op"] == "nack" and "allow[1]" in reply["error"] and "*bad.test" in reply["error"]
        assert http_get(OTHER_IP, "www.other.test").startswith(b"HTTP/1.1 200")
    finally:
        assert world.ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": POLICY})["op"] == "ack"
    assert http_get(OTHER_IP, "www.other.test").startswith(b"HTTP/1.1 403")


def test_control_protocol_errors(world):
    ctl = world.ctl
    assert ctl.request({"op": "ping"}) == {"op": "ack", "seq": ctl.seq}
    reply = ctl.request({"op": "frobnicate"})
    assert reply["op"] == "nack" and "unknown op" in reply["error"]
    reply = ctl.request({"op": "policy", "sandbox": "sb-nope", "policy": POLICY})
    assert reply["op"] == "nack" and "sb-nope" in reply["error"]
    reply = ctl.request({"op": "add", "sandbox": "sb-x", "policy": POLICY})
    assert reply["op"] == "nack" and "3 fds" in reply["error"]
    reply = ctl.request({"op": "add", "sandbox": "bad id!", "policy": POLICY})
    assert reply["op"] == "nack" and "sandbox" in reply["error"]
    reply = ctl.request({"op": "policy", "sandbox": SANDBOX, "policy": POLICY, "extra": 1})
    assert reply["op"] == "nack" and "extra" in reply["error"]
    ctl.send_raw(b"[1,2")
    reply = ctl.wait_for(lambda m: m.get("op") == "nack" and m.get("seq") is None, what="nack for garbage")
    assert "malformed" in reply["error"]
    assert ctl.request({"op": "ping"})["op"] == "ack"


def test_remove_closes_listeners_and_connections(world):
    ctl = world.ctl
    assert dns_query("echo.allowed.test") == (0, [ALLOWED_IP])
    conn = guest_connect(ALLOWED_IP, 7000)
    conn.sendall(b"x")
    assert conn.recv(10) == b"x"

    assert ctl.request({"op": "remove", "sandbox": SANDBOX})["op"] == "ack"
    # The open connection ends...
    assert read_all(conn) == b""
    conn.close()
    world.ctl.wait_event("network.close", host="echo.allowed.test", reason="sandbox removed")
    # ...and nothing listens any more.
    with pytest.raises(ConnectionRefusedError):
        guest_connect(ALLOWED_IP, 80)
    with pytest.raises(OSError):
        dns_query("www.allowed.test", timeout=0.5)
    # Removing again is harmless.
    assert ctl.request({"op": "remove", "sandbox": SANDBOX})["op"] == "ack"

    # Added back (as after a restart of the gateway): works again.
    assert add_sandbox(ctl)["op"] == "ack"
    assert http_get(ALLOWED_IP, "www.allowed.test").startswith(b"HTTP/1.1 200")


def test_connection_limit_and_idle_timeout(world):
    ctl = world.ctl
    proc, ctl2 = start_egress(["--max-connections-per-sandbox", "1", "--idle-timeout-s", "1"])
    try:
        assert ctl.request({"op": "remove", "sandbox": SANDBOX})["op"] == "ack"
        assert add_sandbox(ctl2)["op"] == "ack"
        held = guest_connect(ALLOWED_IP, 80)  # holds the only slot while it says nothing
        try:
            time.sleep(0.2)
            assert_closed_at_once(ALLOWED_IP, 80)
            d = ctl2.wait_event("network.deny", reason="connection limit")["data"]
            assert d["dst"] == "192.0.2.10:80"
        finally:
            held.close()

        # An allowed connection without traffic ends after --idle-timeout-s.
        assert dns_query("echo.allowed.test") == (0, [ALLOWED_IP])
        # (once the held connection has given its slot back)
        ctl2.wait_event("network.deny", reason="the guest closed the connection before sending its request")
        time.sleep(0.1)
        with guest_connect(ALLOWED_IP, 7000) as s:
            start = time.monotonic()
            s.sendall(b"x")
            assert s.recv(1) == b"x"
            assert read_all(s) == b""
            assert 0.8 < time.monotonic() - start < 4
        ctl2.wait_event("network.close", port=7000, reason="idle timeout")
        assert ctl2.request({"op": "remove", "sandbox": SANDBOX})["op"] == "ack"
    finally:
        proc.kill()
        proc.wait()
        assert add_sandbox(ctl)["op"] == "ack"


def test_tenant_connection_limit_and_sniff_deadline(world):
    """Issue 17: a tenant's sandboxes share --max-connections-per-tenant (a
    sandbox without a tenant has its own limit only), and a connection that
    sends no request head within --sniff-timeout-ms gives its slot back."""
    ctl = world.ctl
    proc, ctl2 = start_egress(["--max-connections-per-tenant", "2", "--sniff-timeout-ms", "1000"])
    try:
        assert ctl.request({"op": "remove", "sandbox": SANDBOX})["op"] == "ack"
        assert eh.add_sandbox(ctl2, NS_SBX, SANDBOX, POLICY, tenant="t1")["op"] == "ack"
        held = [guest_connect(ALLOWED_IP, 80) for _ in range(2)]  # silent: no request head
        try:
            time.sleep(0.2)
            assert_closed_at_once(ALLOWED_IP, 80)  # the tenant's third
            ctl2.wait_event("network.deny", reason="connection limit")
            # Ended by the 1 s deadline (a recv waits at most TIMEOUT, 5 s).
            for s in held:
                read_all(s)
            ctl2.wait_event("network.deny", reason="no complete HTTP request head within the time limit")
        finally:
            for s in held:
                s.close()
        assert wait_until(lambda: http_get(ALLOWED_IP, "www.allowed.test").startswith(b"HTTP/1.1 200"))

        # Added again without a tenant: two silent connections and a request.
        assert ctl2.request({"op": "remove", "sandbox": SANDBOX})["op"] == "ack"
        assert eh.add_sandbox(ctl2, NS_SBX, SANDBOX, POLICY, tenant=None)["op"] == "ack"
        held = [guest_connect(ALLOWED_IP, 80) for _ in range(2)]
        try:
            time.sleep(0.2)
            assert http_get(ALLOWED_IP, "www.allowed.test").startswith(b"HTTP/1.1 200")
        finally:
            for s in held:
                s.close()
        assert ctl2.request({"op": "remove", "sandbox": SANDBOX})["op"] == "ack"
    finally:
        proc.kill()
        proc.wait()
        assert add_sandbox(ctl)["op"] == "ack"


def test_exits_when_the_control_socket_closes(world):
    proc, ctl = start_egress()
    ctl.sock.shutdown(socket.SHUT_RDWR)
    ctl.sock.close()
    assert proc.wait(timeout=TIMEOUT) == 0


def test_refuses_bad_command_lines():
    if not os.access(EGRESS, os.X_OK):
        pytest.skip(f"{EGRESS} is not built (make)")
    out = subprocess.run([EGRESS, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("airlock-egress ")
    for args, message in (([], "--control-fd is required"),
                          (["--control-fd", "0"], "not a SOCK_SEQPACKET socket"),
                          (["--control-fd", "3", "--resolver", "dns.example"], "resolver"),
                          (["--control-fd", "3", "--trust-ca", "/nonexistent"], "--trust-ca"),
                          (["--control-fd", "3", "--public-cidr", "192.0.2.1/24"], "--public-cidr"),
                          (["--control-fd", "3", "--max-connections", "0"], "--max-connections"),
                          (["--bogus"], "unknown option")):
        out = subprocess.run([EGRESS, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr, (args, out.stderr)
