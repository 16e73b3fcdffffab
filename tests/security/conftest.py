# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the security suite (issue 7, item 4).

One airlockd for the whole session, inside the fake internet's host
namespace (tests/integration/fakenet.py), with the egress gateway, secrets,
a TCP listener with bearer tokens and the port proxy. Shared VMs: `attacker`
(base: curl, dig, python3, ip; two secrets bound) and `peer` (minimal,
another tenant, serving on 8080); the modules that destroy a guest boot
their own.

Every attack is an `attempt()` (secutil.py). At the end the suite prints
`N attempts, N contained` from pytest_terminal_summary, which pytest runs
before its own summary line: pytest's summary stays the last line of
`make test`.
"""
import os
import secrets
import shutil
import tempfile

import pytest

import secutil as su
from secutil import fn
from fakenet import fakenet  # noqa: F401  (the session fixture)

# pytest names every conftest.py outside a package `conftest`, and loads the
# conftests of all its arguments before it imports a test module: with
# `pytest tests/integration tests/security`, `from conftest import Daemon` in
# an integration module (or apiutil.py) would find this file. So it also
# offers what tests/integration/conftest.py offers (its helpers, not its
# fixtures or hooks, which stay in their own directory).
globals().update({k: v for k, v in vars(su.itc).items()
                  if not k.startswith(("__", "pytest_")) and k not in globals()
                  and not hasattr(v, "_pytestfixturefunction") and not hasattr(v, "_fixture_function_marker")})

VALUE_TOK = "tok-" + secrets.token_hex(20)   # placeholder mode, www.allowed.test, paths /v1/
VALUE_API = "api-" + secrets.token_hex(20)   # header mode, api.allowed.test, GET and POST
VALUE_VICTIM = "vic-" + secrets.token_hex(20)  # tenant victim's secret
ATTACKER_ALLOW = [fn.WWW_ALLOWED]
PROXY_DOMAIN = "sandboxes.test"
TEMPLATE_UPLOAD_MIB = 64  # --max-template-upload-mib (test_sec_templates.py)  # the proxy's host form: <port>-<sandbox id>.sandboxes.test


# ----------------------------------------------------------------- hooks

@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(autouse=True)
def _current_item(request):
    su.CURRENT["item"] = request.node
    yield
    su.CURRENT["item"] = None


def _full_run(session):
    """True when every security module was collected and nothing deselected."""
    files = {f for f in os.listdir(su.HERE) if f.startswith("test_sec_") and f.endswith(".py")}
    seen = {os.path.basename(str(i.path)) for i in session.items if str(i.path).startswith(su.HERE)}
    opt = session.config.option
    return files and files <= seen and not opt.keyword and not opt.markexpr and \
        not getattr(session, "_sec_deselected", 0)


def pytest_deselected(items):
    for i in items:
        if str(i.path).startswith(su.HERE):
            i.session._sec_deselected = getattr(i.session, "_sec_deselected", 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not su.RESULTS:
        return
    tr = terminalreporter
    tr.write_sep("=", "airlock security suite")
    for cat, title in su.CATEGORIES.items():
        rs = [r for r in su.RESULTS if r["cat"] == cat]
        if not rs:
            continue
        c = [r for r in rs if r["outcome"] in ("contained", "escaped")]
        ok = sum(r["outcome"] == "contained" for r in c)
        other = [r for r in rs if r not in c]
        reasons = sorted({r["reason"] for r in other if not r["reason"].startswith("BUG")})
        extra = f" (+{len(other)} not counted, xfail: {'; '.join(reasons) or 'see below'})" if other else ""
        tr.write_line(f"{title}: {len(c)} attempts, {ok} contained{extra}")
    for r in su.RESULTS:
        if r["outcome"] == "escaped":
            tr.write_line(f"ESCAPED {r['cat']}/{r['name']}: {r['what']} ({r['test']}): {r.get('error', '')}",
                          red=True)
        elif r["outcome"] == "known" and r["reason"].startswith("BUG"):
            tr.write_line(f"NOT CONTAINED, known bug (xfail): {r['cat']}/{r['name']}: {r['what']}", yellow=True)
        elif r["outcome"] == "xpassed":
            tr.write_line(f"xfail attempt now contained, remove the mark: {r['cat']}/{r['name']}", yellow=True)
    c = su.counted()
    ok = sum(r["outcome"] == "contained" for r in c)
    if getattr(config, "_sec_too_few", False):
        tr.write_line(f"FAILED: fewer than {su.MIN_ATTEMPTS} contained attempts in a full run", red=True)
    tr.write_line(f"{len(c)} attempts, {ok} contained", bold=True, green=ok == len(c), red=ok != len(c))


def pytest_sessionfinish(session, exitstatus):
    if not su.RESULTS:
        return
    c = su.counted()
    ok = sum(r["outcome"] == "contained" for r in c)
    if _full_run(session) and ok < su.MIN_ATTEMPTS:
        session.config._sec_too_few = True
        session.exitstatus = 1
    out = os.environ.get("AIRLOCK_SECURITY_LIST")
    if out:
        write_listing(out)


def write_listing(path):
    """The attempts of this run as Markdown (for tests/security/README.md)."""
    lines = []
    for cat, title in su.CATEGORIES.items():
        rs = [r for r in su.RESULTS if r["cat"] == cat]
        if not rs:
            continue
        n = sum(not r["xfail"] for r in rs)
        lines.append(f"### {title} ({n} attempts" + (f"; {len(rs) - n} more not counted: xfail" if n != len(rs) else "")
                     + ")\n")
        for r in rs:
            test = (r["test"] or "").split("::")[-1]
            mod = os.path.basename((r["test"] or "").split("::")[0])
            mark = " *(xfail)*" if r["xfail"] else ""
            lines.append(f"- `{r['name']}`{mark}: {r['what']} ({mod}::{test})")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


# ----------------------------------------------------------------- the daemon

def _free_port_in(net):
    s = net.host_socket()
    s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="session")
def secd(fakenet, tmp_path_factory):  # noqa: F811
    # airlock-egress runs as its own uid: the CA it trusts must be readable by it.
    cadir = tempfile.mkdtemp(prefix="airlock-sec-ca-")
    os.chmod(cadir, 0o755)
    ca = os.path.join(cadir, "ca.pem")
    shutil.copy(fakenet.ca_cert, ca)
    os.chmod(ca, 0o644)
    port = _free_port_in(fakenet)
    proxy_port = _free_port_in(fakenet)
    while proxy_port == port:
        proxy_port = _free_port_in(fakenet)
    d = su.Daemon(tmp_path_factory.mktemp("airlockd-sec"), netns=fakenet.host_ns,
                  extra_args=["--resolver", fakenet.resolver, "--egress-ca", ca,
                              "--egress-public-cidr", "192.0.2.0/24", "--egress-public-cidr", "203.0.113.0/24",
                              "--listen", f"0.0.0.0:{port}",
                              # The port proxy (test_sec_ports.py): clients reach it by IP from this
                              # namespace and name the sandbox in the path or in an explicit Host;
                              # a domain without a port matches whatever port they dialled.
                              "--proxy-listen", f"0.0.0.0:{proxy_port}", "--proxy-domain", PROXY_DOMAIN,
                              # The peer's listener (nc) never answers: a relay to it that nobody
                              # hangs up ends within this.
                              "--proxy-idle-timeout-s", "15",
                              # test_sec_templates.py: an upload over it is 413.
                              "--max-template-upload-mib", str(TEMPLATE_UPLOAD_MIB)])
    d.port = port
    d.proxy_port, d.proxy_domain = proxy_port, PROXY_DOMAIN
    d.template_upload_mib = TEMPLATE_UPLOAD_MIB
    d.start()
    yield d
    leftovers = d.cleanup()
    shutil.rmtree(cadir, ignore_errors=True)
    assert not leftovers, f"QEMU processes left after the suite: {leftovers}"


@pytest.fixture
def api(secd, request):
    yield secd.api
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n---- airlockd log ----\n{secd.log(80)}")
        egress = os.path.join(secd.state_dir, "egress.log")
        if os.path.exists(egress):
            with open(egress, errors="replace") as f:
                print("---- egress log ----\n" + "\n".join(f.read().splitlines()[-40:]))


@pytest.fixture(scope="session")
def watch(fakenet, secd):  # noqa: F811
    sniffer = su.Sniffer(fakenet)
    canary = su.Canary(fakenet)
    yield su.Watch(fakenet, sniffer, canary)
    sniffer.stop()
    canary.stop()


@pytest.fixture(scope="session")
def world(secd):
    """Secrets and tokens: tenant default has `tok` and `api`; tenant victim
    has `vsecret`; bearer tokens for tenants mallory (the attacker over TCP)
    and victim."""
    a = secd.api
    for body in ({"name": "tok", "value": VALUE_TOK, "hosts": [fn.WWW_ALLOWED], "paths": ["/v1/"],
                  "headers": ["X-Key"]},
                 {"name": "api", "value": VALUE_API, "hosts": [fn.API_ALLOWED], "header": "Authorization",
                  "format": "Bearer {value}", "methods": ["GET", "POST"]},
                 {"name": "vsecret", "value": VALUE_VICTIM, "hosts": [fn.WWW_ALLOWED], "tenant": "victim"}):
        r = a.request("POST", "/v1/secrets", body=body)
        assert r.status == 201, r
    tokens = {}
    for tenant in ("mallory", "victim"):
        r = a.request("POST", "/v1/tokens", body={"tenant": tenant, "description": "security suite"})
        assert r.status == 201, r
        tokens[tenant] = r.json
    return {"tokens": tokens, "values": {"tok": VALUE_TOK, "api": VALUE_API, "vsecret": VALUE_VICTIM}}


@pytest.fixture(scope="session")
def tcp(secd, fakenet, world):  # noqa: F811
    """TCP API clients: tcp["mallory"], tcp["victim"], tcp[None] (no token)."""
    base = su.TcpApi(fakenet, secd.port)
    return {None: base, **{t: base.with_token(world["tokens"][t]["token"]) for t in ("mallory", "victim")}}


@pytest.fixture(scope="session")
def attacker(secd, fakenet, world):  # noqa: F811
    """The shared `base` sandbox every in-guest network attack runs from
    (tenant default; TOK and API bound to the two secrets)."""
    api = secd.api
    sb = api.create_ok(template="base", vcpus=1, memory_mib=384, network={"allow": ATTACKER_ALLOW},
                       secrets={"TOK": "tok", "API": "api"})
    sid = sb["id"]
    su.put_file(api, sid, "/tmp/ca.pem", fakenet.ca_pem)
    su.put_file(api, sid, "/tmp/probe.py", su.GUEST_PROBE)
    su.put_file(api, sid, "/tmp/raw.py", su.GUEST_RAW)
    out = su.sh_ok(api, sid, 'cat "$SSL_CERT_FILE" /tmp/ca.pem > /tmp/all.pem && echo "$TOK $API"')
    tok, api_ph = out.split()
    yield {"id": sid, "tok": tok, "api": api_ph}
    api.delete(sid)


PEER_LISTENER = "while true; do nc -l -p 8080 >> /tmp/got 2>&1; done"


@pytest.fixture(scope="session")
def peer(secd):
    """A `minimal` sandbox of another tenant (victim), listening on 8080
    (what reaches it is appended to /tmp/got), with a background process."""
    api = secd.api
    sb = api.create_ok(template="minimal", vcpus=1, memory_mib=256, tenant="victim")
    sid = sb["id"]
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes",
                    body={"cmd": ["sh", "-c", PEER_LISTENER], "tag": "listener"})
    assert r.status == 201, r
    yield {"id": sid, "process": r.json["id"]}
    api.delete(sid)

