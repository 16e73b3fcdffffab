# SPDX-License-Identifier: Apache-2.0
"""Category 2: host services and other tenants. From the attacker guest: the
daemon's API (TCP and unix), every address of the host, the metadata
address and the private "trap" hosts of the fake internet, another sandbox,
port scans; as a hostile TCP client: another tenant's sandbox.

What reached anything is read from the watchers (secutil.Sniffer on the
fake internet's link, secutil.Canary on every host address) and the fake
internet's logs, never from the attacker's own view alone."""
import secutil as su
from secutil import attempt, fn

HTTP_GET = "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


def auth_failures(api, mark):
    return [e for e in mark.since(api, type_prefix="auth.failure")]


# ------------------------------------------------------------------ the daemon's API

def test_the_api_is_out_of_reach(api, secd, attacker, watch):
    sid = attacker["id"]
    su.set_policy(api, sid, allow=[fn.WWW_ALLOWED])
    port = secd.port

    for name, target in (("api-tcp-host-ip", f"{fn.HOST_IP}:{port}"), ("api-tcp-gateway", f"10.0.2.2:{port}"),
                         ("api-tcp-loopback", f"127.0.0.1:{port}")):
        with attempt("services", name, f"reach airlockd's TCP listener at {target.split(':')[0]} from the guest"):
            m, em = watch.mark(), su.EventMark(api)
            ip = target.split(":")[0]
            r = su.probe(api, sid, "tcp", ip, port, su.b64("GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                                                               "Authorization: Bearer alk_guess\r\n\r\n"))
            assert r.get("status") is None, r
            assert not auth_failures(api, em), "the guest's request reached the API"
            watch.nothing_left(m)

    with attempt("services", "api-tcp-host-header", "Host: 127.0.0.1:<api port> through an allowed address"):
        m, em = watch.mark(), su.EventMark(api)
        rc, status, body = su.curl(api, sid, f"-H 'Host: 127.0.0.1:{port}' http://{fn.ALLOWED_IP}/v1/sandboxes")
        assert status in (0, 403), (status, body)
        assert not auth_failures(api, em)
        watch.nothing_left(m)

    with attempt("services", "api-unix-socket", "reach airlockd's unix socket by its host path or any *.sock"):
        code, out, err = su.sh(api, sid, f"curl -s --max-time 3 --unix-socket {secd.socket} http://x/healthz; "
                                         "echo rc=$?; find / -xdev -name '*.sock' 2>/dev/null | head")
        assert "rc=7" in out and '"status"' not in out, out
        assert "airlockd" not in out, out

    with attempt("services", "vsock-host", "connect to the host over AF_VSOCK (CID 2 and 1)"):
        rs = su.probe_many(api, sid, [["vsock", cid, p] for cid, p in ((2, 1024), (2, 22), (1, 1024), (2, 52))])
        assert not any(r["connected"] for r in rs), rs


# ------------------------------------------------------------------ the host's own addresses

def test_host_addresses_are_out_of_reach(api, secd, attacker, watch):
    sid = attacker["id"]
    su.set_policy(api, sid, allow=["*.allowed.test"])

    with attempt("services", "host-ip-ports", f"connect to the host's address {fn.HOST_IP} on 22, 80, 443, 8080, 2375, 6443"):
        m = watch.mark()
        rs = su.probe_many(api, sid, [["tcp", fn.HOST_IP, port, su.b64(HTTP_GET.format(host=fn.HOST_IP)), "0.5"]
                                      for port in (22, 80, 443, 8080, 2375, 6443)])
        assert all(r.get("status") in (None, 403) for r in rs), rs
        watch.nothing_left(m)

    with attempt("services", "gateway-ip-ports", "connect to the gateway address 10.0.2.2 on 22, 80, 443, 8080, 15001, 15002"):
        m = watch.mark()
        rs = su.probe_many(api, sid, [["tcp", "10.0.2.2", port, su.b64(HTTP_GET.format(host="10.0.2.2")), "0.5"]
                                      for port in (22, 80, 443, 8080, 15001, 15002)])
        assert all(r.get("status") in (None, 403) for r in rs), rs
        watch.nothing_left(m)

    with attempt("services", "loopback-by-name", "an allowed name that resolves to 127.0.0.1 (loop.allowed.test)"):
        m = watch.mark()
        (_, s1), (_, s2) = su.curls(api, sid, [f"http://{fn.LOOP_NAME}/",
                                               f"--resolve {fn.LOOP_NAME}:80:{fn.ALLOWED_IP} http://{fn.LOOP_NAME}/"])
        assert s1 != 200 and s2 == 403, (s1, s2)
        watch.nothing_left(m)

    with attempt("services", "self-by-name", "an allowed name that resolves to the host's own address"):
        m = watch.mark()
        (_, s1), (_, s2) = su.curls(api, sid, [
            f"--resolve {fn.SELF_NAME}:80:{fn.ALLOWED_IP} http://{fn.SELF_NAME}/",
            f"-k --resolve {fn.SELF_NAME}:443:{fn.ALLOWED_IP} https://{fn.SELF_NAME}/"])
        assert (s1, s2) == (403, 0), (s1, s2)
        watch.nothing_left(m)

    with attempt("services", "loopback-host-header", "Host: 127.0.0.1, localhost, [::1], 0.0.0.0 to an allowed address"):
        m = watch.mark()
        hosts = ("127.0.0.1", "localhost", "[::1]", "0.0.0.0", "127.1", "localhost.localdomain")
        rs = su.curls(api, sid, [f"-H 'Host: {h}' http://{fn.ALLOWED_IP}/" for h in hosts])
        assert [st for _, st in rs] == [403] * len(hosts), rs
        watch.nothing_left(m)

    with attempt("services", "loopback-sni", "TLS with SNI localhost to an allowed address"):
        m = watch.mark()
        r = su.probe(api, sid, "tls", fn.ALLOWED_IP, 443, "localhost")
        assert r["handshake"] is False, r
        watch.nothing_left(m)


# ------------------------------------------------------------------ metadata and private addresses

def test_metadata_and_private_addresses(api, attacker, watch, fakenet):
    sid = attacker["id"]
    su.set_policy(api, sid, allow=["*.allowed.test"])

    def no_trap(m):
        for trap in (fn.META_IP, fn.PRIVATE_IP):
            assert not fakenet.tcp_connections(trap), trap
            assert not watch.syns(m, dst=trap), trap
        watch.nothing_left(m, allowed={(fn.ALLOWED_IP, 80), (fn.ALLOWED_IP, 443)})

    with attempt("services", "metadata-direct", "GET http://169.254.169.254/latest/meta-data/"):
        m = watch.mark()
        rc, status, _ = su.curl(api, sid, f"http://{fn.META_IP}/latest/meta-data/")
        assert status == 403, status
        no_trap(m)

    with attempt("services", "metadata-by-name", "an allowed name that resolves to the metadata address"):
        m = watch.mark()
        (_, s1), (_, s2) = su.curls(api, sid, [f"http://{fn.META_NAME}/latest/meta-data/",
                                               f"--resolve {fn.META_NAME}:80:{fn.ALLOWED_IP} http://{fn.META_NAME}/"])
        assert s1 != 200 and s2 == 403, (s1, s2)
        no_trap(m)

    with attempt("services", "metadata-host-header", "Host: 169.254.169.254 (and metadata.google.internal) to an allowed address"):
        m = watch.mark()
        hosts = (fn.META_IP, "metadata.google.internal", "169.254.169.254:80")
        rs = su.curls(api, sid, [f"-H 'Host: {h}' http://{fn.ALLOWED_IP}/latest/meta-data/" for h in hosts])
        assert [st for _, st in rs] == [403] * len(hosts), rs
        no_trap(m)

    with attempt("services", "metadata-sni", "TLS with SNI meta.allowed.test (allowed name, metadata address)"):
        m = watch.mark()
        r = su.probe(api, sid, "tls", fn.META_IP, 443, fn.META_NAME)
        assert r["handshake"] is False, r
        assert not fakenet.tls_handshakes(fn.META_IP)
        no_trap(m)

    with attempt("services", "private-by-name", "an allowed name that resolves to 10.1.2.3 (private)"):
        m = watch.mark()
        rc, status, _ = su.curl(api, sid, f"--resolve {fn.PRIVATE_NAME}:80:{fn.ALLOWED_IP} http://{fn.PRIVATE_NAME}/")
        assert status == 403, status
        no_trap(m)

    with attempt("services", "mixed-public-private", "a name with a public and a private address: only the public one is dialled"):
        m = watch.mark()
        rs = su.curls(api, sid, [f"http://{fn.MIXED_NAME}/"] * 3)
        assert [st for _, st in rs] == [200] * 3, rs
        no_trap(m)

    with attempt("services", "ipv6-mapped-names", "names whose AAAA is ::ffff:10.1.2.3, NAT64 or ULA"):
        m = watch.mark()
        names = ("mapped.allowed.test", "nat64.allowed.test", "ula.allowed.test", "meta6.allowed.test")
        rs = su.curls(api, sid, [f"--resolve {n}:80:{fn.ALLOWED_IP} http://{n}/" for n in names])
        assert [st for _, st in rs] == [403] * len(names), rs
        no_trap(m)
        assert not [r for r in watch.internet(m) if r.get("kind") == "ipv6"]


# ------------------------------------------------------------------ another sandbox

def test_another_sandbox_is_out_of_reach(api, attacker, peer, watch):
    sid = attacker["id"]
    got_before = su.peer_got(api, peer)
    token = "AIRLOCK-SEC-PEER"

    with attempt("services", "peer-same-address", "connect to 10.0.2.15:8080: every sandbox has that address, the peer listens on it in its own namespace"):
        r = su.probe(api, sid, "tcp", "10.0.2.15", 8080, su.b64(token + "-1\n"), "1")
        assert r["connected"] is False, r
        assert token not in su.peer_got(api, peer)

    with attempt("services", "peer-by-ip-rule", "a policy rule naming 10.0.2.0/24:8080, then connect to 10.0.2.15:8080 via the gateway"):
        # Outside the operator's network ceiling (issue 17): refused.
        r = api.request("PUT", f"/v1/sandboxes/{sid}/network", body={"allow": ["10.0.2.0/24:8080", "10.0.2.15:8080"]})
        assert r.status == 403, r
        m = watch.mark()
        su.probe_many(api, sid, [["tcp", ip, 8080, su.b64(token + "-2\n"), "0.5"]
                                 for ip in ("10.0.2.15", "10.0.2.3", "10.0.2.255")])
        assert token not in su.peer_got(api, peer)
        # The rule makes the gateway dial 10.0.2.x from the host, where that
        # address is not a sandbox: whatever left went to the fake internet.
        watch.nothing_left(m, allowed={(ip, 8080) for ip in ("10.0.2.15", "10.0.2.3", "10.0.2.255")})

    with attempt("services", "peer-layer2", "raw Ethernet frames to the peer's MAC (the same fixed MAC in every sandbox)"):
        script = r'''
import json, socket, struct
p = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
p.bind(("eth0", 0))
mac = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
payload = b"AIRLOCK-SEC-PEER-3"
for dst in (mac, b"\xff" * 6, bytes.fromhex("02a10c000202")):
    udp = struct.pack("!HHHH", 40000, 8080, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton("10.0.2.15"),
                     socket.inet_aton("10.0.2.15"))
    p.send(dst + mac + b"\x08\x00" + ip + udp)
print(json.dumps({"sent": 3}))
'''
        assert su.py(api, sid, script) == {"sent": 3}
        assert token not in su.peer_got(api, peer)
    su.set_policy(api, sid, allow=[fn.WWW_ALLOWED])
    assert su.peer_got(api, peer) == got_before


def test_another_tenants_sandbox_over_tcp(api, tcp, peer, attacker):
    mal = tcp["mallory"]
    pid = peer["id"]
    b = f"/v1/sandboxes/{pid}"

    def nf(r):
        assert r.status == 404, r
        assert r.json["error"]["code"] == "not_found", r
        assert pid not in r.raw.decode() or "no sandbox" in r.raw.decode(), r

    for name, method, path, body in (
            ("tenant-get", "GET", b, None),
            ("tenant-exec", "POST", f"{b}/exec", {"cmd": ["echo", "pwned"]}),
            ("tenant-processes", "POST", f"{b}/processes", {"cmd": ["sleep", "100"]}),
            ("tenant-files", "GET", f"{b}/files?path=/etc/hostname", None),
            ("tenant-archive", "GET", f"{b}/archive?path=/tmp", None),
            ("tenant-delete", "DELETE", b, None),
            ("tenant-network", "PUT", f"{b}/network", {"allow": ["*.allowed.test"]}),
            ("tenant-pause", "POST", f"{b}/pause", None),
            ("tenant-fork", "POST", f"{b}/fork", {"count": 1}),
            ("tenant-timeout", "POST", f"{b}/timeout", {"timeout_s": 1}),
            ("tenant-metrics", "GET", f"{b}/metrics", None)):
        with attempt("services", name, f"as tenant mallory: {method} {path.replace(pid, '{victim id}')}"):
            nf(mal.request(method, path, body=body))
    with attempt("services", "tenant-list", "as tenant mallory: list sandboxes (?all=true, metadata filters)"):
        for q in ("", "?all=true", "?metadata.owner=x"):
            r = mal.request("GET", "/v1/sandboxes" + q)
            assert r.status == 200, r
            ids = [s["id"] for s in r.json["sandboxes"]]
            assert pid not in ids and attacker["id"] not in ids, ids
    # The victim is untouched by all of it.
    v = api.get(pid).json
    assert v["state"] == "running" and v["network"] == {"allow": [], "deny": []} and v["timeout_s"] == 0, v
    assert su.sh_ok(api, pid, "echo ok") == "ok\n"


# ------------------------------------------------------------------ port scans

def test_port_scans(api, attacker, watch, fakenet):
    sid = attacker["id"]
    su.set_policy(api, sid, allow=[fn.WWW_ALLOWED, f"{fn.ALLOWED_IP}:{fn.TCP_ECHO_PORT}"])
    with attempt("services", "scan-gateway", "scan 10.0.2.2 ports 1-1100 and 15000-15010"):
        m = watch.mark()
        r = su.probe(api, sid, "scan", "10.0.2.2", "1-1100,15000-15010", su.b64("PING\r\n\r\n"), "0.2", timeout=300)
        assert r["scanned"] == 1111
        # Only the gateway itself answers: its refusal of a non-HTTP head on 80.
        assert all(p == 80 and h.startswith("HTTP/1.1 4") for p, h in r["replied"]), r
        watch.nothing_left(m)

    with attempt("services", "scan-internet-host", f"scan {fn.ALLOWED_IP} ports 1-1100, 7000, 8443: only the allowed ones connect"):
        m = watch.mark()
        r = su.probe(api, sid, "scan", fn.ALLOWED_IP, "1-1100,7000,8443", su.b64("PING\r\n\r\n"), "0.5", timeout=300)
        replied = dict(r["replied"])
        assert replied.get(7000, "").startswith("PING"), r  # the one rule that names a port: the echo answered
        assert set(replied) <= {7000, 80} and replied.get(80, "HTTP/1.1 4").startswith("HTTP/1.1 4"), r
        syn_ports = {s["dport"] for s in watch.syns(m, dst=fn.ALLOWED_IP)}
        assert syn_ports == {7000}, syn_ports
        watch.nothing_left(m, allowed={(fn.ALLOWED_IP, 7000)})
    su.set_policy(api, sid, allow=[fn.WWW_ALLOWED])
