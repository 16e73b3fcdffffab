# SPDX-License-Identifier: Apache-2.0
"""The fake internet itself (fakenet.py), without VMs: names resolve, the
right host answers over HTTP and HTTPS with the test CA, bodies are intact,
the echo servers log what they get, the host namespace leads nowhere but the
fake internet, and teardown leaves nothing behind."""
import hashlib
import json
import os
import socket
import struct
import subprocess
import time

import pytest

import fakenet as fn
from conftest import AIRLOCKD, Daemon
from fakenet import fakenet  # noqa: F401  (the fixture)


def curl(net, url, *args, timeout=30):
    """curl from the host namespace; (exit code, body bytes, stderr text)."""
    r = net.run_in_host(["curl", "-sS", "--max-time", str(timeout), "--cacert", net.ca_cert, *args, url],
                        timeout=timeout + 10)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace")


def dig(net, *args):
    r = net.run_in_host(["dig", f"@{fn.DNS_IP}", "+time=2", "+tries=1", *args], check=True)
    return r.stdout.decode()


def dig_short(net, name, rtype="A", *args):
    return dig(net, "+short", name, rtype, *args).split()


# ---------------------------------------------------------------- DNS

def test_every_planned_name_resolves(fakenet):
    fakenet.clear_dns_log()
    for name, records in fn.RECORDS.items():
        for rtype in sorted({t for t, _ in records} - {"CNAME"}):
            want = sorted(v if rtype != "TXT" else f'"{v}"' for t, v in records if t == rtype)
            got = sorted(dig_short(fakenet, name, rtype))
            if rtype == "AAAA":  # dig prints them canonically
                want = sorted(socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, v)) for v in want)
            assert got == want, (name, rtype)
    asked = {(q["qname"], q["type"]) for q in fakenet.dns_queries()}
    assert (fn.WWW_ALLOWED, "A") in asked and (fn.V6_NAME, "AAAA") in asked


def test_cname_nxdomain_nodata(fakenet):
    assert dig_short(fakenet, fn.CNAME_ALLOWED) == [fn.WWW_ALLOWED + ".", fn.ALLOWED_IP]
    for name in ("nope.allowed.test", "example.com", "www.allowed.test.example.com"):
        out = dig(fakenet, name, "A")
        assert "status: NXDOMAIN" in out, out
    out = dig(fakenet, fn.WWW_ALLOWED, "AAAA")  # the name exists, the type does not
    assert "status: NOERROR" in out and "ANSWER: 0" in out, out
    out = dig(fakenet, "WwW.AllOwEd.TeSt.", "A")
    assert "status: NOERROR" in out and fn.ALLOWED_IP in out, out


def test_dns_log_names_type_and_transport(fakenet):
    fakenet.clear_dns_log()
    dig_short(fakenet, fn.API_ALLOWED, "A")
    dig_short(fakenet, "secret-data.exfil.test", "TXT", "+tcp")
    qs = fakenet.dns_queries()
    assert [(q["qname"], q["type"], q["transport"]) for q in qs] == [
        (fn.API_ALLOWED, "A", "udp"), ("secret-data.exfil.test", "TXT", "tcp")]
    assert all(q["remote"][0] == fn.HOST_IP for q in qs)
    fakenet.clear_dns_log()
    assert fakenet.dns_queries() == []


def test_large_answer_truncated_over_udp_then_tcp(fakenet):
    fakenet.clear_dns_log()
    addrs = dig_short(fakenet, fn.MANY_NAME, "A", "+noedns")  # dig retries over TCP on TC
    assert len(addrs) == 40
    assert [q["transport"] for q in fakenet.dns_queries()] == ["udp", "tcp"]


def test_resolv_conf_in_host_namespace_names_test_dns(fakenet):
    r = fakenet.run_in_host(["cat", "/etc/resolv.conf"], check=True)
    assert f"nameserver {fn.DNS_IP}" in r.stdout.decode()
    r = fakenet.run_in_host(["getent", "ahostsv4", fn.ECHO_HOST], check=True)
    assert fn.ECHO_IP in r.stdout.decode()


# ---------------------------------------------------------------- HTTP(S)

@pytest.mark.parametrize("scheme,port", [("http", 80), ("https", 443), ("https", 8443)])
@pytest.mark.parametrize("name,ip", [(fn.WWW_ALLOWED, fn.ALLOWED_IP), (fn.API_ALLOWED, fn.ALLOWED_IP),
                                     (fn.WWW_OTHER, fn.OTHER_IP), (fn.EVIL_SUFFIX_EXAMPLE, fn.OTHER_IP)])
def test_vhost_answers(fakenet, scheme, port, name, ip):
    fakenet.clear_logs()
    rc, body, err = curl(fakenet, f"{scheme}://{name}:{port}/")
    assert rc == 0, err
    text = body.decode()
    assert text.startswith(f"hello from {name}\n") and f"address: {ip}\n" in text, text
    [req] = fakenet.http_requests()
    assert req["local"] == [ip, port] and req["scheme"] == scheme and req["path"] == "/"
    assert req["sni"] == (name if scheme == "https" else None)


def test_each_address_has_only_its_own_certificate(fakenet):
    fakenet.clear_logs()
    # An allowed SNI sent to the other host's address: verification fails, and
    # the log shows where it went and which SNI it carried.
    rc, _, err = curl(fakenet, f"https://{fn.WWW_ALLOWED}/", "--resolve", f"{fn.WWW_ALLOWED}:443:{fn.OTHER_IP}")
    assert rc == 60, err  # peer certificate cannot be authenticated
    [hs] = fakenet.tls_handshakes()
    # (In TLS 1.3 the server's side of the handshake ends before the client
    # checks the certificate, so "ok" says nothing about the client.)
    assert hs["local"] == [fn.OTHER_IP, 443] and hs["sni"] == fn.WWW_ALLOWED
    assert fakenet.http_requests() == []
    # Without verification the other host answers, naming the vhost it was asked for.
    rc, body, err = curl(fakenet, f"https://{fn.WWW_ALLOWED}/", "-k", "--resolve",
                         f"{fn.WWW_ALLOWED}:443:{fn.OTHER_IP}")
    assert rc == 0, err
    assert f"address: {fn.OTHER_IP}\n" in body.decode() and f"sni: {fn.WWW_ALLOWED}\n" in body.decode()
    # The IP is in each certificate too.
    rc, body, err = curl(fakenet, f"https://{fn.ALLOWED_IP}/")
    assert rc == 0 and body.startswith(b"hello from "), err


def test_trap_hosts_answer_so_a_refusal_means_something(fakenet):
    for name, ip in ((fn.PRIVATE_NAME, fn.PRIVATE_IP), (fn.META_NAME, fn.META_IP)):
        for scheme in ("http", "https"):
            rc, body, err = curl(fakenet, f"{scheme}://{name}/")
            assert rc == 0, err
            assert body.decode().startswith(f"hello from {name}\naddress: {ip}\n")


def test_bytes_and_big(fakenet):
    n = 1_000_003
    rc, body, err = curl(fakenet, f"https://{fn.WWW_ALLOWED}/bytes/{n}")
    assert rc == 0, err
    assert len(body) == n and hashlib.sha256(body).hexdigest() == fn.stream_sha256(n)
    # The whole /big over plain HTTP, hashed by curl's consumer (sha256sum).
    r = fakenet.run_in_host(["sh", "-c", f"curl -sS --max-time 60 http://{fn.WWW_ALLOWED}/big | sha256sum"],
                            timeout=90, check=True)
    assert r.stdout.decode().split()[0] == fn.BIG_SHA256


def test_big_sha256_constant():
    assert fn.stream_sha256() == fn.BIG_SHA256
    assert fn.stream_sha256(0) == hashlib.sha256(b"").hexdigest()


def test_echo_headers_and_upload(fakenet):
    rc, body, err = curl(fakenet, f"https://{fn.API_ALLOWED}/echo-headers", "-H", "X-Probe: one",
                         "-H", "Authorization: Bearer t0ken")
    assert rc == 0, err
    j = json.loads(body)
    assert j["headers"]["x-probe"] == "one" and j["headers"]["authorization"] == "Bearer t0ken"
    assert ["X-Probe", "one"] in j["raw_headers"] and j["sni"] == fn.API_ALLOWED and j["vhost"] == fn.API_ALLOWED
    data = os.urandom(300_000)
    r = fakenet.run_in_host(["curl", "-sS", "--cacert", fakenet.ca_cert, "--data-binary", "@-",
                             f"https://{fn.WWW_ALLOWED}/upload"], input=data, check=True)
    assert json.loads(r.stdout) == {"length": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# ---------------------------------------------------------------- echo

def test_tcp_echo_logs_connections(fakenet):
    fakenet.clear_tcp_log()
    for ip, port in [(fn.ECHO_IP, 7), (fn.ECHO_IP, 9000), (fn.ALLOWED_IP, fn.TCP_ECHO_PORT)]:
        s = fakenet.connect_from_host(ip, port)
        s.sendall(b"ping %d" % port)
        assert s.recv(100) == b"ping %d" % port
        s.close()
    deadline = time.monotonic() + 5
    while len(fakenet.tcp_closed()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    conns = fakenet.tcp_connections()
    assert [(c["local"][0], c["local"][1]) for c in conns] == [(fn.ECHO_IP, 7), (fn.ECHO_IP, 9000),
                                                                 (fn.ALLOWED_IP, fn.TCP_ECHO_PORT)]
    assert all(c["remote"][0] == fn.HOST_IP for c in conns)
    assert bytes.fromhex(fakenet.tcp_closed(fn.ECHO_IP, 9000)[0]["head"]) == b"ping 9000"
    # A port nobody serves: refused, and nothing logged.
    with pytest.raises(ConnectionRefusedError):
        fakenet.connect_from_host(fn.ECHO_IP, 9001)
    assert len(fakenet.tcp_connections()) == 3


def test_udp_echo_logs_datagrams(fakenet):
    fakenet.clear_udp_log()
    s = fakenet.host_socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    for port in fn.ECHO_UDP_PORTS:
        s.sendto(b"datagram to %d" % port, (fn.ECHO_IP, port))
        data, peer = s.recvfrom(100)
        assert data == b"datagram to %d" % port and peer == (fn.ECHO_IP, port)
    s.close()
    got = fakenet.udp_datagrams()
    assert [(d["local"][1], bytes.fromhex(d["head"])) for d in got] == [
        (p, b"datagram to %d" % p) for p in fn.ECHO_UDP_PORTS]
    assert fakenet.udp_datagrams(fn.ECHO_IP, 443)[0]["remote"][0] == fn.HOST_IP


def _icmp_checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def test_icmp_counter(fakenet):
    before = fakenet.snmp("Icmp", "InEchos")
    s = fakenet.host_socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(5)
    payload = b"fakenet"
    pkt = struct.pack("!BBHHH", 8, 0, 0, 0x4242, 1) + payload
    pkt = pkt[:2] + struct.pack("!H", _icmp_checksum(pkt)) + pkt[4:]
    s.sendto(pkt, (fn.ALLOWED_IP, 0))
    data, peer = s.recvfrom(1500)
    s.close()
    assert peer[0] == fn.ALLOWED_IP and data[20] == 0  # an echo reply
    assert fakenet.snmp("Icmp", "InEchos") == before + 1


# ---------------------------------------------------------------- isolation

def test_host_namespace_leads_only_to_the_fake_internet(fakenet):
    links = json.loads(fakenet.run_in_host(["ip", "-j", "link", "show"], check=True).stdout)
    assert sorted(link["ifname"] for link in links) == ["inet0", "lo"]
    routes = json.loads(fakenet.run_in_host(["ip", "-j", "-4", "route", "show", "table", "all"], check=True).stdout)
    nonlocal_routes = [(r["dst"], r.get("gateway"), r["dev"]) for r in routes if r.get("table") != "local"]
    assert sorted(nonlocal_routes) == [("198.51.100.0/30", None, "inet0"), ("default", fn.INET_LINK_IP, "inet0")]
    assert all(r["dev"] in ("lo", "inet0") for r in routes)
    addrs = json.loads(fakenet.run_in_host(["ip", "-j", "addr", "show"], check=True).stdout)
    v4 = sorted(a["local"] for link in addrs for a in link["addr_info"] if a["family"] == "inet")
    assert v4 == sorted(["127.0.0.1", *fakenet.host_addresses])
    assert not [a for link in addrs for a in link["addr_info"] if a["family"] == "inet6"]
    # The other end: only lo and the link; no forwarding; no IPv6.
    links = json.loads(fakenet.run_in_inet(["ip", "-j", "link", "show"], check=True).stdout)
    assert sorted(link["ifname"] for link in links) == ["host0", "lo"]
    for ns_run in (fakenet.run_in_host, fakenet.run_in_inet):
        r = ns_run(["sysctl", "-n", "net.ipv4.ip_forward", "net.ipv6.conf.all.disable_ipv6"], check=True)
        assert r.stdout.split() == [b"0", b"1"]


def test_host_namespace_cannot_reach_root_loopback(fakenet):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    ls.settimeout(0.5)
    port = ls.getsockname()[1]
    try:
        with pytest.raises(ConnectionRefusedError):
            fakenet.connect_from_host("127.0.0.1", port)
        with pytest.raises(socket.timeout):
            ls.accept()
    finally:
        ls.close()


# ---------------------------------------------------------------- lifecycle

def test_teardown_and_stale_cleanup():
    # Other runs on the machine may add and remove fake internets meanwhile:
    # only this one's namespaces are looked at.
    net = fn.FakeNet().start()
    assert {net.host_ns, net.inet_ns} <= set(fn.netns_list())
    server, tmp = net.server, net.dir
    net.teardown()
    net.teardown()  # idempotent
    assert not {net.host_ns, net.inet_ns} & set(fn.netns_list())
    assert server.poll() is not None and not os.path.exists(tmp)
    assert not os.path.exists(f"/etc/netns/{net.host_ns}")
    # A namespace left by a run whose process is gone is removed; ours stay.
    live = fn.FakeNet().start()  # (its start removes stale ones too)
    p = subprocess.Popen(["true"])
    p.wait()
    stale = f"alt-host-{p.pid}"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in fn.remove_stale_namespaces()
        assert {live.host_ns, live.inet_ns} <= set(fn.netns_list())
    finally:
        subprocess.run(["ip", "netns", "del", stale], stderr=subprocess.DEVNULL)
        live.teardown()
    assert stale not in fn.netns_list()


def test_daemon_runs_in_the_host_namespace(fakenet, tmp_path):
    d = Daemon(tmp_path, netns=fakenet.host_ns, extra_args=[])
    assert d.argv()[0] == AIRLOCKD
    assert Daemon(tmp_path, extra_args=["--x", "1"]).argv()[-2:] == ["--x", "1"]
    if not os.path.exists(AIRLOCKD):
        pytest.skip("airlockd is not built")
    d.start()
    try:
        want = os.stat(f"/run/netns/{fakenet.host_ns}").st_ino
        assert os.stat(f"/proc/{d.proc.pid}/ns/net").st_ino == want
    finally:
        d.cleanup()
