# SPDX-License-Identifier: Apache-2.0
"""The port proxy (issue 22; docs/api.md, "Ports"): airlockd --proxy-listen
in front of a `base` sandbox's ports. One daemon (with --listen for the
tenants' tokens) and one sandbox for the module: `python3 -m http.server
8000` and a small stdlib app on 8001 (headers it saw, a streamed answer, a
WebSocket echo), both background processes of the guest."""
import base64
import hashlib
import http.client
import json
import os
import re
import socket
import struct
import time

import pytest

from apiutil import ListeningDaemon, TcpApi, free_port
from conftest import _report_on_failure, wait_for

UNKNOWN_ID = "sb-0123456789abcdef"

APP = r'''
import base64, hashlib, json, socket, struct, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf

class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.endswith("/stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                data = b"data: tick %d\n\n" % i
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(1.5)
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers["Sec-WebSocket-Key"]
            accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            sock = self.connection
            try:
                while True:
                    b0, b1 = recv_exact(sock, 2)
                    n = b1 & 0x7F
                    if n == 126:
                        n = struct.unpack(">H", recv_exact(sock, 2))[0]
                    mask = recv_exact(sock, 4)
                    data = bytes(c ^ mask[i % 4] for i, c in enumerate(recv_exact(sock, n)))
                    if b0 & 0x0F == 8:
                        sock.sendall(b"\x88\x00")
                        break
                    sock.sendall(bytes([0x81, len(data)]) + data if len(data) < 126 else
                                 bytes([0x81, 126]) + struct.pack(">H", len(data)) + data)
            except EOFError:
                pass
            self.close_connection = True
            return
        self.reply(200, json.dumps({"path": self.path, "headers": dict(self.headers.items()),
                                    "peer": list(self.client_address)}).encode())

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n) if n else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        self.reply(200, json.dumps({"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}).encode())

ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), App).serve_forever()
'''


class ProxyDaemon(ListeningDaemon):
    def __init__(self, base_dir, port, proxy_port):
        super().__init__(base_dir, port)
        self.proxy_port = proxy_port

    def argv(self):
        return super().argv() + ["--proxy-listen", f"127.0.0.1:{self.proxy_port}", "--proxy-header-timeout-s", "3",
                                 "--proxy-max-body-mib", "1"]


@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    d = ProxyDaemon(tmp_path_factory.mktemp("airlockd-proxy"), free_port(), free_port()).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture(scope="module")
def tokens(pd):
    out = {}
    for tenant in ("pa", "pb"):
        r = pd.api.request("POST", "/v1/tokens", body={"tenant": tenant, "description": "proxy test"})
        assert r.status == 201, r
        out[tenant] = r.json["token"]
    return out


def proxy_request(pd, method, path, host=None, headers=None, body=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", pd.proxy_port, timeout=timeout)
    hdrs = dict(headers or {})
    if host:
        hdrs["Host"] = host
    conn.request(method, path, body=body, headers=hdrs)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


def raw_exchange(pd, data, read_timeout=15):
    """Sends bytes as they are; what comes back until the proxy closes."""
    s = socket.create_connection(("127.0.0.1", pd.proxy_port), timeout=read_timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                part = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not part:
                break
            out += part
        return out
    finally:
        s.close()


def status_of(raw):
    assert raw.startswith(b"HTTP/1.1 "), raw[:200]
    return int(raw[9:12])


@pytest.fixture(scope="module")
def box(pd, tokens):
    """A base sandbox of tenant pa running http.server on 8000 and the app on 8001."""
    api = pd.api
    sb = api.create_ok(template="base", tenant="pa", memory_mib=512)
    sid = sb["id"]
    r = api.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/app.py", raw=APP.encode())
    assert r.status == 201, r
    r = api.request("POST", f"/v1/sandboxes/{sid}/files/mkdir", body={"path": "/tmp/www", "parents": True})
    assert r.status == 201, r
    r = api.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/www/hello.txt", raw=b"hello from the guest\n")
    assert r.status == 201, r
    for cmd in (["python3", "-m", "http.server", "8000", "--directory", "/tmp/www"], ["python3", "/tmp/app.py", "8001"]):
        r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": cmd})
        assert r.status == 201, r
    r = api.request("GET", f"/v1/sandboxes/{sid}/ports")
    assert r.status == 200, r
    token = r.json["traffic_token"]
    assert token.startswith("att_") and r.json["proxy"] is True, r
    box = {"id": sid, "token": token}
    deadline = time.monotonic() + 120
    for port in (8000, 8001):
        while True:
            st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/{port}/", headers={"X-Airlock-Traffic-Token": token})
            if st == 200:
                break
            assert st == 502 and time.monotonic() < deadline, (st, data)
            time.sleep(1)
    yield box
    api.delete(sid)


@pytest.fixture(autouse=True)
def report(pd, request):
    yield
    _report_on_failure(request, pd)


def host_of(pd, sid, port):
    return f"{port}-{sid}.localhost:{pd.proxy_port}"


def test_host_and_path_forms(pd, box):
    sid, tok = box["id"], box["token"]
    hdr = {"X-Airlock-Traffic-Token": tok}
    st, _, data = proxy_request(pd, "GET", "/hello.txt", host=host_of(pd, sid, 8000), headers=hdr)
    assert (st, data) == (200, b"hello from the guest\n")
    # The domain is matched case-insensitively; E2B's header works too.
    st, _, data = proxy_request(pd, "GET", "/hello.txt", host=host_of(pd, sid, 8000).upper(),
                                headers={"e2b-traffic-access-token": tok})
    assert (st, data) == (200, b"hello from the guest\n")
    st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/8000/hello.txt", headers=hdr)
    assert (st, data) == (200, b"hello from the guest\n")
    # What the guest sees: no token, the rest of the path, X-Forwarded-*.
    st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/8001/a/b?c=d",
                                headers={**hdr, "Cookie": "x=1; airlock_token=att_nope; y=2",
                                         "X-Forwarded-For": "6.6.6.6", "Connection": "X-Private",
                                         "X-Private": "hop"})
    assert st == 200, data
    seen = json.loads(data)
    assert seen["path"] == "/a/b?c=d"
    h = {k.lower(): v for k, v in seen["headers"].items()}
    assert "x-airlock-traffic-token" not in h and "x-private" not in h, h
    assert h["cookie"] == "x=1; y=2", h
    assert h["x-forwarded-for"] == "127.0.0.1" and h["x-forwarded-proto"] == "http", h
    assert h["x-forwarded-prefix"] == f"/sandbox/{sid}/8001", h
    assert "att_" not in data.decode()
    # Keep-alive: several requests, two sandboxes' URLs, one connection.
    conn = http.client.HTTPConnection("127.0.0.1", pd.proxy_port, timeout=30)
    for method, path, status in (("GET", f"/sandbox/{sid}/8000/hello.txt", 200),
                                 ("HEAD", f"/sandbox/{UNKNOWN_ID}/8000/", 404), ("HEAD", "/nowhere", 404),
                                 ("HEAD", f"/sandbox/{sid}/8000/hello.txt", 200),
                                 ("GET", f"/sandbox/{UNKNOWN_ID}/8000/", 404),
                                 ("GET", f"/sandbox/{sid}/8001/x", 200)):
        conn.request(method, path, headers=hdr)
        r = conn.getresponse()
        data = r.read()
        assert r.status == status and (method == "GET" or data == b""), (method, path, r.status, data)
    conn.close()


def test_access(pd, box, tokens):
    sid = box["id"]
    path = f"/sandbox/{sid}/8001/who"
    st, hdrs, data = proxy_request(pd, "GET", path)
    assert st == 401 and b"traffic token" in data, data
    st, _, data = proxy_request(pd, "GET", path, headers={"X-Airlock-Traffic-Token": "att_" + "0" * 64})
    assert st == 401, data
    st, _, data = proxy_request(pd, "GET", path, headers={"Authorization": f"Bearer {tokens['pb']}"})
    assert st == 403 and b"another tenant" in data, data
    st, _, data = proxy_request(pd, "GET", path, headers={"Authorization": f"Bearer {tokens['pa']}"})
    assert st == 200, data
    h = {k.lower(): v for k, v in json.loads(data)["headers"].items()}
    assert "authorization" not in h, h
    # A tenant token is never forwarded, even beside another Authorization field.
    raw = (f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Airlock-Traffic-Token: {box['token']}\r\n"
           f"Authorization: Bearer {tokens['pa']}\r\nAuthorization: Basic eDp5\r\nConnection: close\r\n\r\n")
    out = raw_exchange(pd, raw.encode())
    assert status_of(out) == 200, out
    assert b"alk_" not in out and b"uthorization" not in out.split(b"\r\n\r\n", 1)[1], out
    # ?airlock_token=: a cookie and a redirect to the URL without it.
    st, hdrs, _ = proxy_request(pd, "GET", f"{path}?a=1&airlock_token={box['token']}")
    assert st == 302, hdrs
    assert hdrs["Location"] == f"{path}?a=1", hdrs
    cookie = hdrs["Set-Cookie"]
    assert cookie.startswith(f"airlock_token={box['token']};") and "HttpOnly" in cookie, cookie
    assert f"Path=/sandbox/{sid}/" in cookie, cookie
    st, _, data = proxy_request(pd, "GET", f"{path}?a=1", headers={"Cookie": cookie.split(";")[0]})
    assert st == 200 and b"att_" not in data, data
    # Unknown sandbox, bad URL, nothing listening.
    st, _, data = proxy_request(pd, "GET", f"/sandbox/{UNKNOWN_ID}/8000/")
    assert st == 404, data
    st, _, data = proxy_request(pd, "GET", "/nowhere")
    assert st == 404 and b"/sandbox/<sandbox id>/<port>/" in data, data
    st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/9/", headers={"X-Airlock-Traffic-Token": box["token"]})
    assert st == 502 and b"port 9" in data, data
    m = pd.api.request("GET", "/metrics").raw.decode()
    assert 'airlock_proxy_requests_total{code="401"}' in m and "airlock_proxy_connections" in m
    missing = re.search(r'airlock_auth_failures_total\{reason="missing"\} (\d+)', m)
    assert missing and int(missing.group(1)) >= 1, m


def test_kept_alive_guest_connections(pd, box):
    """One client connection, several requests: those to the same port ride
    one guest connection (the guest accepts once); another port, or another
    sandbox in the path form, gets its own, and each is authorized anew."""
    sid, tok = box["id"], box["token"]
    conn = http.client.HTTPConnection("127.0.0.1", pd.proxy_port, timeout=60)

    def get(path, headers=None):
        conn.request("GET", path, headers=headers if headers is not None else {"X-Airlock-Traffic-Token": tok})
        r = conn.getresponse()
        return r.status, r.read()

    try:
        peers = []
        for _ in range(3):
            st, data = get(f"/sandbox/{sid}/8001/x")
            assert st == 200, data
            peers.append(tuple(json.loads(data)["peer"]))
        assert peers[0][0] == "10.0.2.2" and len(set(peers)) == 1, peers
        # A refused request on the same connection (no token) reaches nothing.
        st, data = get(f"/sandbox/{sid}/8001/x", headers={})
        assert st == 401, data
        st, data = get(f"/sandbox/{sid}/8000/hello.txt")
        assert (st, data) == (200, b"hello from the guest\n")
        st, data = get(f"/sandbox/{sid}/8001/x")
        assert st == 200, data
        assert tuple(json.loads(data)["peer"]) != peers[0], "a guest connection outlived a request to another port"
    finally:
        conn.close()


def test_public_port(pd, box):
    sid = box["id"]
    r = pd.api.request("PUT", f"/v1/sandboxes/{sid}/ports/8000", body={"public": True})
    assert r.status == 200, r
    try:
        st, _, data = proxy_request(pd, "GET", "/hello.txt", host=host_of(pd, sid, 8000))
        assert (st, data) == (200, b"hello from the guest\n")
        st, _, _ = proxy_request(pd, "GET", "/", host=host_of(pd, sid, 8001))
        assert st == 401
    finally:
        r = pd.api.request("DELETE", f"/v1/sandboxes/{sid}/ports/8000")
        assert r.status in (200, 204), r
    st, _, _ = proxy_request(pd, "GET", "/hello.txt", host=host_of(pd, sid, 8000))
    assert st == 401


def test_bodies(pd, box):
    sid, tok = box["id"], box["token"]
    body = os.urandom(300 * 1024)
    st, _, data = proxy_request(pd, "POST", f"/sandbox/{sid}/8001/up", body=body,
                                headers={"X-Airlock-Traffic-Token": tok, "Content-Type": "application/octet-stream"})
    assert st == 200, data
    assert json.loads(data) == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    chunked = (f"POST /sandbox/{sid}/8001/up HTTP/1.1\r\nHost: x\r\nX-Airlock-Traffic-Token: {tok}\r\n"
               "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").encode()
    out = raw_exchange(pd, chunked)
    assert status_of(out) == 200, out
    assert json.loads(out.split(b"\r\n\r\n", 1)[1])["length"] == 11
    # Over --proxy-max-body-mib (1): refused before anything reaches the guest.
    big = (f"POST /sandbox/{sid}/8001/up HTTP/1.1\r\nHost: x\r\nX-Airlock-Traffic-Token: {tok}\r\n"
           f"Content-Length: {2 * 1024 * 1024}\r\n\r\n").encode()
    assert status_of(raw_exchange(pd, big)) == 413
    big_chunked = (f"POST /sandbox/{sid}/8001/up HTTP/1.1\r\nHost: x\r\nX-Airlock-Traffic-Token: {tok}\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n").encode() + (b"10000\r\n" + b"a" * 0x10000 + b"\r\n") * 20
    out = raw_exchange(pd, big_chunked)
    assert status_of(out) == 413, out[:300]


def test_streaming(pd, box):
    """A chunked (SSE) answer arrives as the guest writes it, not at its end."""
    sid = box["id"]
    s = socket.create_connection(("127.0.0.1", pd.proxy_port), timeout=30)
    try:
        t0 = time.monotonic()
        s.sendall(f"GET /stream HTTP/1.1\r\nHost: {host_of(pd, sid, 8001)}\r\n"
                  f"X-Airlock-Traffic-Token: {box['token']}\r\n\r\n".encode())
        got = b""
        while b"tick 0" not in got:
            part = s.recv(4096)
            assert part, got
            got += part
        first = time.monotonic() - t0
        while not got.endswith(b"0\r\n\r\n"):
            part = s.recv(4096)
            assert part, got
            got += part
        total = time.monotonic() - t0
        assert b"tick 2" in got and total - first > 2.0, (first, total)
        assert b"Transfer-Encoding: chunked" in got
        # The connection carries the next request.
        s.sendall(f"GET /x HTTP/1.1\r\nHost: {host_of(pd, sid, 8001)}\r\n"
                  f"X-Airlock-Traffic-Token: {box['token']}\r\nConnection: close\r\n\r\n".encode())
        rest = b""
        while True:
            part = s.recv(4096)
            if not part:
                break
            rest += part
        assert status_of(rest) == 200, rest
    finally:
        s.close()


def ws_frame(payload):
    mask = os.urandom(4)
    data = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + data


def test_websocket(pd, box):
    sid = box["id"]
    s = socket.create_connection(("127.0.0.1", pd.proxy_port), timeout=30)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(f"GET /sandbox/{sid}/8001/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"X-Airlock-Traffic-Token: {box['token']}\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            part = s.recv(4096)
            assert part, got
            got += part
        head, rest = got.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        assert b"Sec-WebSocket-Accept: " + accept in head, head
        for msg in (b"hello", b"through the proxy", b"x" * 100):
            s.sendall(ws_frame(msg))
            while len(rest) < 2 + len(msg):
                part = s.recv(4096)
                assert part, rest
                rest += part
            assert rest[:2 + len(msg)] == bytes([0x81, len(msg)]) + msg
            rest = rest[2 + len(msg):]
    finally:
        s.close()


def test_refused_heads(pd, box):
    sid, tok = box["id"], box["token"]
    # Content-Length with Transfer-Encoding: a smuggling attempt.
    smuggle = (f"POST /sandbox/{sid}/8001/up HTTP/1.1\r\nHost: x\r\nX-Airlock-Traffic-Token: {tok}\r\n"
               "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\n\r\n").encode()
    assert status_of(raw_exchange(pd, smuggle)) == 400
    assert status_of(raw_exchange(pd, b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n")) == 400
    # A head over 16 KiB.
    huge = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-F%d: %s\r\n" % (i, b"v" * 1000) for i in range(20)) + b"\r\n"
    assert status_of(raw_exchange(pd, huge)) == 431
    # Slowloris: a head that does not end within --proxy-header-timeout-s (3).
    s = socket.create_connection(("127.0.0.1", pd.proxy_port), timeout=30)
    try:
        t0 = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        out = b""
        for _ in range(10):
            time.sleep(0.5)
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        while True:
            try:
                part = s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                break
            if not part:
                break
            out += part
        assert status_of(out) == 408 and time.monotonic() - t0 < 15, out
    finally:
        s.close()


def test_paused_sandbox(pd, box):
    """Last: it pauses the module's sandbox, and auto_resume brings it back."""
    sid, tok = box["id"], box["token"]
    hdr = {"X-Airlock-Traffic-Token": tok}
    r = pd.api.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200, r
    st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/8000/hello.txt", headers=hdr)
    assert st == 409 and b"auto_resume" in data, data
    r = pd.api.request("POST", f"/v1/sandboxes/{sid}/timeout", body={"auto_resume": True})
    assert r.status == 200 and r.json["auto_resume"] is True, r
    st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/8000/hello.txt", headers=hdr, timeout=120)
    assert (st, data) == (200, b"hello from the guest\n")
    assert pd.api.get(sid).json["state"] == "running"


def test_proxied_traffic_is_activity(pd, box):
    """After test_paused_sandbox (auto_resume on): an idle timeout does not
    pause a sandbox whose port is being used through the proxy; once the
    requests stop it pauses, and the next request resumes it."""
    sid, hdr = box["id"], {"X-Airlock-Traffic-Token": box["token"]}
    r = pd.api.request("POST", f"/v1/sandboxes/{sid}/timeout", body={"idle_timeout_s": 6, "auto_resume": True})
    assert r.status == 200 and r.json["idle_timeout_s"] == 6, r
    seq0 = max([0] + [e["seq"] for e in events_of(pd, sid)])
    # 15 s of requests, one a second: more than twice the idle timeout, never idle for it.
    for _ in range(15):
        st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/8000/hello.txt", headers=hdr, timeout=60)
        assert st == 200, (st, data)
        time.sleep(1)
    timeouts = [e for e in events_of(pd, sid) if e["seq"] > seq0 and e["type"] == "sandbox.timeout"]
    assert timeouts == [], timeouts
    assert pd.api.get(sid).json["state"] == "running"
    # Nobody comes: the idle timeout pauses it.
    wait_for(lambda: pd.api.get(sid).json["state"] == "paused", 60, "the idle timeout to pause the sandbox")
    st, _, data = proxy_request(pd, "GET", f"/sandbox/{sid}/8000/hello.txt", headers=hdr, timeout=120)
    assert (st, data) == (200, b"hello from the guest\n")
    assert pd.api.get(sid).json["state"] == "running"
    pd.api.request("POST", f"/v1/sandboxes/{sid}/timeout", body={"idle_timeout_s": 0})


def events_of(pd, sid):
    r = pd.api.request("GET", f"/v1/events?sandbox={sid}")
    assert r.status == 200, r
    return [json.loads(line) for line in r.raw.decode().splitlines() if line.strip()]
