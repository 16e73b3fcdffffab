# SPDX-License-Identifier: Apache-2.0
"""Secrets on the daemon's side (docs/api.md, "Secrets", "The Airlock CA"):
the write-only API and its tenants, placeholders in real guests (template
minimal, no network needed), the lifecycle rule of bindings, the CA in every
guest, and what the egress gateway is sent.

The module's daemon runs a stand-in for airlock-egress (`--egress-bin`): a
small program that speaks the control protocol (ctlmsg.h), acks every
request, and records each message with every secret value and the CA key
replaced by its SHA-256, so that the test sees exactly what the gateway
receives without writing a value anywhere. One test at the end runs the real
gateway. Substitution itself is the interception tests' business
(test_egress_intercept.py), not this module's.

Every value used here is random per run; "never" is checked by searching
the bytes of the daemon's log, the events, every file of the state dir (the
database, the sandboxes' disks, the snapshots' memory and disk) and every
answer."""
import hashlib
import json
import os
import re
import secrets as pysecrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import pytest

from apiutil import ListeningDaemon, TcpApi, free_port, wait_until
from conftest import AIRLOCK, Daemon, _report_on_failure

PLACEHOLDER = re.compile(r"^airlock-ph-[0-9a-f]{64}$")
WAIT_S = 120

# The stand-in gateway. It runs as the gateway's own uid (the supervisor drops privileges),
# so it and its record live in a world-writable temporary directory.
FAKE_GATEWAY = r'''#!/usr/bin/python3
import hashlib, json, os, socket, sys, time

here = os.path.dirname(os.path.abspath(__file__))
ctl = socket.socket(fileno=3)
record = open(os.path.join(here, "record.jsonl"), "a", buffering=1)

def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()

def scrub(msg):
    """The message as recorded: values and the key only as digests."""
    out = dict(msg)
    if "key_pem" in out:
        out["key_pem_sha256"] = sha(out.pop("key_pem"))
    if isinstance(out.get("bindings"), list):
        bs = []
        for b in out["bindings"]:
            b = dict(b)
            if "value" in b:
                b["value_sha256"] = sha(b.pop("value"))
            bs.append(b)
        out["bindings"] = bs
    return out

ctl.send(json.dumps({"op": "ready", "version": 1}).encode())
while True:
    try:
        data, anc, flags, _ = ctl.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 4))
    except InterruptedError:
        continue
    fds = []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(payload[i:i + 4], "little") for i in range(0, len(payload) - 3, 4)]
    for fd in fds:
        os.close(fd)
    if not data:
        break
    msg = json.loads(data)
    rec = scrub(msg)
    rec["nfds"] = len(fds)
    rec["pid"] = os.getpid()
    record.write(json.dumps(rec) + "\n")
    ctl.send(json.dumps({"op": "ack", "seq": msg.get("seq")}).encode())
'''


class FakeGateway:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="airlock-fake-egress-", dir="/tmp")
        os.chmod(self.dir, 0o777)
        self.bin = os.path.join(self.dir, "fake-egress")
        with open(self.bin, "w") as f:
            f.write(FAKE_GATEWAY)
        os.chmod(self.bin, 0o755)
        self.record = os.path.join(self.dir, "record.jsonl")

    def messages(self, op=None, sandbox=None):
        if not os.path.exists(self.record):
            return []
        with open(self.record) as f:
            out = [json.loads(l) for l in f if l.strip()]
        return [m for m in out if (op is None or m.get("op") == op) and
                (sandbox is None or m.get("sandbox") == sandbox)]

    def pids(self):
        found = []
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            try:
                with open(f"/proc/{e}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            # python3 BIN --control-fd 3 (not airlockd, whose argv names it too).
            if len(argv) > 1 and argv[1] == self.bin.encode():
                found.append(int(e))
        return found

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def sha(text):
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def new_value(tag):
    # Distinctive, random, and made of characters a header may carry.
    return f"{tag}-{pysecrets.token_hex(20)}"


# ------------------------------------------------------------------ leak checks

def file_holds(path, needles):
    """Which of needles (bytes) the file holds, read in overlapping blocks."""
    found = set()
    longest = max(len(n) for n in needles)
    with open(path, "rb") as f:
        tail = b""
        while True:
            block = f.read(8 << 20)
            if not block:
                break
            buf = tail + block
            for n in needles:
                if n in buf:
                    found.add(n)
            tail = buf[-longest:]
    return found


def tree_holds(root, needles):
    """{path: needles found} for every regular file under root."""
    hits = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            try:
                f = file_holds(p, needles)
            except OSError:
                continue
            if f:
                hits[p] = f
    return hits


def assert_nowhere(daemon, values, extra_text=()):
    """None of values is in the daemon's log, its events, any file of its
    state dir, or the extra texts (answers, CLI output)."""
    needles = [v.encode() for v in values]
    hits = tree_holds(daemon.state_dir, needles)
    assert not hits, f"secret values in the state dir: {sorted(hits)}"
    with open(daemon.log_path, "rb") as f:
        log = f.read()
    ev = daemon.api.request("GET", "/v1/events").raw
    for n in needles:
        assert n not in log, "a secret value is in the daemon's log"
        assert n not in ev, "a secret value is in the events"
        for t in extra_text:
            assert n not in (t if isinstance(t, bytes) else t.encode()), "a secret value is in an answer"


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def gw():
    g = FakeGateway()
    yield g
    g.remove()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, gw):
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-secrets"), free_port(),
                        extra_args=["--egress-bin", gw.bin]).start()
    yield d
    if d.proc is not None and d.proc.poll() is None:
        try:
            for s in d.api.request("GET", "/v1/snapshots").json["snapshots"]:
                d.api.request("DELETE", f"/v1/snapshots/{s['id']}")
        except Exception:
            pass
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left after the module: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def api(daemon, request):
    yield daemon.api
    _report_on_failure(request, daemon)


@pytest.fixture(scope="module")
def tokens(daemon):
    out = {}
    for tenant in ("sa", "sb"):
        r = daemon.api.request("POST", "/v1/tokens", body={"tenant": tenant})
        assert r.status == 201, r
        out[tenant] = TcpApi(daemon.port, r.json["token"])
    return out


def set_secret(api, name, value, hosts=("api.example.com",), status=(200, 201), **fields):
    body = {"name": name, "value": value, "hosts": list(hosts), **fields}
    r = api.request("POST", "/v1/secrets", body=body)
    assert r.status in status, r
    return r


def check_error(r, status, code=None):
    assert r.status == status, r
    assert isinstance(r.json, dict) and set(r.json) == {"error"}, r
    if code:
        assert r.json["error"]["code"] == code, r
    return r.json["error"]["message"]


def exec_env(api, sid):
    r = api.exec_ok(sid, ["env"])
    return dict(line.split("=", 1) for line in r["stdout"].splitlines() if "=" in line)


def guest_cat(api, sid, path):
    r = api.exec_ok(sid, ["cat", path])
    assert r["exit_code"] == 0, r
    return r["stdout"]


# ------------------------------------------------------------------ the API

def test_set_list_inspect_rm_never_show_the_value(api, daemon):
    v1, v2 = new_value("first"), new_value("second")
    answers = []
    r = set_secret(api, "gh.token", v1, hosts=["api.github.com", "*.githubusercontent.com:8443"],
                   paths=["/repos/"], methods=["get", "POST"], header="Authorization", format="Bearer {value}",
                   status=(201,))
    answers.append(r.raw)
    s = r.json
    assert re.fullmatch(r"sec-[0-9a-f]{16}", s["id"]), s
    assert s["tenant"] == "default" and s["name"] == "gh.token", s
    assert s["hosts"] == ["api.github.com", "*.githubusercontent.com:8443"] and s["paths"] == ["/repos/"], s
    assert s["methods"] == ["GET", "POST"] and s["header"] == "Authorization", s
    assert s["format"] == "Bearer {value}" and "value" not in s, s

    # Rotation: 200, same id and created_at, the new spec.
    r = set_secret(api, "gh.token", v2, hosts=["api.github.com"], status=(200,))
    answers.append(r.raw)
    assert r.json["id"] == s["id"] and r.json["created_at"] == s["created_at"], r
    assert r.json["header"] is None and r.json["format"] is None and r.json["methods"] == [], r

    lst = api.request("GET", "/v1/secrets")
    one = api.request("GET", "/v1/secrets/gh.token")
    answers += [lst.raw, one.raw]
    assert lst.status == 200 and [x["name"] for x in lst.json["secrets"]] == ["gh.token"], lst
    assert one.status == 200 and one.json["id"] == s["id"], one
    assert all("value" not in x for x in lst.json["secrets"])

    # Refusals never quote the value, even of a body that is not JSON.
    for body in ({"name": "x", "value": v1 + "\r\nX-Injected: 1", "hosts": ["a.example"]},
                 {"name": "x", "value": v1, "hosts": ["203.0.113.7"]},
                 {"name": "x", "value": v1, "hosts": ["a.example"], "header": "Host"},
                 {"name": "Bad Name", "value": v1, "hosts": ["a.example"]},
                 {"name": "x", "value": v1, "hosts": ["a.example"], "format": "{value}"},
                 {"name": "x", "value": v1, "hosts": ["a.example"], "surprise": v1}):
        r = api.request("POST", "/v1/secrets", body=body)
        check_error(r, 400, "invalid_argument")
        answers.append(r.raw)
    r = api.request("POST", "/v1/secrets", raw=b'{"name":"x","value":"' + v1.encode() + b'\x01"}',
                    headers={"Content-Type": "application/json"})
    check_error(r, 400, "invalid_argument")
    answers.append(r.raw)
    assert api.request("GET", "/v1/secrets/x").status == 404

    # The CLI: set from stdin (one trailing newline stripped), ls, inspect, rm.
    cli = [AIRLOCK, "--socket", daemon.socket]
    p = subprocess.run(cli + ["secret", "set", "cli-one", "--host", "cli.example", "--header", "X-Api-Key"],
                       input=(v1 + "\n").encode(), capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"cli-one created\n", p
    p = subprocess.run(cli + ["secret", "set", "cli-one", "--host", "cli.example", "--value-stdin"],
                       input=v2.encode(), capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == b"cli-one replaced\n", p
    outs = [p.stdout + p.stderr]
    for args in (["secret", "ls"], ["secret", "ls", "--json"], ["secret", "inspect", "cli-one"],
                 ["secret", "inspect", "cli-one", "--json"]):
        p = subprocess.run(cli + args, capture_output=True, timeout=60)
        assert p.returncode == 0, p
        assert b"cli-one" in p.stdout, p
        outs.append(p.stdout + p.stderr)
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write(v1 + "\r\n")
    try:
        p = subprocess.run(cli + ["secret", "set", "cli-two", "--host", "cli.example", "--value-file", f.name],
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p
    finally:
        os.unlink(f.name)
    # Placeholder mode's header fields (issue 17): --in-header, repeatable.
    p = subprocess.run(cli + ["secret", "set", "cli-three", "--host", "cli.example", "--in-header", "X-Api-Key",
                              "--in-header", "Cookie"], input=v1.encode(), capture_output=True, timeout=60)
    assert p.returncode == 0, p
    p = subprocess.run(cli + ["secret", "inspect", "cli-three", "--json"], capture_output=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["headers"] == ["X-Api-Key", "Cookie"], p
    p = subprocess.run(cli + ["secret", "inspect", "cli-three"], capture_output=True, timeout=60)
    assert b"replaced in X-Api-Key Cookie" in p.stdout, p
    assert subprocess.run(cli + ["secret", "rm", "cli-three"], capture_output=True, timeout=60).returncode == 0
    # Usage errors: no host, --format without --header, an empty value,
    # --in-header with --header.
    for args, inp in ((["secret", "set", "z"], b"v"), (["secret", "set", "z", "--host", "a.example",
                                                         "--format", "{value}"], b"v"),
                      (["secret", "set", "z", "--host", "a.example"], b"\n"),
                      (["secret", "set", "z", "--host", "a.example", "--header", "A", "--in-header", "B"], b"v")):
        p = subprocess.run(cli + args, input=inp, capture_output=True, timeout=60)
        assert p.returncode != 0, p
    p = subprocess.run(cli + ["secret", "rm", "cli-one", "cli-two", "nope"], capture_output=True, timeout=60)
    assert p.returncode == 125 and p.stdout == b"cli-one\ncli-two\n", p
    outs.append(p.stdout + p.stderr)

    assert api.request("DELETE", "/v1/secrets/gh.token").status == 204
    check_error(api.request("GET", "/v1/secrets/gh.token"), 404, "not_found")
    check_error(api.request("DELETE", "/v1/secrets/gh.token"), 404, "not_found")

    # Events name the secrets and never hold a value.
    ev = [json.loads(l) for l in api.request("GET", "/v1/events?type=secret.").raw.splitlines() if l.strip()]
    names = [(e["type"], e["data"]["name"]) for e in ev]
    assert ("secret.set", "gh.token") in names and ("secret.deleted", "gh.token") in names, names
    assert [e["data"]["created"] for e in ev if e["data"]["name"] == "gh.token" and e["type"] == "secret.set"] \
        == [True, False], ev
    assert_nowhere(daemon, [v1, v2], answers + outs)


def test_tenant_isolation(api, daemon, tokens):
    va, vb = new_value("tenant-a"), new_value("tenant-b")
    a, b = tokens["sa"], tokens["sb"]
    r = a.request("POST", "/v1/secrets", body={"name": "shared", "value": va, "hosts": ["a.example"]})
    assert r.status == 201 and r.json["tenant"] == "sa", r
    r = b.request("POST", "/v1/secrets", body={"name": "shared", "value": vb, "hosts": ["b.example"]})
    assert r.status == 201 and r.json["tenant"] == "sb", r
    assert r.json["id"] != a.request("GET", "/v1/secrets/shared").json["id"]

    # Each token sees only its own tenant's, under the same name.
    assert [s["hosts"] for s in a.request("GET", "/v1/secrets").json["secrets"]] == [["a.example"]]
    assert [s["hosts"] for s in b.request("GET", "/v1/secrets").json["secrets"]] == [["b.example"]]
    b_only = b.request("POST", "/v1/secrets", body={"name": "b-only", "value": vb, "hosts": ["b.example"]})
    assert b_only.status == 201, b_only
    check_error(a.request("GET", "/v1/secrets/b-only"), 404, "not_found")
    check_error(a.request("DELETE", "/v1/secrets/b-only"), 404, "not_found")
    # Naming another tenant is refused, in a body or a query.
    check_error(a.request("POST", "/v1/secrets", body={"name": "x", "value": va, "hosts": ["a.example"],
                                                        "tenant": "sb"}), 403, "forbidden")
    check_error(a.request("GET", "/v1/secrets?tenant=sb"), 403, "forbidden")
    check_error(a.request("GET", "/v1/secrets/b-only?tenant=sb"), 403, "forbidden")
    check_error(a.request("DELETE", "/v1/secrets/b-only?tenant=sb"), 403, "forbidden")
    # A sandbox can be granted only its own tenant's secrets: refused before anything boots.
    before = len(api.list(all=True))
    msg = check_error(a.request("POST", "/v1/sandboxes", body={"secrets": {"B_TOKEN": "b-only"}}), 400,
                      "invalid_argument")
    assert "secrets.B_TOKEN" in msg and '"b-only"' in msg, msg
    assert len(api.list(all=True)) == before

    # The admin sees every tenant, and picks one by query or body.
    everyone = {(s["tenant"], s["name"]) for s in api.request("GET", "/v1/secrets").json["secrets"]}
    assert {("sa", "shared"), ("sb", "shared"), ("sb", "b-only")} <= everyone, everyone
    assert [s["tenant"] for s in api.request("GET", "/v1/secrets?tenant=sb").json["secrets"]] == ["sb", "sb"]
    assert api.request("GET", "/v1/secrets/shared?tenant=sa").json["hosts"] == ["a.example"]
    check_error(api.request("GET", "/v1/secrets/shared"), 404, "not_found")  # default tenant has none
    r = api.request("POST", "/v1/secrets", body={"name": "admin-made", "value": va, "hosts": ["a.example"],
                                                 "tenant": "sa"})
    assert r.status == 201 and r.json["tenant"] == "sa", r
    assert a.request("GET", "/v1/secrets/admin-made").status == 200
    # A token's tenant sees only its own secret events.
    ev = [json.loads(l) for l in a.request("GET", "/v1/events?type=secret.").raw.splitlines() if l.strip()]
    assert ev and all(e["tenant"] == "sa" for e in ev), ev
    for name, tok in (("shared", a), ("shared", b), ("b-only", b), ("admin-made", a)):
        assert tok.request("DELETE", f"/v1/secrets/{name}").status == 204
    assert_nowhere(daemon, [va, vb])


def test_ca(api, daemon, gw):
    ca_dir = os.path.join(daemon.state_dir, "ca")
    key, crt = os.path.join(ca_dir, "ca.key"), os.path.join(ca_dir, "ca.crt")
    assert stat.S_IMODE(os.stat(ca_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(daemon.state_dir, "secrets.key")).st_mode) == 0o600
    assert os.path.getsize(os.path.join(daemon.state_dir, "secrets.key")) == 32
    r = api.request("GET", "/v1/ca")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain"), r
    with open(crt, "rb") as f:
        assert r.raw == f.read()
    assert b"PRIVATE KEY" not in r.raw
    text = subprocess.run(["openssl", "x509", "-noout", "-text"], input=r.raw, capture_output=True,
                          check=True).stdout.decode()
    assert "CA:TRUE" in text and "Certificate Sign" in text and "Airlock sandbox CA" in text, text
    assert "prime256v1" in text or "P-256" in text, text
    p = subprocess.run([AIRLOCK, "--socket", daemon.socket, "ca"], capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == r.raw, p

    # The gateway got it first thing: "ca" (with the key) before any "add".
    msgs = gw.messages()
    assert msgs and msgs[0]["op"] == "ca", msgs[:3]
    with open(key, "rb") as f:
        assert msgs[0]["key_pem_sha256"] == sha(f.read())
    assert msgs[0]["cert_pem"].encode() == r.raw
    with open(daemon.log_path, "rb") as f:
        log = f.read()
    with open(key, "rb") as f:
        body = b"".join(l for l in f.read().splitlines() if not l.startswith(b"-----"))
    assert body[:40] not in log and body[:40] not in api.request("GET", "/v1/events").raw


def test_placeholders_lifecycle_and_what_the_gateway_gets(api, daemon, gw):
    v1, v2, v3 = new_value("one"), new_value("two"), new_value("rotated")
    s1 = set_secret(api, "one", v1, hosts=["api.example.com"], header="Authorization", format="Bearer {value}",
                    paths=["/v1/"], methods=["GET"]).json
    set_secret(api, "two", v2, hosts=["*.example.org"])
    answers = []

    # Refusals before anything boots: an unknown secret (named), a variable also in env.
    before = len(api.list(all=True))
    msg = check_error(api.create(secrets={"GOOD": "one", "BAD": "nope"}), 400, "invalid_argument")
    assert "secrets.BAD" in msg and '"nope"' in msg, msg
    check_error(api.create(secrets={"PLAIN": "one"}, env={"PLAIN": "x"}), 400, "invalid_argument")
    check_error(api.create(secrets={"1X": "one"}), 400, "invalid_argument")
    check_error(api.create(secrets=["one"]), 400, "invalid_argument")
    assert len(api.list(all=True)) == before

    grants = {"TOKEN_ONE": "one", "TOKEN_TWO": "two"}
    a = api.create_ok(secrets=grants, env={"PLAIN": "x"})
    b = api.create_ok(secrets=grants)
    answers += [json.dumps(a), json.dumps(b)]
    pa = {x["env"]: x["placeholder"] for x in a["secrets"]}
    pb = {x["env"]: x["placeholder"] for x in b["secrets"]}
    assert set(pa) == set(pb) == set(grants), a
    assert {x["env"]: x["secret"] for x in a["secrets"]} == grants
    every = list(pa.values()) + list(pb.values())
    assert all(PLACEHOLDER.match(p) for p in every), every
    assert len(set(every)) == 4, "placeholders must differ per sandbox and per secret"

    # The guest sees the placeholders, never the values; and trusts the CA.
    env_a = exec_env(api, a["id"])
    assert env_a["TOKEN_ONE"] == pa["TOKEN_ONE"] and env_a["TOKEN_TWO"] == pa["TOKEN_TWO"], env_a
    assert env_a["PLAIN"] == "x"
    assert exec_env(api, b["id"])["TOKEN_ONE"] == pb["TOKEN_ONE"]
    ca = api.request("GET", "/v1/ca").raw.decode()
    assert a["ca_bundle"] == "/etc/airlock/ca.pem", a  # minimal has no system bundle
    assert env_a["SSL_CERT_FILE"] == env_a["REQUESTS_CA_BUNDLE"] == env_a["CURL_CA_BUNDLE"] == "/etc/airlock/ca.pem"
    assert env_a["NODE_EXTRA_CA_CERTS"] == "/usr/local/share/ca-certificates/airlock.crt"
    assert guest_cat(api, a["id"], "/etc/airlock/ca.pem") == ca
    assert guest_cat(api, a["id"], "/usr/local/share/ca-certificates/airlock.crt") == ca
    # The installation is no process of the sandbox: the first exec is still p-1.
    assert api.request("GET", f"/v1/sandboxes/{b['id']}/processes").json["processes"][0]["id"] == "p-1"
    # An exec's own env wins over a placeholder.
    r = api.exec_ok(a["id"], ["sh", "-c", "echo $TOKEN_ONE"], env={"TOKEN_ONE": "mine"})
    assert r["stdout"] == "mine\n", r

    # The gateway got the bindings with the values (here: their digests).
    adds = gw.messages("add", a["id"])
    assert len(adds) == 1 and adds[0]["nfds"] == 3, adds
    got = {x["secret"]: x for x in adds[0]["bindings"]}
    assert set(got) == {"one", "two"}, got
    assert got["one"] == {"secret": "one", "placeholder": pa["TOKEN_ONE"], "value_sha256": sha(v1),
                          "hosts": ["api.example.com"], "paths": ["/v1/"], "methods": ["GET"],
                          "header": "Authorization", "format": "Bearer {value}", "headers": None}, got["one"]
    assert got["two"]["placeholder"] == pa["TOKEN_TWO"] and got["two"]["value_sha256"] == sha(v2)
    assert got["two"]["header"] is None and got["two"]["format"] is None and got["two"]["paths"] == []
    assert got["two"]["headers"] == ["Authorization"]  # placeholder mode's default (issue 17)
    assert {x["placeholder"] for x in gw.messages("add", b["id"])[0]["bindings"]} == set(pb.values())

    # Rotation: both sandboxes get the new value before the answer; the placeholders stay.
    n_before = len(gw.messages("secrets"))
    r = set_secret(api, "one", v3, hosts=["api.example.com"], header="Authorization", format="Bearer {value}",
                   status=(200,))
    assert r.json["id"] == s1["id"], r
    upd = gw.messages("secrets")[n_before:]
    assert sorted(m["sandbox"] for m in upd) == sorted([a["id"], b["id"]]), upd
    for m in upd:
        bs = {x["secret"]: x for x in m["bindings"]}
        assert bs["one"]["value_sha256"] == sha(v3) and bs["two"]["value_sha256"] == sha(v2), m
        assert bs["one"]["paths"] == [], m  # the new spec
    # A secret nobody uses: nothing is sent.
    set_secret(api, "unused", v1, hosts=["x.example"])
    assert len(gw.messages("secrets")) == n_before + 2

    # Pause and resume keep the bindings (same placeholders, nothing re-sent).
    assert api.request("POST", f"/v1/sandboxes/{a['id']}/pause").status == 200
    assert api.request("POST", f"/v1/sandboxes/{a['id']}/resume").status == 200
    assert {x["env"]: x["placeholder"] for x in api.get(a["id"]).json["secrets"]} == pa
    assert exec_env(api, a["id"])["TOKEN_TWO"] == pa["TOKEN_TWO"]

    # A process that holds the placeholder in memory, and a file on the disk that
    # holds it: the leak checks below must find those (and never a value).
    r = api.request("POST", f"/v1/sandboxes/{a['id']}/processes", body={"cmd": ["sleep", "3600"]})
    assert r.status == 201, r
    api.exec_ok(a["id"], ["sh", "-c", 'echo "$TOKEN_ONE" > /root/ph.txt && sync'])

    # Snapshot (keeps the bindings), then restores and forks: bindings only when granted.
    r = api.request("POST", f"/v1/sandboxes/{a['id']}/snapshots", body={"name": "with-secrets"})
    assert r.status == 201, r
    snap = r.json
    assert {x["env"]: x["placeholder"] for x in api.get(a["id"]).json["secrets"]} == pa
    plain = api.create_ok(snapshot=snap["id"])
    assert plain["secrets"] == [] and not gw.messages("add", plain["id"])[0].get("bindings"), plain
    env_plain = exec_env(api, plain["id"])
    assert "TOKEN_ONE" not in env_plain and "TOKEN_TWO" not in env_plain, env_plain
    assert env_plain["SSL_CERT_FILE"] == "/etc/airlock/ca.pem"
    granted = api.create_ok(snapshot=snap["id"], secrets={"ONLY": "two"})
    pg = granted["secrets"][0]["placeholder"]
    assert [x["env"] for x in granted["secrets"]] == ["ONLY"] and pg not in every, granted
    env_g = exec_env(api, granted["id"])
    assert env_g["ONLY"] == pg and "TOKEN_ONE" not in env_g, env_g
    assert [x["placeholder"] for x in gw.messages("add", granted["id"])[0]["bindings"]] == [pg]

    r = api.request("POST", f"/v1/sandboxes/{a['id']}/fork", body={})
    assert r.status == 201, r
    fork_plain = r.json["sandboxes"][0]
    assert fork_plain["secrets"] == [] and fork_plain["env"] == {"PLAIN": "x"}, fork_plain
    assert "TOKEN_ONE" not in exec_env(api, fork_plain["id"])
    check_error(api.request("POST", f"/v1/sandboxes/{a['id']}/fork", body={"secrets": {"X": "nope"}}), 400,
                "invalid_argument")
    check_error(api.request("POST", f"/v1/sandboxes/{a['id']}/fork", body={"secrets": {"X": "one"}, "n": 1}),
                400, "invalid_argument")
    r = api.request("POST", f"/v1/sandboxes/{a['id']}/fork", body={"count": 1, "secrets": {"TOKEN_ONE": "one"}})
    assert r.status == 201, r
    fork_g = r.json["sandboxes"][0]
    pf = fork_g["secrets"][0]["placeholder"]
    assert PLACEHOLDER.match(pf) and pf not in every + [pg], fork_g
    assert exec_env(api, fork_g["id"])["TOKEN_ONE"] == pf
    fb = gw.messages("add", fork_g["id"])[0]["bindings"]
    assert [(x["secret"], x["placeholder"], x["value_sha256"]) for x in fb] == [("one", pf, sha(v3))], fb

    # Delete: the binding is gone from every sandbox that used it, at once.
    n_before = len(gw.messages("secrets"))
    assert api.request("DELETE", "/v1/secrets/two").status == 204
    upd = gw.messages("secrets")[n_before:]
    assert sorted(m["sandbox"] for m in upd) == sorted([a["id"], b["id"], granted["id"]]), upd
    for m in upd:
        assert "two" not in [x["secret"] for x in m["bindings"]], m
    # Created again under the same name: a new secret, which old grants do not reach.
    n_before = len(gw.messages("secrets"))
    set_secret(api, "two", v2, hosts=["*.example.org"], status=(201,))
    for m in gw.messages("secrets")[n_before:]:
        assert "two" not in [x["secret"] for x in m["bindings"]], m

    # Never a value: not in the state dir (database, disks, the snapshot's memory
    # and disk), the log, the events, the answers. The search does find the
    # placeholder in the snapshot's memory and in the sandbox's disk.
    snapdir = os.path.join(daemon.state_dir, "snapshots", snap["id"])
    ph = pa["TOKEN_ONE"].encode()
    assert file_holds(os.path.join(snapdir, "memory.bin"), [ph]) == {ph}, "the search found no placeholder"
    assert file_holds(os.path.join(snapdir, "disk.qcow2"), [ph]) == {ph}, "the search found no placeholder"
    assert_nowhere(daemon, [v1, v2, v3], answers + [api.get(s["id"]).raw for s in (a, b, plain, granted)])
    for sid in (a["id"], b["id"], plain["id"], granted["id"], fork_plain["id"], fork_g["id"]):
        api.delete_ok(sid)
    assert api.request("DELETE", f"/v1/snapshots/{snap['id']}").status == 204
    for name in ("one", "two", "unused"):
        assert api.request("DELETE", f"/v1/secrets/{name}").status == 204


def test_gateway_and_daemon_restarts_hand_everything_over_again(api, daemon, gw):
    v = new_value("restart")
    set_secret(api, "restart", v, hosts=["api.example.com"])
    cli = [AIRLOCK, "--socket", daemon.socket]
    p = subprocess.run(cli + ["create", "--secret", "TOK=restart", "--json"], capture_output=True, timeout=300)
    assert p.returncode == 0, p
    sb = json.loads(p.stdout)
    ph = sb["secrets"][0]["placeholder"]
    old = gw.pids()
    assert len(old) == 1, old
    n = len(gw.messages())
    os.kill(old[0], signal.SIGKILL)
    wait_until(lambda: len(gw.pids()) == 1 and gw.pids() != old and
               any(m["op"] == "add" and m["sandbox"] == sb["id"] for m in gw.messages()[n:]), 60,
               "the restarted gateway to get the sandbox again")
    again = gw.messages()[n:]
    assert again[0]["op"] == "ca", again[:2]
    add = [m for m in again if m["op"] == "add" and m["sandbox"] == sb["id"]][0]
    assert [(x["placeholder"], x["value_sha256"]) for x in add["bindings"]] == [(ph, sha(v))], add
    # The sandbox keeps working, with the same placeholder.
    assert exec_env(api, sb["id"])["TOK"] == ph

    # A restart of the daemon: the re-attached sandbox keeps its binding and
    # the new gateway gets the CA, then the sandbox with its binding.
    n = len(gw.messages())
    assert daemon.stop() == 0
    daemon.start()
    wait_until(lambda: any(m["op"] == "add" and m["sandbox"] == sb["id"] for m in gw.messages()[n:]), 60,
               "the re-attached sandbox to reach the new gateway")
    again = gw.messages()[n:]
    assert again[0]["op"] == "ca", again[:2]
    add = [m for m in again if m["op"] == "add" and m["sandbox"] == sb["id"]][0]
    assert [(x["placeholder"], x["value_sha256"]) for x in add["bindings"]] == [(ph, sha(v))], add
    assert api.get(sb["id"]).json["secrets"][0]["placeholder"] == ph
    assert exec_env(api, sb["id"])["TOK"] == ph
    p = subprocess.run(cli + ["rm", sb["id"]], capture_output=True, timeout=300)
    assert p.returncode == 0, p
    assert api.request("DELETE", "/v1/secrets/restart").status == 204
    assert_nowhere(daemon, [v])


def test_with_the_real_gateway(tmp_path):
    """End to end with airlock-egress itself: it takes the CA and the
    bindings, and neither it nor the daemon writes a value anywhere."""
    d = Daemon(tmp_path).start()
    try:
        v = new_value("real")
        set_secret(d.api, "real", v, hosts=["api.example.com"], header="Authorization", format="Bearer {value}")
        sb = d.api.create_ok(secrets={"REAL_TOKEN": "real"})
        ph = sb["secrets"][0]["placeholder"]
        assert exec_env(d.api, sb["id"])["REAL_TOKEN"] == ph
        assert guest_cat(d.api, sb["id"], "/etc/airlock/ca.pem") == d.api.request("GET", "/v1/ca").raw.decode()
        v2 = new_value("real2")
        set_secret(d.api, "real", v2, hosts=["api.example.com"], status=(200,))
        assert d.api.request("DELETE", "/v1/secrets/real").status == 204
        assert d.api.get(sb["id"]).json["state"] == "running"
        d.api.delete_ok(sb["id"])
        assert_nowhere(d, [v, v2])
    finally:
        leftovers = d.cleanup()
    assert not leftovers, leftovers
