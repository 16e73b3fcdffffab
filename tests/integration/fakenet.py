# SPDX-License-Identifier: Apache-2.0
"""The fake internet for the network tests (issue 5, "The test network").

Two network namespaces, both created and deleted here:

    alt-host-<pid>   where tests run airlockd and airlock-egress. Interfaces:
                     lo and `inet0` (HOST_IP/30); one route: default via
                     INET_LINK_IP. /etc/resolv.conf inside it (the
                     `ip netns exec` bind mount) names the test DNS server.
    alt-inet-<pid>   the "internet": lo holds the test hosts' addresses (this
                     kernel has no `dummy` link type; lo does the same job),
                     `host0` (INET_LINK_IP/30) leads back to the host
                     namespace; default route back via HOST_IP, forwarding
                     off, nothing else. fakenet_server.py serves every host.

No other interface exists in either, so no packet from a test can reach a real
network. IPv6 is disabled in both. The hosts (addresses from the documentation
ranges, plus two "trap" hosts on a private and the metadata address so that a
test can show a refusal was the gateway's decision, not a missing route):

    192.0.2.10       www.allowed.test, api.allowed.test, allowed.test,
    (ALLOWED_IP)     cname.allowed.test (CNAME), example.test, sub.example.test
                     HTTP :80, HTTPS :443 and :8443, TCP echo :7000
    192.0.2.20       www.other.test, example.test.evil.test, evilexample.test
    (OTHER_IP)       HTTP :80, HTTPS :443 and :8443, TCP echo :7000
    203.0.113.7      echo.test: TCP echo :7 and :9000, UDP echo :443 and :9000
    (ECHO_IP)
    198.51.100.53    the test DNS server, UDP and TCP :53, authoritative for
    (DNS_IP)         `test.` (RECORDS below), NXDOMAIN for anything else;
                     never answers a name under `slow.test` (SLOW_ZONE)
    10.1.2.3         private.allowed.test (trap): HTTP :80, HTTPS :443, echo :7000
    169.254.169.254  meta.allowed.test (trap): HTTP :80, HTTPS :443, echo :7000

HTTP(S) paths: `/` ("hello from VHOST" then address/sni/host/scheme lines),
`/big` (BIG_SIZE deterministic bytes, sha256 BIG_SHA256), `/bytes/N` (the
first N bytes of the same stream, N <= BIG_SIZE), `/echo-headers` (JSON:
method, path, vhost, sni, scheme, local, remote, headers {lowercased name:
last value}, raw_headers [[name, value], ...]), `/upload` (POST/PUT: JSON
{length, sha256} of the body), `/delay/SECONDS`, `/status/CODE`, `/redirect?to=URL` (302), and `/ANY/PREFIX/echo-headers` (the same as `/echo-headers`, for path rules); `.../echo-chunked`, `.../echo-records`, `.../echo-gzip` reflect the request's header fields in 5-byte chunks, 3-byte TLS records, or gzip-compressed (issue 17). The vhost
named is the Host header's name, else the SNI, else the address's first name.
HTTPS serves, on each address, one certificate (signed by the test CA,
`fakenet.ca_cert`) whose SANs are exactly that address's names and its IP, so
a client that verifies can tell which host it reached.

Every DNS query, TCP connection, UDP datagram, TLS handshake and HTTP request
any server receives is logged before it is answered: `fakenet.dns_queries()`,
`tcp_connections()`, `udp_datagrams()`, `tls_handshakes()`,
`http_requests()`, `events()`; `clear_*()` forget what came before.

Use the session fixture by importing it into the test module:

    from fakenet import fakenet  # noqa: F401  (the fixture)
    import fakenet as fn         # the constants (also attributes of the fixture)

    def test_x(fakenet, tmp_path):
        d = Daemon(tmp_path, netns=fakenet.host_ns,
                   extra_args=[...upstream resolver fakenet.resolver, CA fakenet.ca_cert...]).start()
        ...
        fakenet.clear_logs()
        ... the guest fetches https://www.allowed.test/ ...
        assert not fakenet.tcp_connections(fn.OTHER_IP)
        assert "www.other.test" not in [q["qname"] for q in fakenet.dns_queries()]

`ip netns exec` also gives the process its own mount namespace (slave
propagation, a fresh /sys): mounts it makes are not seen outside. Daemons
are started with `nsenter --net=` instead (conftest.Daemon): their VMMs'
jails need the host's cgroup hierarchies under /sys/fs/cgroup.
"""
import atexit
import ctypes
import datetime
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from fakenet_server import BIG_SIZE, stream_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "fakenet_server.py")
PYTHON = "/usr/bin/python3"

NS_PREFIX = "alt-"
_NS_RE = re.compile(r"^alt-(inet|host)-(\d+)(?:-\d+)?$")
_TMP_RE = re.compile(r"^alt-fakenet-(\d+)-")

# ---------------------------------------------------------------- the plan

HOST_IP = "198.51.100.1"        # the Airlock host namespace (inet0)
INET_LINK_IP = "198.51.100.2"   # the internet's end of the link (host0)
LINK_PREFIX = 30
HOST_IFNAME = "inet0"           # in the host namespace
INET_IFNAME = "host0"           # in the internet namespace

ALLOWED_IP = "192.0.2.10"
OTHER_IP = "192.0.2.20"
ECHO_IP = "203.0.113.7"
DNS_IP = "198.51.100.53"
DNS_PORT = 53
RESOLVER = f"{DNS_IP}:{DNS_PORT}"
PRIVATE_IP = "10.1.2.3"          # trap host: a private address with servers on it
META_IP = "169.254.169.254"      # trap host: the metadata address with servers on it
V6_IP = "2001:db8::10"           # only in DNS: IPv6 is off in both namespaces

WWW_ALLOWED = "www.allowed.test"
API_ALLOWED = "api.allowed.test"
ALLOWED_APEX = "allowed.test"
CNAME_ALLOWED = "cname.allowed.test"     # CNAME -> www.allowed.test
WWW_OTHER = "www.other.test"
ECHO_HOST = "echo.test"
DNS_HOST = "ns.test"
PRIVATE_NAME = "private.allowed.test"    # A 10.1.2.3
META_NAME = "meta.allowed.test"          # A 169.254.169.254
LOOP_NAME = "loop.allowed.test"          # A 127.0.0.1
SELF_NAME = "self.allowed.test"          # A HOST_IP: the Airlock host itself
MIXED_NAME = "mixed.allowed.test"        # A 192.0.2.10 and A 10.1.2.3
V6_NAME = "v6.allowed.test"              # AAAA 2001:db8::10 only
MANY_NAME = "many.allowed.test"          # 40 A records: too big for plain UDP (TC)
TXT_NAME = WWW_ALLOWED                   # also has a TXT record
EXAMPLE = "example.test"                 # wildcard tests: *.example.test
SUB_EXAMPLE = "sub.example.test"
DNS_ONLY = "dns-only.allowed.test"       # A 192.0.2.10, resolved by one test only (never cached)
EVIL_SUFFIX_EXAMPLE = "example.test.evil.test"
EVIL_PREFIX_EXAMPLE = "evilexample.test"
SLOW_ZONE = "slow.test"                  # the DNS server never answers a name under it (issue 17)

HTTP_PORT = 80
HTTPS_PORT = 443
ALT_TLS_PORT = 8443              # HTTPS too, on ALLOWED_IP and OTHER_IP
TCP_ECHO_PORT = 7000             # on ALLOWED_IP, OTHER_IP and the trap hosts
ECHO_TCP_PORTS = (7, 9000)       # on ECHO_IP
ECHO_UDP_PORTS = (443, 9000)     # on ECHO_IP

BIG_PATH = "/big"
BIG_SHA256 = "ce2db0ae38815ab34b681fbc14cd8a863c2b830f7cbac09862c2b5fe4b161256"  # checked by test_fakenet

DNS_TTL = 30

# Names an egress must refuse to dial although they may be "allowed" by a
# policy: each resolves to an address in a forbidden range.
FORBIDDEN_NAMES = {
    PRIVATE_NAME: ("A", PRIVATE_IP),
    "p172.allowed.test": ("A", "172.16.0.1"),
    "p192.allowed.test": ("A", "192.168.1.1"),
    "cgnat.allowed.test": ("A", "100.64.0.1"),
    META_NAME: ("A", META_IP),
    LOOP_NAME: ("A", "127.0.0.1"),
    "zero.allowed.test": ("A", "0.0.0.0"),
    "mcast.allowed.test": ("A", "224.0.0.1"),
    "bcast.allowed.test": ("A", "255.255.255.255"),
    "loop6.allowed.test": ("AAAA", "::1"),
    "mapped.allowed.test": ("AAAA", "::ffff:10.1.2.3"),
    "nat64.allowed.test": ("AAAA", "64:ff9b::a01:203"),
    "ula.allowed.test": ("AAAA", "fd12:3456::1"),
    "meta6.allowed.test": ("AAAA", "fd00:ec2::254"),
    "ll6.allowed.test": ("AAAA", "fe80::1"),
}


def _records():
    r = {
        ALLOWED_APEX: [("A", ALLOWED_IP)],
        WWW_ALLOWED: [("A", ALLOWED_IP), ("TXT", "airlock-fakenet")],
        API_ALLOWED: [("A", ALLOWED_IP)],
        CNAME_ALLOWED: [("CNAME", WWW_ALLOWED)],
        SELF_NAME: [("A", HOST_IP)],
        MIXED_NAME: [("A", ALLOWED_IP), ("A", PRIVATE_IP)],
        V6_NAME: [("AAAA", V6_IP)],
        MANY_NAME: [("A", f"192.0.2.{100 + i}") for i in range(40)],
        WWW_OTHER: [("A", OTHER_IP)],
        ECHO_HOST: [("A", ECHO_IP)],
        DNS_HOST: [("A", DNS_IP)],
        EXAMPLE: [("A", ALLOWED_IP)],
        SUB_EXAMPLE: [("A", ALLOWED_IP)],
        DNS_ONLY: [("A", ALLOWED_IP)],
        EVIL_SUFFIX_EXAMPLE: [("A", OTHER_IP)],
        EVIL_PREFIX_EXAMPLE: [("A", OTHER_IP)],
    }
    for name, (t, v) in FORBIDDEN_NAMES.items():
        r[name] = [(t, v)]
    return r


RECORDS = _records()     # name -> [(type, value)], what the test DNS server knows

# address -> its names (the first names the address); also the SANs of its certificate
HOSTS = {
    ALLOWED_IP: [WWW_ALLOWED, API_ALLOWED, ALLOWED_APEX, CNAME_ALLOWED, MIXED_NAME, EXAMPLE, SUB_EXAMPLE],
    OTHER_IP: [WWW_OTHER, EVIL_SUFFIX_EXAMPLE, EVIL_PREFIX_EXAMPLE],
    ECHO_IP: [ECHO_HOST],
    DNS_IP: [DNS_HOST],
    PRIVATE_IP: [PRIVATE_NAME, "mapped.allowed.test", "nat64.allowed.test"],
    META_IP: [META_NAME],
}
TLS_HOSTS = (ALLOWED_IP, OTHER_IP, PRIVATE_IP, META_IP)

LISTENERS = (
    [(ip, HTTP_PORT, "http") for ip in TLS_HOSTS]
    + [(ip, HTTPS_PORT, "https") for ip in TLS_HOSTS]
    + [(ip, ALT_TLS_PORT, "https") for ip in (ALLOWED_IP, OTHER_IP)]
    + [(ip, TCP_ECHO_PORT, "tcp-echo") for ip in TLS_HOSTS]
    + [(ECHO_IP, p, "tcp-echo") for p in ECHO_TCP_PORTS]
    + [(ECHO_IP, p, "udp-echo") for p in ECHO_UDP_PORTS]
    + [(DNS_IP, DNS_PORT, "dns-udp"), (DNS_IP, DNS_PORT, "dns-tcp")]
)

SETUP_TIMEOUT_S = 20


def stream_sha256(n=BIG_SIZE):
    """sha256 (hex) of the first n bytes of the /big stream (what /bytes/N serves)."""
    import hashlib
    h = hashlib.sha256()
    for c in stream_bytes(n):
        h.update(c)
    return h.hexdigest()


# ---------------------------------------------------------------- helpers

def _run(argv, check=True, timeout=30, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("stdin", subprocess.DEVNULL)
    r = subprocess.run(argv, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {r.returncode}: "
                           f"{(r.stderr or b'').decode(errors='replace').strip()}")
    return r


def netns_list():
    """Names of the named network namespaces (ip netns list)."""
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.decode().splitlines() if line.strip()]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_ns_pids(ns):
    r = _run(["ip", "netns", "pids", ns], check=False)
    pids = [int(p) for p in r.stdout.decode().split() if p.isdigit() and int(p) != os.getpid()]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _pid_alive(p) and not _is_zombie(p)]
        time.sleep(0.02)


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rfind(")") + 2:].split()[0] == "Z"
    except OSError:
        return True


def _delete_ns(ns):
    _kill_ns_pids(ns)
    _run(["ip", "netns", "del", ns], check=False)
    shutil.rmtree(os.path.join("/etc/netns", ns), ignore_errors=True)


def remove_stale_namespaces():
    """Deletes alt-inet-PID / alt-host-PID namespaces (and alt-fakenet-PID-*
    temp dirs) left by a run whose process PID is gone (a crashed or killed
    earlier run). Returns the names of the namespaces."""
    removed = []
    for ns in netns_list():
        m = _NS_RE.match(ns)
        if m and not _pid_alive(int(m.group(2))):
            _delete_ns(ns)
            removed.append(ns)
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = _TMP_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    return removed


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def call_in_netns(ns, fn, *args):
    """Runs fn(*args) on a thread that has entered network namespace ns and
    returns its result (or raises its exception). Sockets created there stay
    in that namespace, whichever thread uses them later."""
    out = {}

    def body():
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns({ns}): {os.strerror(e)}")
            finally:
                os.close(fd)
            out["v"] = fn(*args)
        except BaseException as e:  # noqa: B902 - handed to the caller
            out["e"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


def _utc(dt):
    return dt.strftime("%Y%m%d%H%M%SZ")


# ---------------------------------------------------------------- FakeNet

class FakeNet:
    """The fake internet. FakeNet().start() builds it; teardown() removes it
    (also registered with atexit). Constants of the plan are attributes too."""

    HOST_IP, INET_LINK_IP, ALLOWED_IP, OTHER_IP, ECHO_IP = HOST_IP, INET_LINK_IP, ALLOWED_IP, OTHER_IP, ECHO_IP
    DNS_IP, DNS_PORT, RESOLVER, PRIVATE_IP, META_IP, V6_IP = DNS_IP, DNS_PORT, RESOLVER, PRIVATE_IP, META_IP, V6_IP
    WWW_ALLOWED, API_ALLOWED, ALLOWED_APEX, CNAME_ALLOWED = WWW_ALLOWED, API_ALLOWED, ALLOWED_APEX, CNAME_ALLOWED
    WWW_OTHER, ECHO_HOST, PRIVATE_NAME, META_NAME, LOOP_NAME = WWW_OTHER, ECHO_HOST, PRIVATE_NAME, META_NAME, LOOP_NAME
    SELF_NAME, MIXED_NAME, V6_NAME, MANY_NAME = SELF_NAME, MIXED_NAME, V6_NAME, MANY_NAME
    EXAMPLE, SUB_EXAMPLE = EXAMPLE, SUB_EXAMPLE
    EVIL_SUFFIX_EXAMPLE, EVIL_PREFIX_EXAMPLE = EVIL_SUFFIX_EXAMPLE, EVIL_PREFIX_EXAMPLE
    HTTP_PORT, HTTPS_PORT, ALT_TLS_PORT, TCP_ECHO_PORT = HTTP_PORT, HTTPS_PORT, ALT_TLS_PORT, TCP_ECHO_PORT
    ECHO_TCP_PORTS, ECHO_UDP_PORTS = ECHO_TCP_PORTS, ECHO_UDP_PORTS
    BIG_PATH, BIG_SIZE, BIG_SHA256 = BIG_PATH, BIG_SIZE, BIG_SHA256
    RECORDS, HOSTS, FORBIDDEN_NAMES, DNS_TTL = RECORDS, HOSTS, FORBIDDEN_NAMES, DNS_TTL

    _seq = 0

    def __init__(self):
        FakeNet._seq += 1
        suffix = "" if FakeNet._seq == 1 else f"-{FakeNet._seq}"
        self.host_ns = f"{NS_PREFIX}host-{os.getpid()}{suffix}"
        self.inet_ns = f"{NS_PREFIX}inet-{os.getpid()}{suffix}"
        self.resolver = RESOLVER
        self.host_addresses = (HOST_IP,)
        self.dir = None
        self.ca_cert = None
        self.ca_pem = None
        self.certs = {}            # address -> (cert path, key path)
        self.log_path = None
        self.server = None
        self.closed = False
        self._cursors = {}
        self._created = []

    # ------------------------------------------------------------ setup

    def start(self):
        if os.geteuid() != 0:
            raise RuntimeError("the fake internet needs root (network namespaces)")
        atexit.register(self.teardown)
        t0 = time.monotonic()
        try:
            remove_stale_namespaces()
            self.dir = tempfile.mkdtemp(prefix=f"alt-fakenet-{os.getpid()}-")
            self._make_certs()
            self._make_namespaces()
            self._start_server(t0 + SETUP_TIMEOUT_S)
        except BaseException:
            self.teardown()
            raise
        self.setup_seconds = time.monotonic() - t0
        return self

    def _make_certs(self):
        d = os.path.join(self.dir, "pki")
        os.makedirs(os.path.join(d, "newcerts"))
        open(os.path.join(d, "index.txt"), "w").close()
        with open(os.path.join(d, "serial"), "w") as f:
            f.write("1000\n")
        sections = []
        for ip in TLS_HOSTS:
            sans = ",".join([f"DNS:{n}" for n in HOSTS[ip]] + [f"IP:{ip}"])
            sections.append(f"[ leaf_{ip.replace('.', '_')} ]\nbasicConstraints = critical,CA:FALSE\n"
                            f"keyUsage = critical,digitalSignature\nextendedKeyUsage = serverAuth\n"
                            f"subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n"
                            f"subjectAltName = {sans}\n")
        cnf = os.path.join(d, "ca.cnf")
        with open(cnf, "w") as f:
            f.write(f"""[ ca ]
default_ca = fakenet_ca
[ fakenet_ca ]
dir = {d}
database = {d}/index.txt
new_certs_dir = {d}/newcerts
serial = {d}/serial
default_md = sha256
policy = fakenet_policy
unique_subject = no
email_in_dn = no
copy_extensions = none
[ fakenet_policy ]
commonName = supplied
[ req ]
distinguished_name = req_dn
prompt = no
[ req_dn ]
CN = unused
[ v3_ca ]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
""" + "\n".join(sections))
        # Valid from two days ago (a guest clock a little behind must not matter).
        now = datetime.datetime.now(datetime.timezone.utc)
        dates = ["-startdate", _utc(now - datetime.timedelta(days=2)),
                 "-enddate", _utc(now + datetime.timedelta(days=30))]
        newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        ca_key, ca_csr = os.path.join(d, "ca.key"), os.path.join(d, "ca.csr")
        self.ca_cert = os.path.join(self.dir, "ca.crt")
        # Every key and request at once (in parallel), then the signatures.
        reqs = [["openssl", "req", "-new", *newkey, "-config", cnf, "-keyout", ca_key, "-out", ca_csr,
                 "-subj", "/CN=Airlock FakeNet Test CA"]]
        for ip in TLS_HOSTS:
            key, csr = os.path.join(d, f"{ip}.key"), os.path.join(d, f"{ip}.csr")
            reqs.append(["openssl", "req", "-new", *newkey, "-config", cnf, "-keyout", key, "-out", csr,
                         "-subj", f"/CN={HOSTS[ip][0]}"])
        procs = [subprocess.Popen(a, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for a in reqs]
        for a, p in zip(reqs, procs):
            out = p.communicate(timeout=30)[0]
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(a)}: {out.decode(errors='replace')}")
        _run(["openssl", "ca", "-batch", "-notext", "-config", cnf, "-selfsign", "-keyfile", ca_key,
              "-in", ca_csr, "-out", self.ca_cert, "-extensions", "v3_ca", *dates])
        for ip in TLS_HOSTS:
            crt = os.path.join(self.dir, f"{ip}.crt")
            _run(["openssl", "ca", "-batch", "-notext", "-config", cnf, "-cert", self.ca_cert, "-keyfile", ca_key,
                  "-in", os.path.join(d, f"{ip}.csr"), "-out", crt, "-extensions",
                  f"leaf_{ip.replace('.', '_')}", *dates])
            self.certs[ip] = (crt, os.path.join(d, f"{ip}.key"))
        with open(self.ca_cert) as f:
            self.ca_pem = f.read()

    def _make_namespaces(self):
        h, i = self.host_ns, self.inet_ns
        for ns in (i, h):
            _run(["ip", "netns", "add", ns])
            self._created.append(ns)
        for ns in (i, h):
            # IPv6 off before any interface exists (new interfaces take "default").
            _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                  "net.ipv6.conf.default.disable_ipv6=1", "net.ipv4.ip_forward=0"])
        # Leave the link down until both ends are configured.
        _run(["ip", "-n", h, "link", "add", HOST_IFNAME, "type", "veth", "peer", "name", INET_IFNAME, "netns", i])
        _run(["ip", "netns", "exec", i, "sysctl", "-q", "-w", "net.ipv6.conf.lo.disable_ipv6=1",
              f"net.ipv6.conf.{INET_IFNAME}.disable_ipv6=1",
              # Let a packet from any source reach the servers, so that a leak
              # from some other address would still show in the logs.
              "net.ipv4.conf.all.rp_filter=0", f"net.ipv4.conf.{INET_IFNAME}.rp_filter=0"])
        _run(["ip", "netns", "exec", h, "sysctl", "-q", "-w", "net.ipv6.conf.lo.disable_ipv6=1",
              f"net.ipv6.conf.{HOST_IFNAME}.disable_ipv6=1"])
        _run(["ip", "-n", i, "link", "set", "lo", "up"])
        for ip in HOSTS:
            _run(["ip", "-n", i, "addr", "add", f"{ip}/32", "dev", "lo"])
        _run(["ip", "-n", i, "addr", "add", f"{INET_LINK_IP}/{LINK_PREFIX}", "dev", INET_IFNAME])
        _run(["ip", "-n", i, "link", "set", INET_IFNAME, "up"])
        _run(["ip", "-n", i, "route", "add", "default", "via", HOST_IP, "dev", INET_IFNAME, "onlink"])
        _run(["ip", "-n", h, "link", "set", "lo", "up"])
        _run(["ip", "-n", h, "addr", "add", f"{HOST_IP}/{LINK_PREFIX}", "dev", HOST_IFNAME])
        _run(["ip", "-n", h, "link", "set", HOST_IFNAME, "up"])
        _run(["ip", "-n", h, "route", "add", "default", "via", INET_LINK_IP, "dev", HOST_IFNAME])
        # `ip netns exec HOST ...` bind-mounts this over /etc/resolv.conf.
        etc = os.path.join("/etc/netns", h)
        for attempt in range(5):  # another run's teardown may rmdir an empty /etc/netns meanwhile
            try:
                os.makedirs(etc, exist_ok=True)
                with open(os.path.join(etc, "resolv.conf"), "w") as f:
                    f.write(f"# airlock fakenet: the test DNS server\nnameserver {DNS_IP}\n"
                            "options timeout:2 attempts:2\n")
                break
            except FileNotFoundError:
                if attempt == 4:
                    raise

    def _start_server(self, deadline):
        self.log_path = os.path.join(self.dir, "events.jsonl")
        open(self.log_path, "w").close()
        cfg = {
            "log": self.log_path,
            "zone": {"origin": "test", "ttl": DNS_TTL, "records": RECORDS, "silent": [SLOW_ZONE]},
            "certs": {ip: {"cert": c, "key": k} for ip, (c, k) in self.certs.items()},
            "primary": {ip: names[0] for ip, names in HOSTS.items()},
            "listeners": [{"ip": ip, "port": port, "kind": kind} for ip, port, kind in LISTENERS],
        }
        cfg_path = os.path.join(self.dir, "server.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)
        self.server_log = os.path.join(self.dir, "server.log")
        err = open(self.server_log, "ab")
        self.server = subprocess.Popen(["ip", "netns", "exec", self.inet_ns, PYTHON, SERVER, cfg_path],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                       start_new_session=True, close_fds=True)
        err.close()
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"fakenet server not ready in time; log:\n{self.server_log_text()}")
            r, _, _ = select.select([self.server.stdout], [], [], left)
            if r:
                b = os.read(self.server.stdout.fileno(), 64)
                if not b:
                    raise RuntimeError(f"fakenet server exited with {self.server.wait()}; "
                                       f"log:\n{self.server_log_text()}")
                line += b
        if line.strip() != b"ready":
            raise RuntimeError(f"fakenet server said {line!r}; log:\n{self.server_log_text()}")

    def server_log_text(self):
        try:
            with open(self.server_log, errors="replace") as f:
                return f.read()[-8000:]
        except (OSError, AttributeError, TypeError):
            return ""

    # ------------------------------------------------------------ teardown

    def teardown(self):
        """Kills the servers and every process left in the two namespaces,
        deletes the namespaces and the temp dir. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            atexit.unregister(self.teardown)
        except Exception:
            pass
        if self.server is not None:
            try:
                self.server.stdin.close()
            except OSError:
                pass
            try:
                os.killpg(self.server.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            try:
                self.server.stdout.close()
            except OSError:
                pass
        for ns in (self.host_ns, self.inet_ns):
            _delete_ns(ns)
        try:
            os.rmdir("/etc/netns")  # only if empty: nothing else uses it
        except OSError:
            pass
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        left = [ns for ns in netns_list() if ns in (self.host_ns, self.inet_ns)]
        if left:
            raise RuntimeError(f"fakenet: namespaces left after teardown: {left}")

    # ------------------------------------------------------------ running things

    def host_argv(self, argv):
        """argv run inside the host namespace (for Popen)."""
        return ["ip", "netns", "exec", self.host_ns, *argv]

    def inet_argv(self, argv):
        return ["ip", "netns", "exec", self.inet_ns, *argv]

    def run_in_host(self, argv, timeout=60, check=False, **kw):
        """subprocess.run(argv) inside the host namespace; stdout and stderr
        captured (bytes) unless given; stdin /dev/null unless input given."""
        if "input" not in kw:
            kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        r = subprocess.run(self.host_argv(argv), timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise AssertionError(f"{argv} in {self.host_ns} exited with {r.returncode}: {r.stderr!r}")
        return r

    def run_in_inet(self, argv, timeout=60, check=False, **kw):
        if "input" not in kw:
            kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        r = subprocess.run(self.inet_argv(argv), timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise AssertionError(f"{argv} in {self.inet_ns} exited with {r.returncode}: {r.stderr!r}")
        return r

    def in_host(self, fn, *args):
        """fn(*args) on a thread inside the host namespace (see call_in_netns)."""
        return call_in_netns(self.host_ns, fn, *args)

    def host_socket(self, family=socket.AF_INET, type=socket.SOCK_STREAM, proto=0):
        """A new socket in the host namespace."""
        return self.in_host(socket.socket, family, type, proto)

    def connect_from_host(self, ip, port, timeout=5.0):
        """A TCP connection from the host namespace (raises OSError if refused)."""
        s = self.host_socket()
        s.settimeout(timeout)
        try:
            s.connect((ip, port))
        except BaseException:
            s.close()
            raise
        return s

    # ------------------------------------------------------------ the event log

    def mark(self):
        """A position in the event log, for events(since=...)."""
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def events(self, kind=None, since=0):
        """Every event logged since the mark `since` (oldest first), of one
        kind ("dns", "tcp", "tcp_close", "udp", "tls", "http", "error") or all."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                data = f.read()
        except OSError:
            return []
        out = []
        for line in data.split(b"\n"):
            if not line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if kind is None or e.get("kind") == kind:
                out.append(e)
        return out

    def _since(self, kind):
        return self.events(kind, self._cursors.get(kind, 0))

    def _clear(self, *kinds):
        m = self.mark()
        for k in kinds:
            self._cursors[k] = m

    @staticmethod
    def _match(e, ip, port):
        return (ip is None or e["local"][0] == ip) and (port is None or e["local"][1] == port)

    def dns_queries(self):
        """DNS queries the test DNS server received since clear_dns_log():
        dicts with name (as sent), qname (lowercase, no trailing dot), type
        ("A", "AAAA", ... or "TYPEn"), qtype, transport ("udp"/"tcp"),
        remote [ip, port], id, edns (UDP size or None)."""
        return self._since("dns")

    def clear_dns_log(self):
        self._clear("dns")

    def http_requests(self, ip=None, port=None):
        """HTTP requests (plain and inside TLS) since clear_http_log(): dicts
        with scheme, local [ip, port], remote, sni, method, path, host, vhost,
        headers [[name, value], ...]."""
        return [e for e in self._since("http") if self._match(e, ip, port)]

    def clear_http_log(self):
        self._clear("http")

    def tls_handshakes(self, ip=None, port=None):
        """TLS handshakes since clear_tls_log(): local, remote, sni, ok, error/version. ok is the
        server's view: with TLS 1.3 a client that rejects the certificate does so after it."""
        return [e for e in self._since("tls") if self._match(e, ip, port)]

    def clear_tls_log(self):
        self._clear("tls")

    def tcp_connections(self, ip=None, port=None):
        """TCP connections any server accepted since clear_tcp_log(): listener, local, remote."""
        return [e for e in self._since("tcp") if self._match(e, ip, port)]

    def tcp_closed(self, ip=None, port=None):
        """TCP echo connections that ended since clear_tcp_log(): local, remote, bytes, head (hex)."""
        return [e for e in self._since("tcp_close") if self._match(e, ip, port)]

    def clear_tcp_log(self):
        self._clear("tcp", "tcp_close")

    def udp_datagrams(self, ip=None, port=None):
        """UDP datagrams the echo servers received since clear_udp_log(): local, remote, bytes, head (hex)."""
        return [e for e in self._since("udp") if self._match(e, ip, port)]

    def clear_udp_log(self):
        self._clear("udp")

    def errors(self):
        return self._since("error")

    def clear_logs(self):
        self._clear("dns", "http", "tls", "tcp", "tcp_close", "udp", "error")

    def snmp(self, proto, field, ns=None):
        """A counter of /proc/net/snmp in a namespace (default: the internet),
        e.g. snmp("Icmp", "InEchos") counts pings that reached it."""
        r = _run(["ip", "netns", "exec", ns or self.inet_ns, "cat", "/proc/net/snmp"])
        lines = [ln.split() for ln in r.stdout.decode().splitlines() if ln.startswith(proto + ":")]
        return int(dict(zip(lines[0][1:], lines[1][1:]))[field])


# ---------------------------------------------------------------- the fixture

_shared = None


@pytest.fixture(scope="session")
def fakenet(request):
    """The fake internet, one per test session (shared by every module that
    imports this fixture). Call fakenet.clear_logs() before asserting on logs."""
    global _shared
    if _shared is None or _shared.closed:
        for tool in ("ip", "openssl"):
            if shutil.which(tool) is None:
                pytest.fail(f"the fake internet needs {tool}", pytrace=False)
        if os.geteuid() != 0:
            pytest.skip("the fake internet needs root (network namespaces)")
        net = FakeNet().start()
        request.config.add_cleanup(net.teardown)
        _shared = net
    yield _shared
