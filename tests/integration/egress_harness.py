# SPDX-License-Identifier: Apache-2.0
"""airlock-egress without airlockd: what a test or benchmark that plays
airlockd needs, shared by test_egress_standalone.py, test_egress_intercept.py
and bench/egressworld.py.

Every such world has a "guest" and a "sandbox" namespace linked by a veth
pair (link_guest):

    PREFIX-cli-PID   the guest: GUEST_IP/24 on veth-cli, default route via
                     GATEWAY_IP
    PREFIX-sbx-PID   the sandbox namespace: GATEWAY_IP/24 on veth-sbx and
                     NFT_RULES, airlockd's redirect (DNS, UDP/TCP 53 to any
                     address, to :53; every other TCP connection to
                     :EGRESS_PORT); no forwarding. The three listeners
                     airlock-egress serves are bound here by the caller and
                     handed over with SCM_RIGHTS in "add" (add_sandbox), as
                     airlockd does.

airlock-egress runs as its own uid wherever the caller puts it (start_egress),
with one end of a SOCK_SEQPACKET pair as --control-fd; Control is airlockd's
end. The tests' worlds (world_namespaces) add two namespaces: PREFIX-egr-PID,
where the gateway runs (EGRESS_LINK_IP/30, default route via NET_LINK_IP),
and PREFIX-net-PID, their own "internet" (NET_LINK_IP/30, its hosts'
addresses on lo, DNS on DNS_IP). The benchmark runs the gateway in fakenet's
host namespace instead.

Sockets are created inside a namespace by a thread that joined it
(fakenet.call_in_netns); they stay there whichever thread uses them.
"""
import json
import os
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

import fakenet as fn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
EGRESS = os.path.join(BUILD, "airlock-egress")

GUEST_IP = "10.0.2.15"
GATEWAY_IP = "10.0.2.2"
EGRESS_PORT = 15001

# The tests' worlds. The link between the gateway and the "internet" is in
# TEST-NET-3, like the hosts, so that --public-cidr opens it: the gateway's
# end is one of its own addresses, the one dialable in its own namespace that
# a rule can name.
EGRESS_LINK_IP = "203.0.113.1"
NET_LINK_IP = "203.0.113.2"
DNS_IP = "198.51.100.53"
WORLD_EGRESS_ARGS = ("--resolver", f"{DNS_IP}:53", "--public-cidr", "192.0.2.0/24", "--public-cidr",
                    "198.51.100.0/24", "--public-cidr", "203.0.113.0/24", "--connect-timeout-ms", "2000",
                    "--log-level", "debug")

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

# SECURITY: airlock-egress runs exactly as airlockd runs it: unprivileged
# (its own uid, EGRESS_DEFAULT_UID of egress-supervisor.h), so that a test
# proves the gateway needs no privilege.
EGRESS_UID = 1499999999
AS_NOBODY = ("setpriv", f"--reuid={EGRESS_UID}", f"--regid={EGRESS_UID}", "--clear-groups", "--no-new-privs")


# ------------------------------------------------------------- namespaces

def run(*cmd, ns=None, check=True, input=None, cwd=None):
    """cmd (inside network namespace ns if given); the CompletedProcess
    (text). With check, a failure raises, with its stderr."""
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    r = subprocess.run(full, input=input, capture_output=True, text=True, timeout=60, cwd=cwd)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} exited with {r.returncode}: {r.stderr.strip()}")
    return r


# fn(*args) on a thread that joined namespace ns: what it creates stays there.
call_in_netns = fn.call_in_netns


def socket_in(ns, kind=socket.SOCK_STREAM, bind=None, listen=False):
    """A new IPv4 socket in namespace ns, bound to bind and listening if
    asked."""
    def make():
        s = socket.socket(socket.AF_INET, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if bind:
            s.bind(bind)
        if listen:
            s.listen(1024)
        return s
    return call_in_netns(ns, make)


def namespace_names(prefix, kinds):
    return [f"{prefix}{kind}-{os.getpid()}" for kind in kinds]


def remove_stale_namespaces(prefix):
    """Deletes PREFIX-KIND-PID namespaces of runs whose process PID is gone
    (crashed or killed), with whatever still runs in them."""
    removed = []
    for ns in fn.netns_list():
        parts = ns.split("-")
        if ns.startswith(prefix) and len(parts) == 3 and parts[2].isdigit() and not fn._pid_alive(int(parts[2])):
            fn._delete_ns(ns)
            removed.append(ns)
    return removed


def add_namespaces(*names):
    for ns in names:
        run("ip", "netns", "add", ns)
        run("ip", "link", "set", "lo", "up", ns=ns)


def delete_namespaces(*names):
    for ns in names:
        fn._delete_ns(ns)


def veth(ns_a, if_a, ip_a, ns_b, if_b, ip_b, prefix_len):
    """A veth pair between ns_a and ns_b, with ns_a's default route via
    ns_b's end."""
    run("ip", "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns", ns_b)
    run("ip", "addr", "add", f"{ip_a}/{prefix_len}", "dev", if_a, ns=ns_a)
    run("ip", "link", "set", if_a, "up", ns=ns_a)
    run("ip", "route", "add", "default", "via", ip_b, ns=ns_a)
    run("ip", "addr", "add", f"{ip_b}/{prefix_len}", "dev", if_b, ns=ns_b)
    run("ip", "link", "set", if_b, "up", ns=ns_b)


def link_guest(ns_guest, ns_sbx):
    """The guest's link to its sandbox namespace, with airlockd's redirect."""
    veth(ns_guest, "veth-cli", GUEST_IP, ns_sbx, "veth-sbx", GATEWAY_IP, 24)
    run("nft", "-f", "-", ns=ns_sbx, input=NFT_RULES)


def world_namespaces(prefix):
    """The names of a test world's namespaces: guest, sandbox, gateway,
    internet."""
    return namespace_names(prefix, ("cli", "sbx", "egr", "net"))


def create_world_namespaces(prefix, internet_ips):
    """A test world's namespaces (world_namespaces), the internet's hosts'
    addresses on its lo; returns their names. Ours of an earlier attempt,
    and those a crashed run left behind, go first."""
    names = ns_guest, ns_sbx, ns_egress, ns_net = world_namespaces(prefix)
    remove_stale_namespaces(prefix)
    delete_namespaces(*names)
    add_namespaces(*names)
    link_guest(ns_guest, ns_sbx)
    veth(ns_egress, "veth-egr", EGRESS_LINK_IP, ns_net, "veth-net", NET_LINK_IP, 30)
    for ip in internet_ips:
        run("ip", "addr", "add", f"{ip}/32", "dev", "lo", ns=ns_net)
    return names


def prepare_world(prefix, internet_ips, log_path):
    """What a test's world fixture does first: skips without root or
    build/airlock-egress, makes the namespaces (create_world_namespaces),
    starts the gateway's log afresh. Returns the namespaces' names."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not os.access(EGRESS, os.X_OK):
        pytest.skip(f"{EGRESS} is not built (make)")
    names = create_world_namespaces(prefix, internet_ips)
    if os.path.exists(log_path):
        os.unlink(log_path)
    return names


# ------------------------------------------------------------- airlockd's part

class Control:
    """The airlockd end of the control channel: requests and their replies;
    every message airlock-egress sends is kept (its events among them)."""

    def __init__(self, sock, timeout_s=5):
        self.sock = sock
        self.timeout_s = timeout_s
        self.seq = 0
        self.cond = threading.Condition()
        self.messages = []
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
                self.messages.append(json.loads(data))
                self.cond.notify_all()

    def wait_for(self, pred, timeout=None, what="a message", since=0):
        """The first message from the since-th on for which pred is true."""
        timeout = self.timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for m in self.messages[since:]:
                    if pred(m):
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise AssertionError(f"airlock-egress: no {what} within {timeout} s; got {self.messages[-20:]}")
                self.cond.wait(left)

    def send_raw(self, data, fds=()):
        socket.send_fds(self.sock, [data], list(fds))

    def request(self, msg, fds=()):
        self.seq += 1
        seq = self.seq
        msg = dict(msg, seq=seq)
        self.send_raw(json.dumps(msg).encode(), fds)
        return self.wait_for(lambda m: m.get("op") in ("ack", "nack") and m.get("seq") == seq,
                             what=f"reply to {msg['op']} #{seq}")

    def mark(self):
        """How many messages came so far: a since for what comes next."""
        with self.cond:
            return len(self.messages)

    @staticmethod
    def _is_event(m, type_, fields):
        return (m.get("op") == "event" and (type_ is None or m["type"] == type_)
                and all(m["data"].get(k) == v for k, v in fields.items()))

    def events(self, type_=None, since=0, **fields):
        """The events (whole messages) of type_ whose data has fields."""
        with self.cond:
            return [m for m in self.messages[since:] if self._is_event(m, type_, fields)]

    def wait_event(self, type_, since=0, **fields):
        return self.wait_for(lambda m: self._is_event(m, type_, fields), since=since,
                             what=f"{type_} event with {fields}")

    def count_events(self, type_, n, timeout_s, **fields):
        """How many events of type_ with fields came, once n did (or after
        timeout_s, or once the channel closed)."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                count = sum(1 for m in self.messages if self._is_event(m, type_, fields))
                left = deadline - time.monotonic()
                if count >= n or left <= 0 or self.closed:
                    return count
                self.cond.wait(left)


def start_egress(wrap, args, log_path, control=Control):
    """airlock-egress as airlockd runs it (AS_NOBODY), inside the command
    wrap (what puts it in its network namespace), with args after
    --control-fd; its output appended to log_path. Returns its Popen and
    airlockd's end of the channel (a control) once it said ready."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    cmd = [*wrap, *AS_NOBODY, EGRESS, "--control-fd", str(theirs.fileno()), *args]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    theirs.close()
    try:
        ctl = control(ours)
        ready = ctl.wait_for(lambda m: True, what="ready message")
        if ready != {"op": "ready", "version": 1}:
            raise RuntimeError(f"airlock-egress said {ready} first; the first message must be ready")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, ctl


def add_sandbox(ctl, ns_sbx, sandbox, policy, tenant="t1", bindings=None):
    """Sends "add" for sandbox with three new listeners in ns_sbx, as
    airlockd binds them; returns the reply. airlockd keeps its copies for a
    restart; here the gateway's must be the only ones, so that "remove"
    really closes the listeners."""
    listeners = [
        socket_in(ns_sbx, bind=(GATEWAY_IP, EGRESS_PORT), listen=True),
        socket_in(ns_sbx, socket.SOCK_DGRAM, bind=(GATEWAY_IP, 53)),
        socket_in(ns_sbx, bind=(GATEWAY_IP, 53), listen=True),
    ]
    msg = {"op": "add", "sandbox": sandbox, "tenant": tenant, "policy": policy}
    if bindings is not None:
        msg["bindings"] = list(bindings)
    try:
        return ctl.request(msg, [s.fileno() for s in listeners])
    finally:
        for s in listeners:
            s.close()


def send_ca(ctl, cert_path, key_path):
    """Sends the Airlock CA ("ca"); returns the reply."""
    with open(cert_path) as f, open(key_path) as k:
        return ctl.request({"op": "ca", "cert_pem": f.read(), "key_pem": k.read()})


# ------------------------------------------------------------- certificates

def openssl(*args, cwd):
    run("openssl", *args, cwd=cwd)


def make_ca(d, name, cn):
    """A CA (EC P-256, as the Airlock CA is) in d: NAME.pem and NAME.key;
    returns their paths."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30", "-subj", f"/CN={cn}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")


def make_leaf(d, name, ca, dns_names):
    """A server certificate for dns_names signed by CA ca (made by make_ca
    in d): NAME.pem and NAME.key; returns their paths."""
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=" + ",".join(f"DNS:{n}" for n in dns_names) + "\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={dns_names[0]}", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "30", "-extfile", f"{name}.ext", cwd=d)
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")


def guest_tls_context(airlock_ca, internet_ca, alpn=("http/1.1",)):
    """What a guest with the Airlock CA installed trusts: the Airlock CA and
    (as its system store) the internet's CA."""
    ctx = ssl.create_default_context(cafile=airlock_ca)
    ctx.load_verify_locations(internet_ca)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


# ------------------------------------------------------------- the internet's DNS

def serve_dns(ns, ip, answer):
    """A UDP DNS server on ip:53 in ns, on a thread of its own: answer(query)
    is the reply. Returns its socket (closing it ends the server)."""
    s = socket_in(ns, socket.SOCK_DGRAM, bind=(ip, 53))

    def loop():
        while True:
            try:
                q, peer = s.recvfrom(4096)
            except OSError:
                return
            try:
                s.sendto(answer(q), peer)
            except (OSError, IndexError, struct.error, UnicodeDecodeError):
                pass  # a malformed query gets no answer
    threading.Thread(target=loop, daemon=True).start()
    return s


def dns_answer(q, address_of):
    """(name, qtype, the authoritative reply) for query q: an A record with
    address_of(name), NXDOMAIN where that is None, no answer for other
    types."""
    qid, flags = struct.unpack(">HH", q[:4])
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode("ascii"))
        i += 1 + q[i]
    qtype, _ = struct.unpack(">HH", q[i + 1:i + 5])
    question = q[12:i + 5]
    name = ".".join(labels).lower()
    address = address_of(name)
    answers, rcode = b"", 0
    if address is None:
        rcode = 3
    elif qtype == 1:
        answers = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton(address)
    flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode
    return name, qtype, struct.pack(">HHHHHH", qid, flags, 1, 1 if answers else 0, 0, 0) + question + answers


# ------------------------------------------------------------- the guest's side

def request_bytes(method, path, host, headers=(), body=b"", close=False):
    """One HTTP/1.1 request: a Content-Length with a body (or for POST and
    PUT), Connection: close if close."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers)]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_response_head(f):
    """(status, [(name, value)]) of the next HTTP response on a socket's
    file, its body left to read; None at the file's end."""
    line = f.readline()
    if not line:
        return None
    status = int(line.split()[1])
    headers = []
    while True:
        h = f.readline().rstrip(b"\r\n")
        if not h:
            break
        k, v = h.decode("latin-1").split(":", 1)
        headers.append((k, v.strip()))
    return status, headers
