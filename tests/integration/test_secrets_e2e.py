# SPDX-License-Identifier: Apache-2.0
"""Secrets brokered by the egress gateway, from inside a real VM (issue 6).

The daemon runs in the fake internet's host namespace (fakenet.py); the
gateway trusts the fake internet's test CA upstream (--egress-ca), and the
guest trusts the Airlock CA (installed by airlockd) plus, for the hosts that
are not intercepted, the test CA. What reached a server is read from the
fake internet's request log, never from the guest (a server that echoed a
credential back would hand it to the guest itself).
"""
import glob
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile

import pytest

import fakenet as fn
from conftest import Daemon, stdout_bytes
from fakenet import fakenet  # noqa: F401  (the session fixture)

VALUE_TOK = "tok-" + secrets.token_hex(16)  # placeholder mode
VALUE_API = "api-" + secrets.token_hex(16)  # header mode
CURL = "curl -sS --max-time 20 --cacert /tmp/all.pem -o /dev/null -w '%{http_code}'"


@pytest.fixture(scope="module")
def world(fakenet, tmp_path_factory):
    # airlock-egress runs as its own uid: the CA it trusts must be readable by it.
    cadir = tempfile.mkdtemp(prefix="airlock-testca-")
    os.chmod(cadir, 0o755)
    ca = os.path.join(cadir, "ca.pem")
    shutil.copy(fakenet.ca_cert, ca)
    os.chmod(ca, 0o644)
    d = Daemon(tmp_path_factory.mktemp("airlockd-secrets"), netns=fakenet.host_ns,
               extra_args=["--resolver", fakenet.resolver, "--egress-ca", ca,
                           "--egress-public-cidr", "192.0.2.0/24", "--egress-public-cidr", "203.0.113.0/24"]).start()
    api = d.api
    r = api.request("POST", "/v1/secrets", body={"name": "tok", "value": VALUE_TOK, "hosts": [fn.WWW_ALLOWED],
                                                 "paths": ["/v1/"], "headers": ["X-Key"]})
    assert r.status == 201, r
    r = api.request("POST", "/v1/secrets", body={"name": "api", "value": VALUE_API, "hosts": [fn.API_ALLOWED],
                                                 "header": "Authorization", "format": "Bearer {value}",
                                                 "methods": ["GET", "POST"]})
    assert r.status == 201, r
    sb = api.create_ok(template="base", vcpus=1, memory_mib=512,
                       network={"allow": [fn.WWW_ALLOWED, fn.API_ALLOWED, fn.WWW_OTHER]},
                       secrets={"TOK": "tok", "API": "api"})
    sid = sb["id"]
    r = api.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/testca.pem", raw=fakenet.ca_pem.encode())
    assert r.status in (200, 201, 204), r
    code, out = sh(api, sid, 'cat "$SSL_CERT_FILE" /tmp/testca.pem > /tmp/all.pem && echo "$TOK $API"')
    assert code == 0, out
    tok, api_ph = out.split()
    yield {"daemon": d, "api": api, "sid": sid, "tok": tok, "api_ph": api_ph, "cadir": cadir}
    api.delete(sid)
    d.cleanup()
    shutil.rmtree(cadir, ignore_errors=True)


def sh(api, sid, script, timeout=60):
    r = api.exec_ok(sid, ["sh", "-c", script], timeout_s=timeout)
    return r["exit_code"], stdout_bytes(r).decode(errors="replace")


def curl(w, args):
    code, out = sh(w["api"], w["sid"], f"{CURL} {args}; echo ' rc='$?")
    m = re.match(r"^(\d{3}) rc=(\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def last_request(fakenet, host, path_prefix="/"):
    reqs = [r for r in fakenet.http_requests() if (r.get("host") or "").split(":")[0] == host
            and r["path"].startswith(path_prefix)]
    assert reqs, (host, fakenet.http_requests())
    return reqs[-1]


def header(req, name):
    for k, v in req["headers"]:
        if k.lower() == name.lower():
            return v
    return None


def test_guest_sees_placeholders_only(world):
    assert re.fullmatch(r"airlock-ph-[0-9a-f]{64}", world["tok"])
    assert re.fullmatch(r"airlock-ph-[0-9a-f]{64}", world["api_ph"])
    code, out = sh(world["api"], world["sid"], "env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert VALUE_TOK not in out and VALUE_API not in out


def test_placeholder_to_the_bound_host_arrives_as_the_value(world, fakenet):
    fakenet.clear_logs()
    status, rc = curl(world, f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/items")
    assert rc == 0 and status == 404  # the test server has no /v1/items; it logged the request
    assert header(last_request(fakenet, fn.WWW_ALLOWED, "/v1/"), "X-Key") == VALUE_TOK


def test_header_mode_replaces_what_the_client_sent(world, fakenet):
    fakenet.clear_logs()
    status, rc = curl(world, f"-H 'Authorization: Basic Zm9vOmJhcg==' https://{fn.API_ALLOWED}/anything")
    assert rc == 0
    req = last_request(fakenet, fn.API_ALLOWED)
    assert [v for k, v in req["headers"] if k.lower() == "authorization"] == [f"Bearer {VALUE_API}"]


def test_placeholder_to_another_allowed_host_arrives_as_the_placeholder(world, fakenet):
    fakenet.clear_logs()
    status, rc = curl(world, f"-H \"X-Key: $TOK\" -H \"Authorization: Bearer $API\" https://{fn.WWW_OTHER}/v1/x")
    assert rc == 0
    req = last_request(fakenet, fn.WWW_OTHER)
    assert header(req, "X-Key") == world["tok"]
    assert header(req, "Authorization") == f"Bearer {world['api_ph']}"


def test_sni_bound_but_host_other_is_refused(world, fakenet):
    fakenet.clear_logs()
    status, rc = curl(world, f"-H 'Host: {fn.WWW_OTHER}' -H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/x")
    assert status == 421
    assert not fakenet.http_requests()


def test_plain_http_to_the_bound_host_is_never_substituted(world, fakenet):
    fakenet.clear_logs()
    status, rc = curl(world, f"-H \"X-Key: $TOK\" http://{fn.WWW_ALLOWED}/v1/plain")
    assert rc == 0
    assert header(last_request(fakenet, fn.WWW_ALLOWED, "/v1/"), "X-Key") == world["tok"]


def test_a_redirect_to_another_host_carries_no_secret(world, fakenet):
    fakenet.clear_logs()
    target = f"https://{fn.WWW_OTHER}/landed"
    # --location-trusted: curl even re-sends Authorization to the new host.
    status, rc = curl(world, f"-L --location-trusted -H \"Authorization: Bearer $API\" "
                             f"'https://{fn.API_ALLOWED}/redirect?to={target}'")
    assert rc == 0
    first = last_request(fakenet, fn.API_ALLOWED, "/redirect")
    assert header(first, "Authorization") == f"Bearer {VALUE_API}"
    second = last_request(fakenet, fn.WWW_OTHER, "/landed")
    assert header(second, "Authorization") == f"Bearer {world['api_ph']}"


def test_path_and_method_rules(world, fakenet):
    fakenet.clear_logs()
    curl(world, f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/admin/x")
    assert header(last_request(fakenet, fn.WWW_ALLOWED, "/admin/"), "X-Key") == world["tok"]
    curl(world, f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/../admin/x --path-as-is")
    assert not [r for r in fakenet.http_requests() if VALUE_TOK in json.dumps(r) and "admin" in r["path"]]
    fakenet.clear_logs()
    curl(world, f"-X DELETE https://{fn.API_ALLOWED}/items/1")  # api allows GET and POST only
    req = last_request(fakenet, fn.API_ALLOWED, "/items/")
    assert VALUE_API not in json.dumps(req)


def test_inspect_mode_refuses_domain_fronting(world, fakenet):
    api, sid = world["api"], world["sid"]
    r = api.request("PUT", f"/v1/sandboxes/{sid}/network",
                    body={"allow": [fn.WWW_ALLOWED], "tls": "inspect"})
    assert r.status == 200, r
    try:
        fakenet.clear_logs()
        # The same server also hosts sub.example.test, which is not allowed.
        status, rc = curl(world, f"-H 'Host: sub.example.test' https://{fn.WWW_ALLOWED}/")
        assert status in (421, 403), status
        assert not fakenet.http_requests()
        status, rc = curl(world, f"https://{fn.WWW_ALLOWED}/")
        assert status == 200  # inspected, allowed, served
    finally:
        api.request("PUT", f"/v1/sandboxes/{sid}/network",
                    body={"allow": [fn.WWW_ALLOWED, fn.API_ALLOWED, fn.WWW_OTHER]})


def test_the_value_is_nowhere_but_the_encrypted_store(world, fakenet):
    d, api, sid = world["daemon"], world["api"], world["sid"]
    # Substitutions have happened; now look everywhere the host keeps things.
    curl(world, f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/again")
    r = api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "grep-me"})
    assert r.status in (200, 201), r
    listed = json.dumps(api.request("GET", "/v1/secrets").json) + json.dumps(api.get(sid).json)
    assert VALUE_TOK not in listed and VALUE_API not in listed
    hits = []
    needles = [VALUE_TOK.encode(), VALUE_API.encode()]
    roots = [d.state_dir, os.path.dirname(d.log_path)]
    for root in roots:
        for path in glob.glob(os.path.join(root, "**"), recursive=True):
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            with open(path, "rb") as f:
                while True:
                    chunk = f.read(1 << 24)
                    if not chunk:
                        break
                    if any(n in chunk for n in needles):
                        hits.append(path)
                        break
    assert hits == [], hits
    # The events say which secret was used, never what it is.
    r = api.request("GET", f"/v1/events?sandbox={sid}&type=network.secret")
    assert r.status == 200
    assert b'"substituted"' in r.raw and VALUE_TOK.encode() not in r.raw
