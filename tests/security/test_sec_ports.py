# SPDX-License-Identifier: Apache-2.0
"""Category 17: sandbox ports from outside (issue 22). A hostile tenant
(mallory, over TCP) at the victim's ports, through the API's tunnel
(`port-forward`); a hostile guest at the namespace's new rules (host-side
sockets may now connect to the guest, and the guest's replies are let in).

Containment is read from the victim's side: what its listener received
(/tmp/got in the `peer`), its record, the events, the namespace's dropped
counter."""
import json
import time

import secutil as su
from secutil import attempt

CONNECT_HEADERS = {"Connection": "Upgrade", "Upgrade": "airlock-tcp/1"}


def peer_got(api, peer):
    return su.sh_ok(api, peer["id"], "cat /tmp/got 2>/dev/null; true")


def tunnel_status(tcp_api, sid, port):
    """Asks for a tunnel with a raw request; the status and what came back."""
    s = tcp_api.raw_socket()
    try:
        auth = f"Authorization: Bearer {tcp_api.token}\r\n" if tcp_api.token else ""
        s.sendall(f"GET /v1/sandboxes/{sid}/ports/{port}/connect HTTP/1.1\r\nHost: x\r\n{auth}"
                  "Connection: Upgrade\r\nUpgrade: airlock-tcp/1\r\n\r\n".encode())
        status, raw = su.read_http_response(s)
        if status == 101:
            s.sendall(b"HELLO-FROM-MALLORY\n")
            time.sleep(0.5)
        return status, raw
    finally:
        s.close()


def test_another_tenants_ports(api, tcp, peer):
    sid = peer["id"]
    before = peer_got(api, peer)

    with attempt("ports", "portfwd-other-tenant", "open a port-forward tunnel to another tenant's port 8080"):
        status, raw = tunnel_status(tcp["mallory"], sid, 8080)
        assert status == 404, raw
        assert peer_got(api, peer) == before

    with attempt("ports", "portfwd-no-token", "open a port-forward tunnel without a token"):
        status, raw = tunnel_status(tcp[None], sid, 8080)
        assert status == 401, raw
        assert peer_got(api, peer) == before

    with attempt("ports", "expose-other-tenant", "expose another tenant's port 8080 as public"):
        r = tcp["mallory"].request("PUT", f"/v1/sandboxes/{sid}/ports/8080", body={"public": True})
        assert r.status == 404, r
        got = api.request("GET", f"/v1/sandboxes/{sid}").json
        assert got["ports"] == [], got

    with attempt("ports", "ports-token-other-tenant", "read another tenant's traffic token from its ports list"):
        for method in ("GET", "DELETE"):
            path = f"/v1/sandboxes/{sid}/ports" + ("/8080" if method == "DELETE" else "")
            r = tcp["mallory"].request(method, path)
            assert r.status == 404, r
            assert b"att_" not in (r.raw or b""), r

    with attempt("ports", "portfwd-bad-ports", "tunnels to ports 0, 65536, -1, 80a, 1e3 and a 20-digit port"):
        for port in ("0", "65536", "-1", "80a", "1e3", "9" * 20):
            status, raw = tunnel_status(tcp["victim"], sid, port)
            assert status in (400, 404), (port, raw)
        assert peer_got(api, peer) == before


def test_guest_cannot_use_the_tunnels_path(api, attacker, watch):
    """The namespace lets marked host sockets connect to the guest and the
    guest's replies in (`ct direction reply`): a guest that learns a
    tunnel's host-side port must still not begin a connection of its own."""
    sid = attacker["id"]
    # A server in the attacker guest that reports the peer of what it accepts.
    server = ("import socket,json\n"
              "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "s.bind(('0.0.0.0', 9911)); s.listen(4)\n"
              "while True:\n"
              "    c,a=s.accept(); open('/tmp/peer','w').write(json.dumps(a)); c.sendall(b'hi\\n')\n")
    su.put_file(api, sid, "/tmp/srv.py", server)
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["python3", "/tmp/srv.py"],
                                                                     "tag": "sec-ports"})
    assert r.status == 201, r
    proc = r.json["id"]
    try:
        deadline = time.time() + 20
        s = None
        while time.time() < deadline:
            s = su.unix_socket(api.socket_path)
            s.sendall(f"GET /v1/sandboxes/{sid}/ports/9911/connect HTTP/1.1\r\nHost: x\r\n"
                      "Connection: Upgrade\r\nUpgrade: airlock-tcp/1\r\n\r\n".encode())
            status, raw = su.read_http_response(s)
            if status == 101:
                break
            s.close()
            s = None
            time.sleep(0.5)
        assert s is not None, "the guest's server never answered through the tunnel"
        try:
            peer_ip, peer_port = json.loads(su.sh_ok(api, sid, "cat /tmp/peer"))
            assert peer_ip == "10.0.2.2", peer_ip

            with attempt("ports", "ct-reply-abuse",
                         "while a tunnel is open, connect from the guest to its host-side port and its neighbours"):
                m = watch.mark()
                rs = su.probe_many(api, sid, [["tcp", "10.0.2.2", p, su.b64("INJECTED\r\n\r\n"), "0.5"]
                                              for p in (peer_port, peer_port + 1, peer_port - 1)])
                # New connections from the guest go where all its TCP goes (the gateway, which
                # refuses 10.0.2.2), never to the daemon's end of the tunnel.
                assert all(r.get("status") in (None, 403) for r in rs), rs
                s.settimeout(1.0)
                got = b""
                try:
                    while True:
                        c = s.recv(65536)
                        if not c:
                            break
                        got += c
                except OSError:
                    pass
                assert b"INJECTED" not in got, got
                watch.nothing_left(m)
        finally:
            s.close()
    finally:
        api.request("POST", f"/v1/sandboxes/{sid}/processes/{proc}/signal", body={"signal": "KILL"})


def test_marks_do_not_cross_the_tap(api, attacker, watch):
    sid = attacker["id"]
    with attempt("ports", "guest-so-mark", "mark the guest's own sockets with the host's port mark and connect to "
                 "10.0.2.2 on 22, 80, 8080, 15002"):
        m = watch.mark()
        script = ("import socket,json\nres={}\n"
                  "for p in (22, 80, 8080, 15002):\n"
                  "    s=socket.socket(); s.settimeout(2)\n"
                  "    s.setsockopt(socket.SOL_SOCKET, 36, 0x41a1)\n"
                  "    try:\n"
                  "        s.connect(('10.0.2.2', p)); s.sendall(b'GET / HTTP/1.1\\r\\nHost: 10.0.2.2\\r\\n\\r\\n')\n"
                  "        res[p]=s.recv(64).decode('latin-1')[:12]\n"
                  "    except OSError as e:\n        res[p]=type(e).__name__\n"
                  "print(json.dumps(res))\n")
        out = su.py(api, sid, script)
        # Every connect lands on the gateway (all guest TCP does), which refuses 10.0.2.2 (403,
        # or a closed connection): the host's mark means nothing in the guest and never crosses
        # the tap; nothing reached the host's own services (the canary).
        assert all(v in ("", "HTTP/1.1 403") or not v.startswith("HTTP") for v in out.values()), out
        watch.nothing_left(m)
