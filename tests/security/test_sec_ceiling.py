# SPDX-License-Identifier: Apache-2.0
"""Category 3 (egress), issue 17 part 1: the operator's network ceiling.

A policy rule is what makes a non-public address dialable by the gateway,
which dials from the host's network namespace. What a policy may name is
the operator's decision (--network-ceiling; default: public addresses only,
here plus the fake internet's documentation ranges, --egress-public-cidr).
Every attempt names the host's networks in a policy, over a tenant's token
or the operator's socket, and checks it is refused (403, a message naming
the rule and the ceiling) and that nothing reached the trap servers the
fake internet keeps at 169.254.169.254 (meta.allowed.test) and 10.1.2.3
(private.allowed.test)."""
import json
import os
import subprocess

import pytest

import secutil as su
from secutil import attempt, fn

CEILING = "outside the operator's network ceiling (public addresses, 192.0.2.0/24, 203.0.113.0/24)"


@pytest.fixture
def sid(api, attacker):
    su.set_policy(api, attacker["id"], allow=[fn.WWW_ALLOWED])
    yield attacker["id"]
    su.set_policy(api, attacker["id"], allow=[fn.WWW_ALLOWED])


def no_trap(fakenet):
    for trap in (fn.META_IP, fn.PRIVATE_IP):
        assert not fakenet.tcp_connections(trap), fakenet.tcp_connections(trap)
        assert not fakenet.http_requests(trap), fakenet.http_requests(trap)


def refused(r, rule):
    assert r.status == 403, r
    msg = r.json["error"]["message"]
    assert f'"{rule}"' in msg and CEILING in msg, msg
    return msg


def policy_of(api, sid):
    j = api.request("GET", f"/v1/sandboxes/{sid}/network").json
    return {k: v for k, v in j.items() if k != "dropped"}


def put_refused(api, sid, rule):
    before = policy_of(api, sid)
    msg = refused(api.request("PUT", f"/v1/sandboxes/{sid}/network", body={"allow": [fn.WWW_ALLOWED, rule]}), rule)
    # The refused policy replaced nothing.
    assert policy_of(api, sid) == before
    return msg


# ------------------------------------------------------------------ a tenant's token

def test_tenant_rules(tcp, fakenet):
    mallory = tcp["mallory"]

    def count():
        return len(mallory.request("GET", "/v1/sandboxes").json["sandboxes"])

    for name, rule, what in (
            ("tenant-metadata", "169.254.169.254", "a tenant's create naming the metadata address"),
            ("tenant-private-range", "10.0.0.0/8", "a tenant's create naming 10.0.0.0/8"),
            ("tenant-any-v4-ssh", "0.0.0.0/0:22", "a tenant's create naming 0.0.0.0/0:22"),
            ("tenant-any-v6", "::/0", "a tenant's create naming ::/0")):
        with attempt("ceiling", f"ceiling-{name}", what):
            fakenet.clear_logs()
            n = count()
            r = mallory.request("POST", "/v1/sandboxes",
                                body={"template": "minimal", "network": {"allow": [rule]}})
            msg = refused(r, rule)
            if rule == "169.254.169.254":
                assert '"metadata": true' in msg, msg
            assert count() == n, "a sandbox was created"
            no_trap(fakenet)


# ------------------------------------------------------------------ the operator's socket, then a dial

def test_operator_rules(api, sid, watch, fakenet):
    with attempt("ceiling", "ceiling-put-metadata", "PUT .../network naming 169.254.169.254, then HTTP to it"):
        fakenet.clear_logs()
        put_refused(api, sid, "169.254.169.254")
        (rc, st), = su.curls(api, sid, [f"--max-time 5 http://{fn.META_IP}/latest/meta-data/"])
        assert st != 200
        no_trap(fakenet)

    with attempt("ceiling", "ceiling-put-private-port", "PUT naming 10.1.2.3:7000, then TCP to the trap's echo port"):
        fakenet.clear_logs()
        m = watch.mark()
        put_refused(api, sid, "10.1.2.3:7000")
        r = su.probe(api, sid, "tcp", fn.PRIVATE_IP, fn.TCP_ECHO_PORT, su.b64("ping"), "1")
        assert "ping" not in (r.get("reply") or ""), r
        no_trap(fakenet)
        watch.nothing_left(m)

    for name, rule, what in (
            ("ceiling-put-any-v4", "0.0.0.0/0", "PUT naming 0.0.0.0/0"),
            ("ceiling-put-straddle", "8.0.0.0/6", "PUT naming 8.0.0.0/6 (public 8/8, 9/8, 11/8 and private 10/8)"),
            ("ceiling-put-link-local-net", "169.254.169.0/24", "PUT naming a /24 around the metadata address"),
            ("ceiling-put-mapped-v6", "[::ffff:169.254.169.254]", "PUT naming the metadata address IPv4-mapped"),
            ("ceiling-put-imds-v6", "[fd00:ec2::254]", "PUT naming AWS's IPv6 metadata address"),
            ("ceiling-put-metadata-name", "metadata.google.internal", "PUT naming the GCE metadata host name"),
            ("ceiling-put-loopback", "127.0.0.0/8", "PUT naming the loopback network")):
        with attempt("ceiling", name, what):
            fakenet.clear_logs()
            put_refused(api, sid, rule)
            no_trap(fakenet)

    with attempt("ceiling", "ceiling-name-to-private", "an allowed name that resolves to the trap addresses (meta.allowed.test, private.allowed.test)"):
        su.set_policy(api, sid, allow=["*.allowed.test"])
        fakenet.clear_logs()
        m = watch.mark()
        res = su.curls(api, sid, [f"--max-time 5 http://{fn.META_NAME}/latest/meta-data/",
                                  f"--max-time 5 http://{fn.PRIVATE_NAME}/",
                                  f"--max-time 5 --resolve {fn.META_NAME}:80:{fn.ALLOWED_IP} http://{fn.META_NAME}/"])
        assert all(st != 200 for _, st in res), res
        no_trap(fakenet)
        watch.nothing_left(m)

    with attempt("ceiling", "ceiling-deny-only", "deny rules naming the host's networks are fine and open nothing"):
        fakenet.clear_logs()
        r = api.request("PUT", f"/v1/sandboxes/{sid}/network",
                        body={"allow": [fn.WWW_ALLOWED], "deny": ["169.254.169.254", "10.0.0.0/8", "0.0.0.0/0"]})
        assert r.status == 200, r
        (rc, st), = su.curls(api, sid, [f"--max-time 5 http://{fn.META_IP}/"])
        assert st != 200
        no_trap(fakenet)


# ------------------------------------------------------------------ the operator's own ceiling

def _daemon_argv(base, extra):
    d = su.Daemon(base, extra_args=["--egress-public-cidr", "192.0.2.0/24"] + extra)
    return d.argv()


def _write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return str(path)


def test_startup_default_outside_ceiling(tmp_path, fakenet):
    for name, ceiling, policy, what in (
            ("ceiling-default-metadata", None, {"allow": ["169.254.169.254"]},
             "--network-policy naming the metadata address, default ceiling"),
            ("ceiling-default-metadata-in-net", {"allow": ["169.254.0.0/16"]}, {"allow": ["169.254.169.254:80"]},
             "--network-policy naming the metadata address inside a ceiling network without \"metadata\": true")):
        with attempt("ceiling", name, what):
            base = tmp_path / name
            base.mkdir()
            extra = ["--network-policy", _write(base / "policy.json", policy)]
            if ceiling is not None:
                extra += ["--network-ceiling", _write(base / "ceiling.json", ceiling)]
            argv = ["nsenter", f"--net=/run/netns/{fakenet.host_ns}", "--"] + _daemon_argv(base, extra)
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
            err = p.stderr.decode(errors="replace") + p.stdout.decode(errors="replace")
            assert p.returncode != 0, err
            assert "outside the operator's network ceiling" in err and "metadata" in err, err
            assert not os.path.exists(base / "airlockd.sock")


def test_operator_ceiling_opens_its_network(tmp_path, fakenet):
    """Inside an operator's ceiling: a rule naming 10.1.2.3:7000 is accepted
    and the gateway dials it; the metadata address stays closed."""
    ceiling = _write(tmp_path / "ceiling.json", {"allow": ["10.1.2.0/24"], "metadata": False})
    d = su.Daemon(tmp_path / "d", netns=fakenet.host_ns,
                  extra_args=["--resolver", fakenet.resolver, "--egress-public-cidr", "192.0.2.0/24",
                              "--egress-public-cidr", "203.0.113.0/24", "--network-ceiling", ceiling])
    os.makedirs(d.base_dir, exist_ok=True)
    d.start()
    try:
        api = d.api
        with attempt("ceiling", "ceiling-operator-net-metadata", "inside an operator ceiling of 10.1.2.0/24: 169.254.169.254 still refused"):
            r = api.request("POST", "/v1/sandboxes", body={"template": "base", "network": {"allow": ["169.254.169.254"]}})
            assert r.status == 403 and "10.1.2.0/24" in r.json["error"]["message"], r
        sb = api.create_ok(template="base", vcpus=1, memory_mib=384, network={"allow": [f"{fn.PRIVATE_IP}:{fn.TCP_ECHO_PORT}"]})
        sid = sb["id"]
        su.put_file(api, sid, "/tmp/probe.py", su.GUEST_PROBE)
        fakenet.clear_logs()
        r = su.probe(api, sid, "tcp", fn.PRIVATE_IP, fn.TCP_ECHO_PORT, su.b64("ping"), "1")
        assert "ping" in (r.get("reply") or ""), r
        assert fakenet.tcp_connections(fn.PRIVATE_IP)
        api.delete(sid)
    finally:
        leftovers = d.cleanup()
        assert not leftovers, leftovers
