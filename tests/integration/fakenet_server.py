# SPDX-License-Identifier: Apache-2.0
"""The servers of the fake internet (see fakenet.py): HTTP, HTTPS, TCP and UDP
echo, and an authoritative DNS server for `.test`, all in one process, stdlib
only. fakenet.py runs it inside the internet namespace:

    ip netns exec NS /usr/bin/python3 fakenet_server.py CONFIG.json

CONFIG (written by fakenet.py) names the listeners, the certificate of each
address, the DNS zone and the event log. Every event (a DNS query, a TCP
connection, a UDP datagram, a TLS handshake, an HTTP request) is one JSON line
appended to the log *before* the server answers it, so a client that got its
answer can read the event. The process prints "ready" once every listener is
bound, and exits when its stdin reaches EOF (its parent went away).
"""
import hashlib
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

MIB = 1024 * 1024
BIG_SIZE = 100 * MIB
CHUNK = MIB


# ----------------------------------------------------------------- the log

class Log:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lock = threading.Lock()
        self.seq = 0

    def event(self, kind, **fields):
        with self.lock:
            self.seq += 1
            rec = {"kind": kind, "seq": self.seq, "time": time.time(), **fields}
            os.write(self.fd, (json.dumps(rec, sort_keys=True) + "\n").encode())


LOG = None


def addr(a):
    return [a[0], a[1]]


# ----------------------------------------------------------------- deterministic bytes

def chunk_bytes(i):
    """Mebibyte i of the deterministic stream behind /big and /bytes/N."""
    return hashlib.shake_256(b"airlock-fakenet-big:%d" % i).digest(CHUNK)


def stream_bytes(n):
    """Yields the first n bytes of the stream in pieces of at most 1 MiB."""
    i = 0
    while n > 0:
        c = chunk_bytes(i)
        if n < len(c):
            c = c[:n]
        yield c
        n -= len(c)
        i += 1


# ----------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "airlock-fakenet/1"
    sys_version = ""
    timeout = 120

    # Set per connection by serve_http().
    scheme = "http"
    sni = None
    local = None
    primary = None

    def log_message(self, fmt, *args):  # quiet: the JSON log is the record
        pass

    def vhost(self):
        host = self.headers.get("Host")
        if host:
            h = host.strip().lower()
            if h.startswith("["):
                h = h[1:h.find("]")] if "]" in h else h
            elif ":" in h:
                h = h.rsplit(":", 1)[0]
            return h.rstrip(".")
        if self.sni:
            return self.sni.lower()
        return self.primary

    def _record(self):
        LOG.event("http", scheme=self.scheme, local=addr(self.local), remote=addr(self.client_address),
                  sni=self.sni, method=self.command, path=self.path, version=self.request_version,
                  host=self.headers.get("Host"), vhost=self.vhost(), headers=[[k, v] for k, v in self.headers.items()])

    def _send(self, status, body, ctype="text/plain; charset=utf-8", extra=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_stream(self, n):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if self.command != "HEAD":
            for c in stream_bytes(n):
                self.wfile.write(c)

    def _read_body(self):
        """Reads the request body (Content-Length or chunked); returns (length, sha256)."""
        h = hashlib.sha256()
        total = 0
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                left = size
                while left:
                    d = self.rfile.read(min(left, CHUNK))
                    if not d:
                        raise ConnectionError("short chunked body")
                    h.update(d)
                    total += len(d)
                    left -= len(d)
                self.rfile.readline(16)
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                d = self.rfile.read(min(left, CHUNK))
                if not d:
                    raise ConnectionError("short body")
                h.update(d)
                total += len(d)
                left -= len(d)
        return total, h.hexdigest()

    def _echo_variant(self, path):
        """Reflects the request's header fields, as a careless API's error
        page would (issue 17: secrets coming back): .../echo-chunked in
        5-byte chunks, .../echo-records in 3-byte writes (one TLS record
        each), .../echo-gzip compressed whatever the client accepts."""
        body = json.dumps({"headers": [[k, v] for k, v in self.headers.items()]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if path.endswith("/echo-gzip"):
            import gzip
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        if path.endswith("/echo-chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.command != "HEAD":
                for i in range(0, len(body), 5):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(body[i:i + 5]), body[i:i + 5]))
                self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            step = 3 if path.endswith("/echo-records") else len(body) or 1
            for i in range(0, len(body), step):
                self.wfile.write(body[i:i + step])

    def _handle(self):
        self._record()
        path = self.path.split("?", 1)[0]
        if self.command in ("POST", "PUT", "PATCH"):
            n, digest = self._read_body()
            if path == "/upload":
                return self._send(200, json.dumps({"length": n, "sha256": digest}) + "\n", "application/json")
        if path == "/":
            v = self.vhost()
            return self._send(200, f"hello from {v}\naddress: {self.local[0]}\nsni: {self.sni or '-'}\n"
                                   f"host: {self.headers.get('Host') or '-'}\nscheme: {self.scheme}\n")
        if path == "/big":
            return self._send_stream(BIG_SIZE)
        if path.startswith("/bytes/"):
            try:
                n = int(path[len("/bytes/"):])
            except ValueError:
                n = -1
            if not 0 <= n <= BIG_SIZE:
                return self._send(400, f"N must be 0..{BIG_SIZE}\n")
            return self._send_stream(n)
        if path == "/redirect":
            # /redirect?to=URL: 302 to URL (secrets must not follow it)
            from urllib.parse import parse_qs, urlsplit
            to = parse_qs(urlsplit(self.path).query).get("to", [""])[0]
            if not to.startswith(("http://", "https://")):
                return self._send(400, "to must be an http(s) URL\n")
            return self._send(302, f"see {to}\n", extra=[("Location", to)])
        if path.endswith(("/echo-chunked", "/echo-records", "/echo-gzip")):
            return self._echo_variant(path)
        if path == "/echo-headers" or path.endswith("/echo-headers"):
            hdrs = {}
            for k, v in self.headers.items():
                hdrs[k.lower()] = v
            body = {"method": self.command, "path": self.path, "vhost": self.vhost(), "sni": self.sni,
                    "scheme": self.scheme, "local": addr(self.local), "remote": addr(self.client_address),
                    "headers": hdrs, "raw_headers": [[k, v] for k, v in self.headers.items()]}
            return self._send(200, json.dumps(body, indent=1) + "\n", "application/json")
        if path.startswith("/delay/"):
            try:
                s = float(path[len("/delay/"):])
            except ValueError:
                s = -1
            if not 0 <= s <= 120:
                return self._send(400, "delay must be 0..120 seconds\n")
            time.sleep(s)
            return self._send(200, f"slept {s}\n")
        if path.startswith("/status/"):
            try:
                code = int(path[len("/status/"):])
            except ValueError:
                code = 0
            if not 200 <= code <= 599:
                return self._send(400, "status must be 200..599\n")
            return self._send(code, f"status {code}\n")
        return self._send(404, "not found\n")

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_CONNECT = _handle


class _ServerShim:
    """What BaseHTTPRequestHandler wants of a server (nothing, really)."""
    server_name = "fakenet"
    server_port = 0


def serve_http(conn, peer, local, scheme, sni, primary):
    cls = type("H", (Handler,), {"scheme": scheme, "sni": sni, "local": local, "primary": primary})
    try:
        cls(conn, peer, _ServerShim())
    except (OSError, ValueError, ssl.SSLError):
        pass


# ----------------------------------------------------------------- listeners

def tcp_listener(ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(256)
    return s


def accept_loop(lsock, kind, on_conn):
    while True:
        try:
            conn, peer = lsock.accept()
        except OSError:
            continue
        local = conn.getsockname()
        LOG.event("tcp", listener=kind, local=addr(local), remote=addr(peer))
        threading.Thread(target=_conn_thread, args=(on_conn, conn, peer, local), daemon=True).start()


def _conn_thread(on_conn, conn, peer, local):
    try:
        on_conn(conn, peer, local)
    except Exception as e:  # one connection never takes the server down
        try:
            LOG.event("error", local=addr(local), remote=addr(peer), error=repr(e))
        except Exception:
            pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def make_tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])

    def sni_cb(sslsock, name, _ctx):
        sslsock.fakenet_sni = name
        return None

    ctx.sni_callback = sni_cb
    return ctx


def on_http(primary):
    def f(conn, peer, local):
        conn.settimeout(120)
        serve_http(conn, peer, local, "http", None, primary)
    return f


def on_https(ctx, primary):
    def f(conn, peer, local):
        conn.settimeout(120)
        tls = ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        try:
            tls.do_handshake()
        except (ssl.SSLError, OSError) as e:
            LOG.event("tls", local=addr(local), remote=addr(peer), sni=getattr(tls, "fakenet_sni", None),
                      ok=False, error=str(e))
            tls.close()
            return
        sni = getattr(tls, "fakenet_sni", None)
        LOG.event("tls", local=addr(local), remote=addr(peer), sni=sni, ok=True, version=tls.version(),
                  alpn=tls.selected_alpn_protocol())
        try:
            serve_http(tls, peer, local, "https", sni, primary)
        finally:
            tls.close()
    return f


def on_tcp_echo(conn, peer, local):
    conn.settimeout(300)
    total = 0
    head = b""
    try:
        while True:
            d = conn.recv(65536)
            if not d:
                break
            if len(head) < 1024:
                head += d[:1024 - len(head)]
            total += len(d)
            conn.sendall(d)
    except OSError:
        pass
    LOG.event("tcp_close", local=addr(local), remote=addr(peer), bytes=total, head=head.hex())


def udp_echo_loop(s):
    local = s.getsockname()
    while True:
        try:
            d, peer = s.recvfrom(65535)
        except OSError:
            continue
        LOG.event("udp", local=addr(local), remote=addr(peer), bytes=len(d), head=d[:1024].hex())
        try:
            s.sendto(d, peer)
        except OSError:
            pass


# ----------------------------------------------------------------- DNS

TYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA", 33: "SRV",
         41: "OPT", 64: "SVCB", 65: "HTTPS", 252: "AXFR", 255: "ANY"}
TYPE_NUM = {v: k for k, v in TYPES.items()}
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5


class DnsError(Exception):
    pass


def read_name(msg, off):
    """(name with the case as sent, offset after the name)."""
    labels = []
    end = None
    jumps = 0
    while True:
        if off >= len(msg):
            raise DnsError("name runs past the message")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(msg):
                raise DnsError("truncated pointer")
            if end is None:
                end = off + 2
            off = ((n & 0x3F) << 8) | msg[off + 1]
            jumps += 1
            if jumps > 20:
                raise DnsError("pointer loop")
            continue
        if n & 0xC0:
            raise DnsError("bad label type")
        off += 1
        if n == 0:
            break
        if off + n > len(msg):
            raise DnsError("label runs past the message")
        labels.append(msg[off:off + n].decode("latin-1"))
        off += n
    return ".".join(labels), (end if end is not None else off)


def encode_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        if label:
            b = label.encode("latin-1")
            out += bytes([len(b)]) + b
    return out + b"\0"


def rr(name, rtype, ttl, rdata):
    return encode_name(name) + struct.pack(">HHIH", rtype, 1, ttl, len(rdata)) + rdata


class Zone:
    def __init__(self, cfg):
        self.origin = cfg["origin"].rstrip(".").lower()
        # Names under these never get an answer (servers that never answer).
        self.silent = [z.rstrip(".").lower() for z in cfg.get("silent", [])]
        self.ttl = cfg["ttl"]
        self.records = {}
        for name, recs in cfg["records"].items():
            self.records[name.rstrip(".").lower()] = [(t, v) for t, v in recs]

    def in_zone(self, name):
        return name == self.origin or name.endswith("." + self.origin)

    def rdata(self, rtype, value):
        if rtype == "A":
            return 1, socket.inet_pton(socket.AF_INET, value)
        if rtype == "AAAA":
            return 28, socket.inet_pton(socket.AF_INET6, value)
        if rtype == "CNAME":
            return 5, encode_name(value)
        if rtype == "TXT":
            b = value.encode()
            return 16, bytes([len(b)]) + b
        raise ValueError(rtype)

    def soa(self):
        rdata = encode_name("ns." + self.origin) + encode_name("hostmaster." + self.origin) + \
            struct.pack(">IIIII", 1, 3600, 600, 86400, self.ttl)
        return rr(self.origin, 6, self.ttl, rdata)

    def answer(self, qname, qtype):
        """(rcode, [answer RRs], [authority RRs])."""
        name = qname.rstrip(".").lower()
        answers = []
        for _ in range(10):
            recs = self.records.get(name)
            if recs is None:
                if answers:  # a CNAME whose target does not exist
                    return NOERROR, answers, []
                if self.in_zone(name) and any(n.endswith("." + name) for n in self.records):
                    return NOERROR, [], [self.soa()]  # an empty non-terminal
                return NXDOMAIN, [], [self.soa()]
            cname = [v for t, v in recs if t == "CNAME"]
            if cname and qtype != 5:
                t, d = self.rdata("CNAME", cname[0])
                answers.append(rr(name, t, self.ttl, d))
                name = cname[0].rstrip(".").lower()
                continue
            for t, v in recs:
                num, d = self.rdata(t, v)
                if num == qtype or qtype == 255:
                    answers.append(rr(name, num, self.ttl, d))
            return NOERROR, answers, ([] if answers else [self.soa()])
        return SERVFAIL, [], []


def dns_handle(zone, msg, transport, peer, local):
    """Returns the answer to one DNS message (None: drop it)."""
    if len(msg) < 12:
        LOG.event("dns", transport=transport, remote=addr(peer), local=addr(local), error="short message",
                  name=None, qname=None, type=None, qtype=None)
        return None
    qid, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", msg[:12])
    opcode = (flags >> 11) & 0xF
    rd = flags & 0x0100

    def reply(rcode, question=b"", answers=(), authority=(), additional=(), tc=False):
        f = 0x8000 | (opcode << 11) | 0x0400 | rd | rcode | (0x0200 if tc else 0)
        return struct.pack(">HHHHHH", qid, f, 1 if question else 0, len(answers), len(authority),
                           len(additional)) + question + b"".join(answers) + b"".join(authority) + \
            b"".join(additional)

    if flags & 0x8000:
        return None  # a response: never answer one
    name = qtype = qclass = None
    udp_size = None
    try:
        if qd != 1:
            raise DnsError(f"{qd} questions")
        name, off = read_name(msg, 12)
        if off + 4 > len(msg):
            raise DnsError("truncated question")
        qtype, qclass = struct.unpack(">HH", msg[off:off + 4])
        question = msg[12:off + 4]
        off += 4
        # Skip answer and authority; find an OPT in the additional section.
        for i in range(an + ns + ar):
            _, off = read_name(msg, off)
            if off + 10 > len(msg):
                raise DnsError("truncated record")
            t, cls, _ttl, rdlen = struct.unpack(">HHIH", msg[off:off + 10])
            off += 10 + rdlen
            if i >= an + ns and t == 41:
                udp_size = cls
    except DnsError as e:
        LOG.event("dns", transport=transport, remote=addr(peer), local=addr(local), id=qid, error=str(e),
                  name=name, qname=name.rstrip(".").lower() if name else None,
                  type=TYPES.get(qtype, f"TYPE{qtype}") if qtype is not None else None, qtype=qtype)
        return reply(FORMERR)
    LOG.event("dns", transport=transport, remote=addr(peer), local=addr(local), id=qid, name=name,
              qname=name.rstrip(".").lower(), type=TYPES.get(qtype, f"TYPE{qtype}"), qtype=qtype, qclass=qclass,
              opcode=opcode, edns=udp_size)
    opt = [b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)] if udp_size is not None else []
    qn = name.rstrip(".").lower()
    if any(qn == z or qn.endswith("." + z) for z in zone.silent):
        return None  # logged above, never answered
    if opcode != 0:
        return reply(NOTIMP, question, additional=opt)
    if qclass not in (1, 255) or qtype in (252, 251):
        return reply(REFUSED, question, additional=opt)
    if not zone.in_zone(name.rstrip(".").lower()):
        # Not ours: a real authoritative-only server would refuse; the plan
        # says NXDOMAIN for every name it does not know.
        return reply(NXDOMAIN, question, additional=opt)
    rcode, answers, authority = zone.answer(name, qtype)
    out = reply(rcode, question, answers, authority, opt)
    if transport == "udp":
        limit = max(512, min(udp_size or 512, 4096))
        if len(out) > limit:
            out = reply(rcode, question, additional=opt, tc=True)
    return out


def dns_udp_loop(zone, s):
    local = s.getsockname()
    while True:
        try:
            msg, peer = s.recvfrom(65535)
        except OSError:
            continue
        try:
            out = dns_handle(zone, msg, "udp", peer, local)
            if out:
                s.sendto(out, peer)
        except Exception as e:
            LOG.event("error", local=addr(local), remote=addr(peer), error=repr(e))


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        d = conn.recv(n - len(buf))
        if not d:
            return None
        buf += d
    return buf


def on_dns_tcp(zone):
    def f(conn, peer, local):
        conn.settimeout(30)
        while True:
            hdr = recv_exact(conn, 2)
            if hdr is None:
                return
            msg = recv_exact(conn, struct.unpack(">H", hdr)[0])
            if msg is None:
                return
            out = dns_handle(zone, msg, "tcp", peer, local)
            if out is None:
                return
            conn.sendall(struct.pack(">H", len(out)) + out)
    return f


# ----------------------------------------------------------------- main

def main():
    global LOG
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    LOG = Log(cfg["log"])
    zone = Zone(cfg["zone"])
    contexts = {ip: make_tls_context(c["cert"], c["key"]) for ip, c in cfg["certs"].items()}
    threads = []
    for ln in cfg["listeners"]:
        ip, port, kind = ln["ip"], ln["port"], ln["kind"]
        primary = cfg["primary"].get(ip, ip)
        if kind == "udp-echo" or kind == "dns-udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, port))
            target, args = (udp_echo_loop, (s,)) if kind == "udp-echo" else (dns_udp_loop, (zone, s))
        else:
            s = tcp_listener(ip, port)
            handler = {"http": lambda: on_http(primary),
                       "https": lambda: on_https(contexts[ip], primary),
                       "tcp-echo": lambda: on_tcp_echo,
                       "dns-tcp": lambda: on_dns_tcp(zone)}[kind]()
            target, args = accept_loop, (s, kind, handler)
        threads.append(threading.Thread(target=target, args=args, daemon=True))
    for t in threads:
        t.start()
    print("ready", flush=True)
    # Live as long as the parent: it holds the other end of stdin.
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
