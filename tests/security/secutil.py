# SPDX-License-Identifier: Apache-2.0
"""Helpers of the security suite (tests/security): the attempt counter, the
integration fixtures' building blocks (loaded from tests/integration), guest
shell and curl, the API over the TCP listener from inside the fake
internet's host namespace, and two watchers that see what an attack reached:

- Sniffer: an AF_PACKET socket on the fake internet's side of its only link
  (`host0` in the internet namespace). Every packet that leaves the Airlock
  host toward "the internet" passes it: TCP SYNs, UDP, ICMP, IPv6, other
  ethertypes are recorded. The egress gateway's own traffic shows too (it is
  the only thing allowed to send), so attempts assert on what must NOT be
  there.
- Canary: TCP and UDP listeners on 0.0.0.0 of the host namespace (where
  airlockd and the gateway run) on the ports a guest would try: a guest
  that reached the host itself (HOST_IP, 127.0.0.1 through the gateway)
  lands here and is recorded.

Nothing here is mocked: the daemon, the gateway and the VMs are the real
binaries (see conftest.py).
"""
import base64
import contextlib
import http.client
import importlib.util
import json
import os
import re
import socket
import struct
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(os.path.dirname(HERE), "integration")
if INTEGRATION not in sys.path:
    sys.path.insert(0, INTEGRATION)


def _load_integration_conftest():
    """tests/integration/conftest.py under a name of its own: pytest gives
    every rootless conftest the module name `conftest`, so importing it by
    that name from here would find this directory's conftest instead."""
    name = "airlock_integration_conftest"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(INTEGRATION, "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


itc = _load_integration_conftest()
Daemon, Api, Response = itc.Daemon, itc.Api, itc.Response
stdout_bytes, wait_for, qemu_processes = itc.stdout_bytes, itc.wait_for, itc.qemu_processes
AIRLOCK, IMAGES = itc.AIRLOCK, itc.IMAGES

import fakenet as fn  # noqa: E402  (needs the sys.path entry above)

# ----------------------------------------------------------------- attempts

CATEGORIES = {
    "files": "1. Host files",
    "services": "2. Host services and other tenants",
    "egress": "3. Egress bypasses",
    "secrets": "4. Credential exfiltration",
    "api": "5. Control-API abuse",
    "snapshots": "6. Snapshot tampering",
    "floods": "7. Resource floods",
    "jail": "8. The jail",
    "fairness": "9. Egress fairness between tenants",
    "agent": "10. A hostile guest agent",
    "ceiling": "11. Ceiling bypasses",
    "requests": "12. Header reflection and request hiding",
    "fronting": "13. Fronting under inspection",
    "redaction": "14. Reflected-secret redaction",
    "cp": "15. Copies out of a sandbox and terminal text",
    "gateway": "16. The gateway's own jail",
    "ports": "17. Sandbox ports from outside",
    "templates": "18. Templates: builds, imports and their cache",
    "cluster": "19. Cluster mode: delegations, the front, the shared store",
}

MIN_ATTEMPTS = 260

RESULTS = []          # one dict per attempt, in the order they ran
_KEYS = set()
CURRENT = {"item": None}  # the running test item (set by conftest)


@contextlib.contextmanager
def attempt(cat, name, what):
    """One attack attempt: the body makes it and asserts containment.

        with attempt("egress", "direct-ip-http", "plain HTTP to a non-allowed host's IP"):
            ... attack ...
            assert <contained>

    Leaving the block normally records it as contained; an exception
    records it as escaped (and propagates: the test fails). Attempts inside
    a test marked xfail are kept apart: "known" (a reported bug, or the jail
    that is not wired in yet) and not counted, until the mark is removed."""
    assert cat in CATEGORIES, cat
    key = f"{cat}/{name}"
    assert key not in _KEYS, f"attempt {key} is registered twice: names must be distinct"
    _KEYS.add(key)
    item = CURRENT["item"]
    mark = item.get_closest_marker("xfail") if item is not None else None
    xfail = mark is not None
    rec = {"cat": cat, "name": name, "what": what, "outcome": None,
           "test": item.nodeid if item is not None else None, "xfail": xfail,
           "reason": mark.kwargs.get("reason", "") if mark is not None else ""}
    RESULTS.append(rec)
    try:
        yield
    except BaseException as e:
        if isinstance(e, pytest.skip.Exception):
            rec["outcome"] = "skipped"
        else:
            rec["outcome"] = "known" if xfail else "escaped"
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        raise
    else:
        rec["outcome"] = "xpassed" if xfail else "contained"


def counted():
    """The attempts that count: not in an xfail test, and run to a verdict."""
    return [r for r in RESULTS if r["outcome"] in ("contained", "escaped")]


# ----------------------------------------------------------------- guest helpers

def sh(api, sid, script, timeout=60, **fields):
    """`sh -c script` in the guest: (exit code, stdout text, stderr text)."""
    r = api.exec(sid, ["sh", "-c", script], timeout_s=timeout, **fields)
    assert r.status == 200, r
    j = r.json
    return j["exit_code"], stdout_bytes(j).decode(errors="replace"), j.get("stderr", "")


def sh_ok(api, sid, script, timeout=60):
    code, out, err = sh(api, sid, script, timeout)
    assert code == 0, (script, code, out, err)
    return out


def put_file(api, sid, path, data, mode=None):
    if isinstance(data, str):
        data = data.encode()
    q = f"?path={path}" + (f"&mode={mode}" if mode else "")
    r = api.request("PUT", f"/v1/sandboxes/{sid}/files{q}", raw=data)
    assert r.status in (200, 201, 204), r
    return r


CURL = "curl -sS --max-time 15 --cacert /tmp/all.pem"


def curl(api, sid, args, timeout=60):
    """curl in the guest: (curl's exit code, HTTP status or 0, body)."""
    code, out, _ = sh(api, sid, f"{CURL} -o /tmp/body -w '%{{http_code}}' {args}; echo \" rc=$?\"; "
                                "cat /tmp/body 2>/dev/null; rm -f /tmp/body", timeout=timeout)
    m = re.match(r"^(\d{3}) rc=(\d+)\n?", out)
    assert m, out
    return int(m.group(2)), int(m.group(1)), out[m.end():]


def py(api, sid, script, *args, timeout=120):
    """Runs a Python script in the guest (base template); returns the JSON
    object it prints last (scripts print json.dumps(result))."""
    name = f"/tmp/sec-{abs(hash(script)) % 10**12}.py"
    put_file(api, sid, name, script)
    quoted = " ".join("'" + str(a).replace("'", "'\\''") + "'" for a in args)
    code, out, err = sh(api, sid, f"python3 -S {name} {quoted}", timeout=timeout)
    assert code == 0, (code, out[-3000:], err[-3000:])
    last = [ln for ln in out.splitlines() if ln.strip()][-1]
    return json.loads(last)


def set_policy(api, sid, allow=(), deny=(), **extra):
    r = api.request("PUT", f"/v1/sandboxes/{sid}/network",
                    body={"allow": list(allow), "deny": list(deny), **extra})
    assert r.status == 200, r
    return r.json


def dropped(api, sid):
    r = api.request("GET", f"/v1/sandboxes/{sid}/network")
    assert r.status == 200, r
    return r.json["dropped"]["packets"]


def events(api, sid=None, type_prefix="", since=0):
    q = [f"since={since}"]
    if sid:
        q.append(f"sandbox={sid}")
    if type_prefix:
        q.append(f"type={type_prefix}")
    r = api.request("GET", "/v1/events?" + "&".join(q))
    assert r.status == 200, r
    return [json.loads(line) for line in r.raw.decode().splitlines() if line.strip()]


class EventMark:
    """The newest event seq now, to read only what an attempt caused."""

    _newest = {}  # socket path -> the newest seq seen, so a mark reads only what is new

    def __init__(self, api):
        key = getattr(api, "socket_path", None)
        seq = self._newest.get(key, 0)
        evs = events(api, since=seq)
        self.seq = evs[-1]["seq"] if evs else seq
        self._newest[key] = self.seq

    def since(self, api, sid=None, type_prefix=""):
        return events(api, sid, type_prefix, since=self.seq)


def wait_events(api, mark, pred, sid=None, type_prefix="network.", timeout_s=10):
    """Events after mark until one satisfies pred (the gateway's audit
    records arrive asynchronously); returns all of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        evs = mark.since(api, sid, type_prefix)
        if any(pred(e) for e in evs) or time.monotonic() > deadline:
            return evs
        time.sleep(0.2)


def file_contains(path, needles, chunk=1 << 24):
    """Which of needles (bytes) occur in a file (read in overlapping chunks)."""
    found = set()
    overlap = max(len(n) for n in needles)
    tail = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            data = tail + block
            for n in needles:
                if n in data:
                    found.add(n)
            tail = data[-overlap:]
    return found


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def vmm_pid(sid):
    pids = list(qemu_processes(needle=f"airlock-{sid}"))
    assert len(pids) == 1, f"expected one VMM for {sid}, found {pids}"
    return pids[0]


# ----------------------------------------------------------------- the TCP API, from the host namespace

class NetnsHTTPConnection(http.client.HTTPConnection):
    def __init__(self, net, host, port, timeout):
        super().__init__(host, port, timeout=timeout)
        self.net = net

    def connect(self):
        self.sock = self.net.in_host(socket.create_connection, (self.host, self.port), self.timeout)


class TcpApi:
    """The API over airlockd's TCP listener (bound in the fake internet's
    host namespace), with an optional bearer token."""

    def __init__(self, net, port, token=None, host="127.0.0.1"):
        self.net, self.port, self.token, self.host = net, port, token, host

    def with_token(self, token):
        return TcpApi(self.net, self.port, token, self.host)

    def request(self, method, path, body=None, raw=None, headers=None, timeout=60):
        conn = NetnsHTTPConnection(self.net, self.host, self.port, timeout)
        return itc.exchange(conn, method, path, body, raw, headers, self.token)

    def raw_socket(self, timeout=10):
        return self.net.in_host(socket.create_connection, (self.host, self.port), timeout)


def unix_socket(path, timeout=10):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read_http_response(sock, timeout=10):
    """Reads one HTTP response head (and what came with it) from a raw
    socket; returns (status or None, raw bytes)."""
    sock.settimeout(timeout)
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            c = sock.recv(65536)
            if not c:
                break
            buf += c
    except OSError:
        pass
    m = re.match(rb"HTTP/1\.[01] (\d{3})", buf)
    return (int(m.group(1)) if m else None), buf


# ----------------------------------------------------------------- watchers

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


class Sniffer:
    """Records every packet that arrives at the fake internet from the
    Airlock host (see the module docstring)."""

    def __init__(self, net):
        self.net = net
        self.sock = fn.call_in_netns(net.inet_ns, socket.socket, socket.AF_PACKET, socket.SOCK_RAW,
                                     socket.htons(ETH_P_ALL))
        self.sock.bind((fn.INET_IFNAME, ETH_P_ALL))
        self.sock.settimeout(0.5)
        self.records = []
        self.lock = threading.Lock()
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopped:
            try:
                data, addr = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            rec = self.parse(data)
            if rec:
                with self.lock:
                    self.records.append(rec)

    @staticmethod
    def parse(data):
        if len(data) < 14:
            return {"kind": "runt"}
        etype = struct.unpack("!H", data[12:14])[0]
        if etype == 0x0806:
            return None  # ARP between the two ends of the link
        if etype == 0x86DD:
            return {"kind": "ipv6", "len": len(data)}
        if etype != 0x0800:
            return {"kind": f"eth-{etype:04x}"}
        ip = data[14:]
        if len(ip) < 20:
            return {"kind": "ipv4-runt"}
        ihl = (ip[0] & 15) * 4
        proto = ip[9]
        src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
        l4 = ip[ihl:]
        rec = {"src": src, "dst": dst, "t": time.monotonic()}
        if proto == 6 and len(l4) >= 14:
            flags = l4[13]
            if flags & 0x02 and not flags & 0x10:
                rec.update(kind="syn", sport=struct.unpack("!H", l4[0:2])[0], dport=struct.unpack("!H", l4[2:4])[0])
                return rec
            return None  # the rest of a TCP connection: its SYN was recorded
        if proto == 17 and len(l4) >= 8:
            rec.update(kind="udp", sport=struct.unpack("!H", l4[0:2])[0], dport=struct.unpack("!H", l4[2:4])[0],
                       payload=l4[8:72].hex())
            return rec
        if proto == 1:
            rec.update(kind="icmp", type=l4[0] if l4 else None)
            return rec
        rec.update(kind=f"ip-proto-{proto}")
        return rec

    def mark(self):
        with self.lock:
            return len(self.records)

    def since(self, mark, settle_s=0.3):
        time.sleep(settle_s)
        with self.lock:
            return list(self.records[mark:])

    def stop(self):
        self.stopped = True
        self.thread.join(2)
        self.sock.close()


CANARY_TCP_PORTS = (22, 80, 443, 2375, 6443, 7000, 8080, 8443, 9000, 15001, 15002, 53)
CANARY_UDP_PORTS = (53, 123, 443, 5353)


class Canary:
    """Listeners on every address of the Airlock host namespace."""

    def __init__(self, net, extra_tcp=()):
        self.net = net
        self.hits = []
        self.lock = threading.Lock()
        self.socks = []
        self.stopped = False
        for port in tuple(CANARY_TCP_PORTS) + tuple(extra_tcp):
            s = net.host_socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port))
            s.listen(64)
            s.settimeout(0.5)
            self.socks.append(s)
            threading.Thread(target=self._accept, args=(s, port), daemon=True).start()
        for port in CANARY_UDP_PORTS:
            u = net.host_socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.bind(("0.0.0.0", port))
            u.settimeout(0.5)
            self.socks.append(u)
            threading.Thread(target=self._udp, args=(u, port), daemon=True).start()

    def _record(self, **kw):
        with self.lock:
            self.hits.append(kw)

    def _accept(self, s, port):
        while not self.stopped:
            try:
                c, peer = s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            local = c.getsockname()
            c.settimeout(0.5)
            try:
                head = c.recv(200)
            except OSError:
                head = b""
            self._record(proto="tcp", port=port, local=local, peer=peer, head=head[:80].hex())
            c.close()

    def _udp(self, u, port):
        while not self.stopped:
            try:
                data, peer = u.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            self._record(proto="udp", port=port, peer=peer, head=data[:40].hex())

    def mark(self):
        with self.lock:
            return len(self.hits)

    def since(self, mark, settle_s=0.3):
        time.sleep(settle_s)
        with self.lock:
            return list(self.hits[mark:])

    def stop(self):
        self.stopped = True
        for s in self.socks:
            s.close()


class Watch:
    """Both watchers and the fake internet's own logs, marked together. The
    first read after a mark waits SETTLE_S once, for packets in flight."""

    SETTLE_S = 0.25

    def __init__(self, net, sniffer, canary):
        self.net, self.sniffer, self.canary = net, sniffer, canary

    def mark(self):
        self.net.clear_logs()
        return {"sniff": self.sniffer.mark(), "canary": self.canary.mark(), "settled": False}

    def _settle(self, m):
        if not m["settled"]:
            time.sleep(self.SETTLE_S)
            m["settled"] = True

    def host_hits(self, m):
        self._settle(m)
        return self.canary.since(m["canary"], settle_s=0)

    def internet(self, m):
        self._settle(m)
        return [r for r in self.sniffer.since(m["sniff"], settle_s=0)
                if not (r.get("kind") in ("udp", "syn") and r["dst"] == fn.DNS_IP and r["dport"] == 53)]

    def packets(self, m):
        """Everything the sniffer recorded since the mark (DNS included)."""
        self._settle(m)
        return self.sniffer.since(m["sniff"], settle_s=0)

    def syns(self, m, dst=None, dport=None):
        return [r for r in self.packets(m) if r.get("kind") == "syn" and (dst is None or r["dst"] == dst)
                and (dport is None or r["dport"] == dport)]

    def dns_qnames(self):
        return [q["qname"].rstrip(".").lower() for q in self.net.dns_queries()]

    def nothing_left(self, m, allowed=()):
        """Asserts that nothing reached the host's own services and that
        nothing but `allowed` (a set of (ip, port)) reached the internet."""
        hits = self.host_hits(m)
        assert not hits, f"reached the Airlock host itself: {hits}"
        out = [r for r in self.internet(m) if (r.get("dst"), r.get("dport")) not in set(allowed)]
        assert not out, f"reached the fake internet: {out[:20]}"


# ----------------------------------------------------------------- the in-guest probe

# Installed as /tmp/probe.py in the attacker (base template, python3). Each
# subcommand makes one kind of connection and prints one JSON object.
GUEST_PROBE = r'''
import base64, json, socket, sys, time

def out(**kw):
    return kw

def recv_all(s, wait):
    s.settimeout(wait)
    data = b""
    try:
        while len(data) < 65536:
            c = s.recv(65536)
            if not c:
                break
            data += c
    except socket.timeout:
        pass
    except OSError as e:
        data += ("<%s>" % type(e).__name__).encode()
    return data

def tcp(ip, port, payload_b64="", wait="2"):
    try:
        s = socket.create_connection((ip, int(port)), timeout=8)
    except OSError as e:
        return out(connected=False, error=type(e).__name__)
    try:
        if payload_b64:
            s.sendall(base64.b64decode(payload_b64))
        data = recv_all(s, float(wait))
    except OSError as e:
        return out(connected=True, reply="", error=type(e).__name__)
    s.close()
    text = data.decode("latin-1")
    status = int(text[9:12]) if text.startswith("HTTP/1.") and text[9:12].isdigit() else None
    return out(connected=True, reply=text[:4000], status=status, error=None)

def tls(ip, port, sni, host="", path="/", verify="0", extra_b64=""):
    import ssl
    ctx = ssl.create_default_context(cafile="/tmp/all.pem") if verify == "1" else ssl._create_unverified_context()
    try:
        s = socket.create_connection((ip, int(port)), timeout=8)
        t = ctx.wrap_socket(s, server_hostname=sni or None)
    except OSError as e:  # ssl.SSLError is an OSError
        return out(handshake=False, error=type(e).__name__ + ": " + str(e)[:120])
    req = "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (path, host or sni)
    req = req.encode() + base64.b64decode(extra_b64) + b"\r\n"
    try:
        t.sendall(req)
        data = recv_all(t, 5)
    except OSError as e:
        return out(handshake=True, status=None, reply="", error=type(e).__name__)
    text = data.decode("latin-1")
    status = int(text[9:12]) if text.startswith("HTTP/1.") and text[9:12].isdigit() else None
    return out(handshake=True, status=status, reply=text[:4000], error=None)

def scan(ip, ports, payload_b64="", wait="0.3"):
    lst = []
    for part in ports.split(","):
        a, _, b = part.partition("-")
        lst += list(range(int(a), int(b or a) + 1))
    accepted, replied = [], []
    for p in lst:
        try:
            s = socket.create_connection((ip, p), timeout=3)
        except OSError:
            continue
        accepted.append(p)
        try:
            if payload_b64:
                s.sendall(base64.b64decode(payload_b64))
            s.settimeout(float(wait))
            head = s.recv(100)
            if head:
                replied.append([p, head[:40].decode("latin-1")])
        except OSError:
            pass
        s.close()
    return out(accepted=accepted, replied=replied, scanned=len(lst))

def udp(ip, port, payload_b64, wait="1.5"):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(float(wait))
    u.sendto(base64.b64decode(payload_b64), (ip, int(port)))
    try:
        data, peer = u.recvfrom(4096)
        return out(reply=base64.b64encode(data).decode(), peer=list(peer))
    except OSError as e:
        return out(reply=None, error=type(e).__name__)

def vsock(cid, port):
    try:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect((int(cid), int(port)))
        return out(connected=True)
    except OSError as e:
        return out(connected=False, error=type(e).__name__)

def multi(specs):
    return {"results": [globals()[spec[0]](*[str(a) for a in spec[1:]]) for spec in json.loads(specs)]}

print(json.dumps(globals()[sys.argv[1]](*sys.argv[2:])))
'''


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def probe_many(api, sid, specs, timeout=180):
    """Several probes in one guest process: specs is a list of
    [SUBCOMMAND, ARGS...]; returns their answers in order."""
    return probe(api, sid, "multi", json.dumps(specs), timeout=timeout)["results"]


def probe(api, sid, *args, timeout=120):
    """Runs /tmp/probe.py SUBCOMMAND ARGS... in the guest; its JSON answer."""
    quoted = " ".join("'" + str(a).replace("'", "'\\''") + "'" for a in args)
    code, out, err = sh(api, sid, f"python3 -S /tmp/probe.py {quoted}", timeout=timeout)
    assert code == 0, (args, code, out[-2000:], err[-2000:])
    return json.loads(out.strip().splitlines()[-1])


def peer_got(api, peer):
    """What reached the peer's listener on 8080 so far."""
    return sh_ok(api, peer["id"], "cat /tmp/got 2>/dev/null; true")


def curls(api, sid, arg_list, timeout=120):
    """Several curls in one exec: [(curl's exit code, HTTP status or 0)]."""
    script = "; ".join(f"{CURL} -o /dev/null -w '%{{http_code}}' {a}; echo \" rc=$?\"" for a in arg_list)
    code, out, _ = sh(api, sid, script, timeout=timeout)
    res = [re.match(r"^(\d{3}) rc=(\d+)$", ln) for ln in out.splitlines() if re.match(r"^\d{3} rc=", ln)]
    assert len(res) == len(arg_list), out
    return [(int(m.group(2)), int(m.group(1))) for m in res]


# Installed as /tmp/raw.py: hand-made TLS ClientHellos and raw frames.
GUEST_RAW = r'''
import json, os, socket, struct, sys, time

def ext(t, body):
    return struct.pack("!HH", t, len(body)) + body

def sni_ext(names):
    lst = b"".join(b"\x00" + struct.pack("!H", len(n.encode("utf-8"))) + n.encode("utf-8") for n in names)
    return ext(0, struct.pack("!H", len(lst)) + lst)

def client_hello(snis, extra=(), dup_sni=None):
    exts = b""
    if snis:
        exts += sni_ext(snis)
    if dup_sni:
        exts += sni_ext([dup_sni])
    exts += ext(43, b"\x02\x03\x04") + ext(10, b"\x00\x02\x00\x1d") + ext(13, b"\x00\x04\x04\x03\x08\x04")
    exts += ext(51, struct.pack("!H", 36) + b"\x00\x1d\x00\x20" + os.urandom(32))
    for t, body in extra:
        exts += ext(t, body)
    body = b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32) + b"\x00\x04\x13\x01\x13\x02" + b"\x01\x00"
    body += struct.pack("!H", len(exts)) + exts
    return b"\x01" + struct.pack("!I", len(body))[1:] + body

def records(hs, size):
    out = b""
    for i in range(0, len(hs), size):
        chunk = hs[i:i + size]
        out += b"\x16\x03\x01" + struct.pack("!H", len(chunk)) + chunk
    return out

def hello(ip, sni, kind="plain", seg="0", dup=""):
    snis = [sni] if sni else []
    extra = []
    if kind == "ech":   # an outer ECH extension: type outer, HPKE suite, config id, enc, payload
        extra.append((0xfe0d, b"\x00\x00\x01\x00\x01\x07\x00\x20" + os.urandom(32) + b"\x00\x80" + os.urandom(128)))
    elif kind == "esni":
        extra.append((0xffce, b"\x13\x01" + b"\x00\x1d\x00\x20" + os.urandom(32) + b"\x00\x20" + os.urandom(32)
                      + b"\x00\x40" + os.urandom(64)))
    elif kind == "two-names":
        snis = sni.split(",")
    hs = client_hello(snis, extra, dup or None)
    data = records(hs, 64) if kind == "split-records" else records(hs, 16384)
    s = socket.create_connection((ip, 443), timeout=8)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    step = int(seg) or len(data)
    try:
        for i in range(0, len(data), step):
            s.sendall(data[i:i + step])
            if int(seg):
                time.sleep(0.02)
        s.settimeout(4)
        reply = s.recv(4096)
    except OSError as e:
        return {"reply": None, "error": type(e).__name__}
    return {"reply": reply[:16].hex(), "error": None}

def mac_of(ifname="eth0"):
    return bytes.fromhex(open("/sys/class/net/%s/address" % ifname).read().strip().replace(":", ""))

GW_MAC = bytes.fromhex("02a10c000202")

def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    s += s >> 16
    return ~s & 0xffff

def ipv4(src, dst, proto, payload):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 7, 0, 64, proto, 0, socket.inet_aton(src),
                    socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload

def tcp_syn(src, dst, dport):
    t = struct.pack("!HHIIBBHHH", 40000, dport, 1, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(t))
    return t[:16] + struct.pack("!H", csum(pseudo + t)) + t[18:]

def udp(dport, payload):
    return struct.pack("!HHHH", 40000, dport, 8 + len(payload), 0) + payload

def frames(kind, arg=""):
    p = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    p.bind(("eth0", 0))
    me = mac_of()
    sent = 0
    def send(f):
        nonlocal sent
        p.send(f)
        sent += 1
    if kind == "ipv6":
        payload = udp(9000, b"airlock-sec-v6")
        ip6 = struct.pack("!IHBB", 6 << 28, len(payload), 17, 64) + socket.inet_pton(socket.AF_INET6, "2001:db8::15") \
            + socket.inet_pton(socket.AF_INET6, arg or "2001:db8::10")
        for dst in (GW_MAC, b"\x33\x33\x00\x00\x00\x01", b"\xff" * 6):
            send(dst + me + b"\x86\xdd" + ip6 + payload)
        tcp6 = struct.pack("!HHIIBBHHH", 40000, 443, 1, 0, 5 << 4, 0x02, 64240, 0, 0)
        ip6 = struct.pack("!IHBB", 6 << 28, len(tcp6), 6, 64) + socket.inet_pton(socket.AF_INET6, "fe80::1") \
            + socket.inet_pton(socket.AF_INET6, arg or "2001:db8::10")
        send(GW_MAC + me + b"\x86\xdd" + ip6 + tcp6)
    elif kind == "ra":
        # ICMPv6 router advertisement from fe80::1 to ff02::1, with a prefix 2001:db8:bad::/64
        prefix = struct.pack("!BBBBIII16s", 3, 4, 64, 0xc0, 86400, 14400, 0,
                             socket.inet_pton(socket.AF_INET6, "2001:db8:bad::"))
        ra = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0) + prefix + struct.pack("!BB6s", 1, 1, me)
        ip6 = struct.pack("!IHBB", 6 << 28, len(ra), 58, 255) + socket.inet_pton(socket.AF_INET6, "fe80::1") \
            + socket.inet_pton(socket.AF_INET6, "ff02::1")
        for _ in range(3):
            send(b"\x33\x33\x00\x00\x00\x01" + me + b"\x86\xdd" + ip6 + ra)
    elif kind == "spoof-ip":
        for src in arg.split(","):
            send(GW_MAC + me + b"\x08\x00" + ipv4(src, "192.0.2.20", 17, udp(9000, b"airlock-sec-spoof")))
            send(GW_MAC + me + b"\x08\x00" + ipv4(src, "192.0.2.20", 6, tcp_syn(src, "192.0.2.20", 80)))
    elif kind == "spoof-mac":
        for fake in (bytes.fromhex("02a10c0002aa"), bytes.fromhex("021122334455"), GW_MAC):
            send(GW_MAC + fake + b"\x08\x00" + ipv4("10.0.2.15", "192.0.2.20", 17, udp(9000, b"airlock-sec-mac")))
            send(GW_MAC + fake + b"\x08\x00" + ipv4("10.0.2.15", "192.0.2.20", 6, tcp_syn("10.0.2.15", "192.0.2.20", 80)))
    elif kind == "arp":
        for claim in arg.split(","):
            for op in (1, 2):  # a gratuitous request and a reply
                arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, me, socket.inet_aton(claim),
                                  b"\xff" * 6 if op == 2 else b"\x00" * 6, socket.inet_aton(claim))
                send(b"\xff" * 6 + me + b"\x08\x06" + arp)
    elif kind == "fragments":
        # A TCP SYN to 192.0.2.20:80 in two IP fragments: the first holds only
        # the ports (8 bytes), the second the flags (the "tiny fragment" trick).
        seg = tcp_syn("10.0.2.15", "192.0.2.20", 80)
        for off, part, mf in ((0, seg[:8], 0x2000), (1, seg[8:], 0)):
            h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(part), 0x4242, mf | off, 64, 6, 0,
                            socket.inet_aton("10.0.2.15"), socket.inet_aton("192.0.2.20"))
            h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
            send(GW_MAC + me + b"\x08\x00" + h + part)
    elif kind == "protocols":
        for proto in (47, 132, 50, 41):  # GRE, SCTP, ESP, IPv6-in-IPv4
            send(GW_MAC + me + b"\x08\x00" + ipv4("10.0.2.15", "192.0.2.20", proto, b"\0" * 32 + b"airlock-sec"))
    elif kind == "vlan":
        for vid in (0, 1, 100):
            tag = b"\x81\x00" + struct.pack("!H", vid)
            send(GW_MAC + me + tag + b"\x08\x00" + ipv4("10.0.2.15", "192.0.2.20", 17, udp(9000, b"airlock-sec-vlan")))
            send(GW_MAC + me + tag + b"\x08\x00" + ipv4("10.0.2.15", "192.0.2.20", 6, tcp_syn("10.0.2.15", "192.0.2.20", 80)))
    elif kind == "raw-syn":
        r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        for dport in (80, 443, 7000):
            r.sendto(ipv4("10.0.2.15", "192.0.2.20", 6, tcp_syn("10.0.2.15", "192.0.2.20", dport)), ("192.0.2.20", 0))
            sent += 1
    return {"sent": sent}

def icmp(ip):
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    r.settimeout(1)
    pkt = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"airlock-sec-icmp"
    pkt = pkt[:2] + struct.pack("!H", csum(pkt)) + pkt[4:]
    for _ in range(3):
        r.sendto(pkt, (ip, 0))
    try:
        data, peer = r.recvfrom(200)
        return {"reply": list(peer)}
    except OSError:
        return {"reply": None, "sent": 3}

print(json.dumps(globals()[sys.argv[1]](*sys.argv[2:])))
'''


def raw(api, sid, *args, timeout=60):
    quoted = " ".join("'" + str(a).replace("'", "'\\''") + "'" for a in args)
    code, out, err = sh(api, sid, f"python3 -S /tmp/raw.py {quoted}", timeout=timeout)
    assert code == 0, (args, code, out[-2000:], err[-2000:])
    return json.loads(out.strip().splitlines()[-1])


def netns_of(sid):
    """A command prefix that runs in the sandbox's network namespace."""
    return ["nsenter", f"--net=/proc/{vmm_pid(sid)}/ns/net"]


def digs(api, sid, queries, timeout=120):
    """Several `dig +time=2 +tries=1 ARGS` in one exec: their outputs."""
    sep = "=====AIRLOCK-DIG====="
    script = "; ".join(f"dig +time=2 +tries=1 {q}; echo {sep}" for q in queries)
    code, out, _ = sh(api, sid, script, timeout=timeout)
    parts = out.split(sep + "\n")
    assert len(parts) == len(queries) + 1, out
    return parts[:-1]


pid_alive = itc.pid_alive


class Responsiveness:
    """Checks, in a loop on its own thread, that the peer sandbox answers
    `echo ok` (and the daemon /healthz, unless healthz=False) within bound_s
    while an attack runs; records the worst times. check() asserts them, or
    leaving the block does (check_on_exit, when the block raised nothing)."""

    def __init__(self, api, peer_id, bound_s, interval_s=0.5, healthz=True, check_on_exit=False):
        self.api, self.peer, self.bound_s = api, peer_id, bound_s
        self.interval_s, self.healthz, self.check_on_exit = interval_s, healthz, check_on_exit
        self.worst_exec = self.worst_health = 0.0
        self.failures = []
        self.rounds = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                r = self.api.exec(self.peer, ["echo", "ok"], timeout_s=int(max(30, 3 * self.bound_s)))
                ok = r.status == 200 and r.json["stdout"] == "ok\n"
            except OSError as e:
                ok, r = False, e
            t1 = time.monotonic()
            h = True
            if self.healthz:
                try:
                    h = self.api.request("GET", "/healthz", timeout=30).status == 200
                except OSError:
                    h = False
            t2 = time.monotonic()
            self.worst_exec = max(self.worst_exec, t1 - t0)
            self.worst_health = max(self.worst_health, t2 - t1)
            if not ok or not h:
                self.failures.append((ok, h, repr(r)[:200]))
            self.rounds += 1
            self.stop.wait(self.interval_s)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(90)
        if self.check_on_exit and exc[0] is None:
            self.check(min_rounds=1)

    def check(self, min_rounds=2):
        assert not self.failures, self.failures
        assert self.rounds >= min_rounds, f"only {self.rounds} checks ran during the attack"
        assert self.worst_exec < self.bound_s, f"the peer took {self.worst_exec:.1f} s to answer echo ok"
        assert self.worst_health < self.bound_s, f"/healthz took {self.worst_health:.1f} s"
