# SPDX-License-Identifier: Apache-2.0
"""Template builds (issue 23): POST /v1/templates with a Dockerfile and its
context, the NDJSON progress it answers with, the layer cache, tenants'
templates, deletes, bad input, --snapshot, disk_mib, the build's sandbox,
and what a sandbox of a built template sees (its ENV, WORKDIR, USER).

One daemon listening on loopback TCP (tenant tokens) for the module; the
network case runs in the fake internet (fakenet.py) on a daemon of its own.
Every build is FROM `minimal`; contexts are tars made in memory."""
import gzip
import io
import json
import os
import socket
import tarfile
import time
import urllib.parse

import pytest

import fakenet as fn
from apiutil import ListeningDaemon, Stream, TcpApi, free_port
from conftest import IMAGES, _report_on_failure, stdout_bytes, wait_for
from fakenet import fakenet  # noqa: F401  (the session fixture)
from test_network import netd  # noqa: F401  (a daemon in the fake internet)

MINIMAL_MIB = (os.path.getsize(os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4")) + (1 << 20) - 1) >> 20
BUILD_META = "airlock.build"


# ----------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def ld(tmp_path_factory):
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-tpl"), free_port()).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def admin(ld, request):
    yield ld.api
    _report_on_failure(request, ld)


@pytest.fixture(scope="module")
def tenants(ld):
    out = {}
    for tenant in ("a", "b"):
        r = ld.api.request("POST", "/v1/tokens", body={"tenant": tenant, "description": f"templates {tenant}"})
        assert r.status == 201, r
        out[tenant] = TcpApi(ld.port, r.json["token"])
    return out


# ----------------------------------------------------------------- helpers

def context_tar(files):
    """A tar of files: {path: bytes | str | (bytes, mode) | None (a directory)}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, content in files.items():
            info = tarfile.TarInfo(path)
            info.mtime = 1700000000
            info.uid = info.gid = 4321  # a COPY without --chown gives root's, whatever the tar says
            if content is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            mode = 0o644
            if isinstance(content, tuple):
                content, mode = content
            if isinstance(content, str):
                content = content.encode()
            info.size = len(content)
            info.mode = mode
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


class Build:
    """The answer to a build: the HTTP status, its NDJSON lines (or the
    error body of a refusal before streaming), how long it took."""

    def __init__(self, r, seconds):
        self.status = r.status
        self.response = r
        self.seconds = seconds
        self.lines = []
        if r.status == 200:
            assert r.headers.get("Content-Type", "").startswith("application/x-ndjson"), r
            self.lines = [json.loads(l) for l in r.raw.splitlines() if l.strip()]

    @property
    def last(self):
        return self.lines[-1] if self.lines else None

    @property
    def ok(self):
        return self.status == 200 and self.last and self.last["type"] == "done"

    @property
    def template(self):
        assert self.ok, self
        return self.last["template"]

    @property
    def error(self):
        """The error line's (or the refusal's) {code, message}."""
        if self.status != 200:
            return self.response.json["error"]
        assert self.last and self.last["type"] == "error", self
        return self.last["error"]

    def steps(self):
        return [l for l in self.lines if l["type"] == "step"]

    def output(self, stream):
        return "".join(l["data"] for l in self.lines if l["type"] == "output" and l["stream"] == stream)

    def __repr__(self):
        body = self.lines[-12:] if self.status == 200 else self.response
        return f"<build {self.status} in {self.seconds:.1f} s: {body}>"


def build_path(name=None, **params):
    q = []
    if name is not None:
        q.append(("name", name))
    for k, v in params.items():
        for one in (v if isinstance(v, list) else [v]):
            q.append((k, one if isinstance(one, str) else json.dumps(one) if isinstance(one, dict) else str(one)))
    return "/v1/templates" + ("?" + urllib.parse.urlencode(q) if q else "")


def build(api, name, text=None, files=None, raw=None, **params):
    """POST /v1/templates; the Dockerfile's text and files make the context
    (else raw is the body); params are the query's."""
    if raw is None:
        ctx = dict(files or {})
        if text is not None:
            ctx["Dockerfile"] = text
        raw = context_tar(ctx)
    t0 = time.monotonic()
    r = api.request("POST", build_path(name, **params), raw=raw, headers={"Content-Type": "application/x-tar"})
    return Build(r, time.monotonic() - t0)


def build_ok(api, name, text, files=None, **params):
    b = build(api, name, text, files, **params)
    assert b.ok, b
    return b


def build_sandboxes(admin):
    return [s for s in admin.list() if BUILD_META in (s.get("metadata") or {})]


def assert_no_build_sandbox(admin):
    """The build's sandbox is deleted once its answer has ended (the job
    deletes it before the last line; allow it a moment all the same)."""
    wait_for(lambda: not build_sandboxes(admin), 15, "the build's sandbox to be deleted")


def staging_dirs(d):
    tdir = os.path.join(d.state_dir, "templates")
    return [n for n in os.listdir(tdir) if n.startswith(".staging-") or n.startswith(".trash-")]


def names(api):
    r = api.request("GET", "/v1/templates")
    assert r.status == 200, r
    return [t["name"] for t in r.json["templates"]]


def sh(api, sid, script, **fields):
    r = api.exec_ok(sid, ["sh", "-c", script], **fields)
    return r["exit_code"], stdout_bytes(r).decode(errors="replace"), r["stderr"]


def check_error(r, status, words=()):
    assert r.status == status, r
    msg = r.json["error"]["message"]
    for w in words:
        assert w in msg, (w, r)


# ----------------------------------------------------------------- 1. a build and its sandbox

APP_DOCKERFILE = """\
FROM minimal
ARG GREETING=hi
ENV APP_MODE=test GREETING_SEEN=$GREETING
WORKDIR /opt/app
COPY hello.txt ./
COPY --chown=1000:1000 data/ /home/user/data/
COPY --chown=user:user hello.txt /home/user/named.txt
RUN echo "$GREETING from build" > built.txt && chmod 640 built.txt
USER user
RUN id -u > /home/user/whoami && touch /home/user/by-user
CMD ["sh", "-c", "echo started"]
"""


def app_files(version="one"):
    return {"hello.txt": "hello file\n",
            "data": None,
            "data/tool.sh": ("#!/bin/sh\necho tool\n", 0o755),
            "data/sub": None,
            "data/sub/version.txt": f"{version}\n"}


# Steps as the build numbers them: FROM is 1.
APP_DISK_STEPS = {5: "COPY hello.txt ./", 6: "COPY --chown=1000:1000 data/ /home/user/data/",
                  7: "COPY --chown=user:user", 8: "RUN", 10: "RUN"}


def test_build_and_its_sandbox(ld, admin):
    b = build_ok(admin, "app", APP_DOCKERFILE, app_files(), build_arg="GREETING=hello")
    assert_no_build_sandbox(admin)
    steps = b.steps()
    assert [s["step"] for s in steps] == list(range(1, 12)) and all(s["steps"] == 11 for s in steps), steps
    assert steps[0]["instruction"] == "FROM minimal", steps
    for s in steps[1:]:
        assert s["cached"] is False, s  # a first build: nothing cached
    for n, text in APP_DISK_STEPS.items():
        assert steps[n - 1]["instruction"].startswith(text), steps

    t = b.template
    assert t["name"] == "app" and t["tenant"] is None and t["source"] == "dockerfile", t
    assert t["parent"] == "minimal", t
    r = admin.request("GET", "/v1/templates/app")
    assert r.status == 200, r
    got = r.json
    assert got["tenant"] is None and got["parent"] == "minimal" and got["source"] == "dockerfile", got
    assert got["in_use"] == {"sandboxes": 0, "snapshots": 0, "pools": 0}, got
    assert got["size_mib"] >= MINIMAL_MIB, got
    cfg = got["config"]
    assert "APP_MODE=test" in cfg["env"] and "GREETING_SEEN=hello" in cfg["env"], cfg
    assert not [e for e in cfg["env"] if e.startswith("GREETING=")], cfg  # an ARG is not kept
    assert cfg["workdir"] == "/opt/app" and cfg["user"] == "user", cfg
    assert cfg["uid"] == 1000 and cfg["gid"] == 1000, cfg
    assert cfg["cmd"] == ["sh", "-c", "echo started"], cfg
    assert [s["instruction"] for s in got["steps"]] == [s["instruction"] for s in steps[1:]], got
    assert "app" in names(admin)

    sb = admin.create_ok(template="app")
    try:
        sid = sb["id"]
        assert sb["template"] == "app", sb
        code, out, err = sh(admin, sid, "pwd; id -u; id -g; echo \"$APP_MODE $GREETING_SEEN\"")
        assert code == 0 and out.split("\n")[:4] == ["/opt/app", "1000", "1000", "test hello"], (out, err)
        code, out, err = sh(admin, sid, "cat hello.txt built.txt /home/user/whoami; "
                                        "stat -c '%n %u:%g %a' hello.txt built.txt /home/user/data "
                                        "/home/user/data/sub "
                                        "/home/user/data/tool.sh /home/user/data/sub/version.txt "
                                        "/home/user/by-user /home/user/named.txt; /home/user/data/tool.sh",
                               uid=0, gid=0)
        assert code == 0 and not err, (out, err)
        lines = out.splitlines()
        assert lines[:3] == ["hello file", "hello from build", "1000"], out
        stats = dict(l.split(" ", 1) for l in lines[3:11])
        assert stats["hello.txt"] == "0:0 644", stats
        assert stats["built.txt"] == "0:0 640", stats
        # The directory copied into and the copy's directories are the --chown
        # owner's, as in Docker; /home/user above it stays as it was.
        assert stats["/home/user/data"] == "1000:1000 755", stats
        assert stats["/home/user/data/sub"] == "1000:1000 755", stats
        assert stats["/home/user/data/tool.sh"] == "1000:1000 755", stats
        assert stats["/home/user/data/sub/version.txt"] == "1000:1000 644", stats
        assert stats["/home/user/by-user"].startswith("1000:1000 "), stats
        assert stats["/home/user/named.txt"] == "1000:1000 644", stats  # names, through the image
        assert lines[11] == "tool", out
        # The exec's own cwd, uid and env win over the template's.
        r = admin.exec_ok(sid, ["sh", "-c", "pwd; id -u; echo $APP_MODE"], cwd="/tmp", uid=0, gid=0,
                          env={"APP_MODE": "mine"})
        assert r["exit_code"] == 0 and stdout_bytes(r).decode().split("\n")[:3] == ["/tmp", "0", "mine"], r
        r = admin.request("GET", "/v1/templates/app")
        assert r.json["in_use"]["sandboxes"] == 1, r
    finally:
        admin.delete_ok(sb["id"])


# ----------------------------------------------------------------- 2. the layer cache

def test_rebuild_uses_the_cache(ld, admin):
    build_ok(admin, "app", APP_DOCKERFILE, app_files(), build_arg="GREETING=hello")  # as the first test did
    b = build_ok(admin, "app", APP_DOCKERFILE, app_files(), build_arg="GREETING=hello")
    steps = b.steps()
    for n in APP_DISK_STEPS:
        assert steps[n - 1]["cached"] is True, steps
    assert not [l for l in b.lines if l["type"] == "progress" and l["phase"] == "boot"], b.lines
    assert b.seconds < 5, b  # no sandbox booted: the cache's links and files only
    assert_no_build_sandbox(admin)
    # The cache's layers are no templates a client sees or deletes.
    layer = a_cache_layer(ld)
    assert layer.startswith("airlock-build-") and layer not in names(admin)
    assert admin.request("GET", f"/v1/templates/{layer}").status == 404
    assert admin.request("DELETE", f"/v1/templates/{layer}").status == 404
    check_error(admin.request("POST", "/v1/sandboxes", body={"template": layer}), 400, ["airlock-build-"])
    assert os.path.isdir(os.path.join(ld.state_dir, "templates", layer))

    # Another build argument: the RUN that uses it runs again (and what follows).
    # One changed file of the second COPY: that step and the later disk steps run again.
    b = build_ok(admin, "app", APP_DOCKERFILE, app_files("two"), build_arg="GREETING=hello")
    steps = b.steps()
    assert steps[4]["cached"] is True, steps   # COPY hello.txt: unchanged
    for n in (6, 7, 8, 10):
        assert steps[n - 1]["cached"] is False, steps
    assert_no_build_sandbox(admin)
    # A sandbox sees the new build, not the template snapshot of the old one.
    sb = admin.create_ok(template="app")
    try:
        code, out, _ = sh(admin, sb["id"], "cat /home/user/data/sub/version.txt hello.txt")
        assert code == 0 and out == "two\nhello file\n", out
    finally:
        admin.delete_ok(sb["id"])

    b = build_ok(admin, "app", APP_DOCKERFILE, app_files("two"), build_arg="GREETING=hello", no_cache=1)
    for n in APP_DISK_STEPS:
        assert b.steps()[n - 1]["cached"] is False, b.steps()
    assert_no_build_sandbox(admin)


# ----------------------------------------------------------------- 3, 4. a failing RUN; output

def test_run_output_is_streamed(ld, admin):
    b = build_ok(admin, "talker", "FROM minimal\nRUN echo to-stdout; echo to-stderr >&2\n")
    assert "to-stdout\n" in b.output("stdout"), b.lines
    assert "to-stderr\n" in b.output("stderr"), b.lines
    assert "to-stderr" not in b.output("stdout"), b.lines
    assert_no_build_sandbox(admin)


def test_failing_run(ld, admin):
    failing = "FROM minimal\nENV X=1\nRUN echo before-failing; exit 3\nRUN echo never\n"
    b = build(admin, "broken", failing)
    assert b.status == 200 and b.last["type"] == "error", b
    msg = b.error["message"]
    assert "step 3/4" in msg and "line 3" in msg and "RUN" in msg and "3" in msg.split("code")[-1], msg
    assert "before-failing" in b.output("stdout"), b.lines
    assert not [s for s in b.steps() if s["step"] == 4], b.lines
    assert admin.request("GET", "/v1/templates/broken").status == 404
    assert "broken" not in names(admin)
    assert_no_build_sandbox(admin)
    wait_for(lambda: not staging_dirs(ld), 10, "the build's staging dir to be removed")

    # Over an existing template: it is left as it was.
    before = admin.request("GET", "/v1/templates/talker").json
    rootfs = os.path.join(ld.state_dir, "templates", "talker", "rootfs.ext4")
    ino = os.stat(rootfs).st_ino
    b = build(admin, "talker", failing)
    assert b.last["type"] == "error", b
    after = admin.request("GET", "/v1/templates/talker").json
    assert after == before, (before, after)
    assert os.stat(rootfs).st_ino == ino
    assert_no_build_sandbox(admin)


# ----------------------------------------------------------------- 5. the build's network

def test_build_network_policy(netd, fakenet):  # noqa: F811
    url = f"http://{fn.WWW_ALLOWED}/"
    # /usr/bin/wget: minimal's sh runs busybox's own wget applet for a bare
    # `wget`, which dies of SIGSEGV on -T (images/minimal-wget.sh).
    df = f"FROM minimal\nRUN /usr/bin/wget -q -T 5 -O /fetched {url} && cat /fetched\n"
    b = build(netd.api, "fetcher", df)
    assert b.status == 200 and b.last["type"] == "error", b  # no network by default
    assert "non-zero" in b.error["message"], b
    assert netd.api.request("GET", "/v1/templates/fetcher").status == 404
    assert_no_build_sandbox(netd.api)

    b = build(netd.api, "fetcher", df, network={"allow": [fn.WWW_ALLOWED]})
    assert b.ok, (b, netd.log())
    assert f"hello from {fn.WWW_ALLOWED}" in b.output("stdout"), b.lines
    assert_no_build_sandbox(netd.api)
    # The policy was the build's: a sandbox of the template has none.
    sb = netd.api.create_ok(template="fetcher")
    try:
        code, out, _ = sh(netd.api, sb["id"], f"cat /fetched; /usr/bin/wget -q -T 3 -O- {url}")
        assert f"hello from {fn.WWW_ALLOWED}" in out and code != 0, (code, out)
    finally:
        netd.api.delete(sb["id"])


# ----------------------------------------------------------------- 6. tenants

def test_tenants_templates(ld, admin, tenants):
    a, b = tenants["a"], tenants["b"]
    ba = build_ok(a, "mine-a", "FROM minimal\nENV OWNER=a\n")
    assert ba.template["tenant"] == "a", ba
    assert a.request("GET", "/v1/templates/mine-a").json["tenant"] == "a"
    assert "mine-a" in names(a) and "mine-a" in names(admin)

    # Invisible to b: inspect, list, create; its name is taken.
    check_error(b.request("GET", "/v1/templates/mine-a"), 404, ["unknown template"])
    assert "mine-a" not in names(b)
    check_error(b.request("POST", "/v1/sandboxes", body={"template": "mine-a"}), 400, ["unknown template"])
    bb = build(b, "mine-a", "FROM minimal\n")
    assert bb.status == 409 and "taken" in bb.error["message"], bb
    bb = build(b, "from-a", "FROM mine-a\n")
    assert bb.last["type"] == "error" and "no such template" in bb.error["message"], bb
    check_error(b.request("DELETE", "/v1/templates/mine-a"), 404)
    # a may start it; its sandbox has its env.
    r = a.request("POST", "/v1/sandboxes", body={"template": "mine-a", "vcpus": 1, "memory_mib": 256})
    assert r.status == 201, r
    sid = r.json["id"]
    try:
        r = a.request("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": ["sh", "-c", "echo $OWNER"]})
        assert r.status == 200 and r.json["stdout"] == "a\n", r
    finally:
        assert a.request("DELETE", f"/v1/sandboxes/{sid}").status == 200

    # The operator's template is shared: every tenant sees it, none deletes it.
    shared = build_ok(admin, "shared-one", "FROM minimal\nENV SHARED=1\n")
    assert shared.template["tenant"] is None, shared
    for t in (a, b):
        assert "shared-one" in names(t)
        r = t.request("GET", "/v1/templates/shared-one")
        assert r.status == 200 and r.json["tenant"] is None, r
        check_error(t.request("DELETE", "/v1/templates/shared-one"), 403, ["operator"])
        check_error(t.request("DELETE", "/v1/templates/minimal"), 403)
        assert build(t, "shared-one", "FROM minimal\n").status == 409
    # A tenant builds from a shared template; the operator's build over the
    # unix socket for a tenant (?tenant=) is that tenant's.
    assert build_ok(b, "b-child", "FROM shared-one\nENV CHILD=1\n").template["tenant"] == "b"
    assert build_ok(admin, "for-b", "FROM minimal\n", tenant="b").template["tenant"] == "b"
    assert "for-b" in names(b) and "for-b" not in names(a)
    # A token cannot build for another tenant; the operator cannot take a tenant's name.
    bb = build(a, "for-b2", "FROM minimal\n", tenant="b")
    assert bb.status == 403, bb
    bb = build(admin, "mine-a", "FROM minimal\n")
    assert bb.status == 409 and "taken" in bb.error["message"], bb

    # The layer cache is per owner: the operator's layers are not a's, a's own are.
    probe = "FROM minimal\nRUN echo probe > /probe\n"
    assert build_ok(admin, "probe", probe).steps()[1]["cached"] is False
    assert build_ok(a, "a-probe", probe).steps()[1]["cached"] is False
    assert build_ok(a, "a-probe2", probe).steps()[1]["cached"] is True
    # a's own layers are no templates a starts either.
    tdir = os.path.join(ld.state_dir, "templates")
    mine = [n for n in os.listdir(tdir) if n.startswith("airlock-build-")
            and json.load(open(os.path.join(tdir, n, "template.json"))).get("tenant") == "a"]
    assert mine
    check_error(a.request("POST", "/v1/sandboxes", body={"template": mine[0]}), 400, ["airlock-build-"])
    for t, n in ((admin, "probe"), (a, "a-probe"), (a, "a-probe2")):
        assert t.request("DELETE", f"/v1/templates/{n}").status == 204

    assert a.request("DELETE", "/v1/templates/mine-a").status == 204
    assert "mine-a" not in names(a) and "mine-a" not in names(admin)
    for n in ("b-child", "for-b"):
        assert b.request("DELETE", f"/v1/templates/{n}").status == 204
    assert admin.request("DELETE", "/v1/templates/shared-one").status == 204
    assert_no_build_sandbox(admin)


# ----------------------------------------------------------------- 7. delete

def test_delete_in_use(ld, admin):
    # A WORKDIR and a USER after the last RUN (here: no RUN) still take effect.
    b = build_ok(admin, "busy", "FROM minimal\nENV BUSY=1\nWORKDIR /srv/busy\nUSER user\n")
    assert b.template["config"]["uid"] == 1000 and b.template["config"]["workdir"] == "/srv/busy", b
    tdir = os.path.join(ld.state_dir, "templates", "busy")
    assert os.path.isdir(tdir)
    sb = admin.create_ok(template="busy")
    try:
        code, out, err = sh(admin, sb["id"], "pwd; id -u")
        assert code == 0 and out == "/srv/busy\n1000\n", (out, err)
        r = admin.request("DELETE", "/v1/templates/busy")
        check_error(r, 409, ["in use", "1 sandboxes"])
        b = build(admin, "busy", "FROM minimal\nENV BUSY=2\n")
        assert b.status == 409 and "in use" in b.error["message"], b
        assert admin.request("GET", "/v1/templates/busy").json["config"]["env"][-1] == "BUSY=1"
        r = admin.request("POST", f"/v1/sandboxes/{sb['id']}/snapshots", body={})
        assert r.status in (200, 201), r
        snap = r.json["id"]
    finally:
        admin.delete_ok(sb["id"])
    # Its sandbox is gone; a snapshot of one still uses it.
    check_error(admin.request("DELETE", "/v1/templates/busy"), 409, ["in use", "1 snapshots"])
    assert admin.request("DELETE", f"/v1/snapshots/{snap}").status in (200, 204)
    assert admin.request("DELETE", "/v1/templates/busy").status == 204
    assert "busy" not in names(admin)
    assert admin.request("GET", "/v1/templates/busy").status == 404
    assert admin.request("DELETE", "/v1/templates/busy").status == 404
    assert not os.path.exists(tdir)
    check_error(admin.request("DELETE", "/v1/templates/minimal"), 403, ["built in"])


# ----------------------------------------------------------------- 8. bad input

def a_cache_layer(ld):
    tdir = os.path.join(ld.state_dir, "templates")
    layers = sorted(n for n in os.listdir(tdir) if n.startswith("airlock-build-"))
    # One the earlier builds left, when they ran: refused all the same.
    return layers[0] if layers else "airlock-build-0123456789abcdef"


BAD = [
    # (id, name, dockerfile, files, raw, params, status, words)
    ("no-name", None, "FROM minimal\n", {}, None, {}, 400, ["name"]),
    ("invalid-name", "Bad Name", "FROM minimal\n", {}, None, {}, 400, ["name"]),
    ("cache-prefix", "airlock-build-0123", "FROM minimal\n", {}, None, {}, 400, ["airlock-build-"]),
    ("builtin-name", "minimal", "FROM minimal\n", {}, None, {}, 409, ["built-in"]),
    ("no-dockerfile", "bad-nodf", None, {"x.txt": "x"}, None, {}, 200, ["no Dockerfile"]),
    ("from-unknown", "bad-from", "FROM nosuchtemplate\n", {}, None, {}, 200, ["nosuchtemplate", "no such"]),
    ("from-layer", "bad-layer", "FROM {layer}\n", {}, None, {}, 200, ["no such template"]),
    ("multi-stage", "bad-stages", "FROM minimal AS one\nRUN true\nFROM minimal\nCOPY --from=one /x /x\n", {},
     None, {}, 200, ["FROM"]),
    ("copy-missing", "bad-copy", "FROM minimal\nCOPY nothere.txt /x\n", {}, None, {}, 200, ["nothere.txt"]),
    ("copy-parent", "bad-copy-up", "FROM minimal\nCOPY ../x /x\n", {}, None, {}, 200, ["../x"]),
    ("tar-dotdot", "bad-tar", "FROM minimal\n", {"../escape.txt": "x"}, None, {}, 200, [".."]),
    ("not-a-tar", "bad-notar", None, None, b"this is not a tar archive\n" * 40, {}, 200, ["build context: not a tar"]),
    ("bad-build-arg", "bad-arg", "FROM minimal\n", {}, None, {"build_arg": "NOEQUALS"}, 400, ["build_arg"]),
    ("bad-network-json", "bad-net", "FROM minimal\n", {}, None, {"network": "{not json"}, 400, ["network"]),
    ("network-ceiling", "bad-ceiling", "FROM minimal\n", {}, None, {"network": {"allow": ["10.0.0.0/8"]}}, 403,
     ["ceiling"]),
    ("disk-too-small", "bad-disk", "FROM minimal\n", {}, None, {"disk_mib": 16}, 200, ["disk_mib", "smaller"]),
    ("bad-flag", "bad-flag", "FROM minimal\n", {}, None, {"no_cache": "maybe"}, 400, ["no_cache"]),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(ld, admin, case):
    _, name, df, files, raw, params, status, words = case
    before = names(admin)
    if df and "{layer}" in df:
        df = df.format(layer=a_cache_layer(ld))
    b = build(admin, name, df, files, raw=raw, **params)
    assert b.status == status, b
    if status == 200:
        assert b.last["type"] == "error", b
        assert not [l for l in b.lines if l["type"] == "step" and l["step"] > 1], b
        assert "build context: build context" not in b.error["message"], b
    else:
        assert b.response.json and set(b.response.json) == {"error"}, b
    msg = b.error["message"]
    for w in words:
        assert w in msg, (w, msg)
    if status < 500:
        assert b.error["code"] != "internal", b
    assert names(admin) == before
    if name and name != "minimal":
        assert admin.request("GET", "/v1/templates/" + urllib.parse.quote(name)).status in (400, 404)
    wait_for(lambda: not staging_dirs(ld), 10, "no staging dir left")
    assert_no_build_sandbox(admin)


def test_cut_upload_leaves_nothing(ld, admin):
    """A client that goes away while it sends the context: no staging dir,
    no template, the name free again."""
    raw = context_tar({"Dockerfile": "FROM minimal\n", "big.bin": os.urandom(256 * 1024)})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(ld.socket)
    sock.sendall((f"POST {build_path('cut-upload')} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-tar\r\n"
                  f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw[:len(raw) // 2])
    time.sleep(0.3)
    sock.close()
    wait_for(lambda: not staging_dirs(ld), 10, "the upload's staging dir to be removed")
    assert "cut-upload" not in names(admin)
    wait_for(lambda: build(admin, "cut-upload", "FROM minimal\nENV OK=1\n").ok, 10, "the name to be free")


def test_gzip_context_and_dockerfile_path(ld, admin):
    ctx = context_tar({"docker/Dockerfile.dev": "FROM minimal\nENV FLAVOUR=dev\n"})
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as z:
        z.write(ctx)
    b = build(admin, "flavour", raw=buf.getvalue(), dockerfile="docker/Dockerfile.dev")
    assert b.ok and "FLAVOUR=dev" in b.template["config"]["env"], b
    b = build(admin, "flavour2", raw=buf.getvalue())  # no ./Dockerfile in it
    assert b.last["type"] == "error" and 'no Dockerfile at "Dockerfile"' in b.error["message"], b
    for n in ("flavour", "cut-upload"):
        assert admin.request("DELETE", f"/v1/templates/{n}").status == 204


def test_copy_chown_unknown_name(ld, admin):
    """As Docker does: a --chown name the image does not have is an error
    (the guest's tar used to give the files to root without a word)."""
    b = build(admin, "bad-chown", "FROM minimal\nCOPY --chown=nosuchuser:nosuchgroup f /f\n", {"f": "x"})
    assert b.status == 200 and b.last["type"] == "error", b
    assert "--chown=nosuchuser:nosuchgroup" in b.error["message"] and "step 2/2" in b.error["message"], b
    assert "bad-chown" not in names(admin)
    assert_no_build_sandbox(admin)


# ----------------------------------------------------------------- 9. --snapshot

def test_snapshot_at_build(ld, admin):
    b = build_ok(admin, "snappy", "FROM minimal\nRUN echo snap > /snap.txt\n", snapshot=1)
    assert [l for l in b.lines if l["type"] == "progress" and l["phase"] == "snapshot"], b.lines
    assert "template snapshot snappy/1/256: ready" in ld.log(400), "the build made the template snapshot"
    assert_no_build_sandbox(admin)
    booted = ld.log(2000).count("template snapshot snappy/1/256: booting the template once")
    sb = admin.create_ok(template="snappy")
    try:
        assert sb["boot"] == "template", sb
        code, out, _ = sh(admin, sb["id"], "cat /snap.txt")
        assert out == "snap\n", out
    finally:
        admin.delete_ok(sb["id"])
    # The create restored the build's snapshot: it did not boot the template again.
    assert ld.log(2000).count("template snapshot snappy/1/256: booting the template once") == booted
    # Without snapshot=1 the build makes none.
    build_ok(admin, "nosnap", "FROM minimal\nRUN echo x > /x\n")
    assert "template snapshot nosnap/" not in ld.log(2000)


# ----------------------------------------------------------------- 10. disk_mib

def df_root_mib(api, sid):
    code, out, _ = sh(api, sid, "df -m / | tail -1")
    assert code == 0, out
    return int(out.split()[1])


def test_disk_mib(ld, admin):
    size = MINIMAL_MIB + 300
    b = build_ok(admin, "roomy", "FROM minimal\nRUN echo roomy > /roomy\n", disk_mib=size)
    assert b.template["size_mib"] == size, b.template
    # Without a step that changes the disk the template is still of that size.
    b = build_ok(admin, "roomy-env", "FROM minimal\nENV ROOMY=1\n", disk_mib=size)
    assert b.template["size_mib"] == size, b.template
    plain = admin.create_ok(template="roomy", boot="cold")
    bigger = admin.create_ok(template="roomy", disk_mib=size + 200)
    try:
        plain_mib, big_mib = df_root_mib(admin, plain["id"]), df_root_mib(admin, bigger["id"])
        # df leaves out the filesystem's own metadata (~10% at 1 KiB blocks).
        assert size * 0.85 <= plain_mib <= size, (plain_mib, size)
        assert big_mib > plain_mib + 150, (big_mib, plain_mib)
    finally:
        admin.delete_ok(plain["id"])
        admin.delete_ok(bigger["id"])
    for n in ("roomy", "roomy-env"):
        assert admin.request("DELETE", f"/v1/templates/{n}").status == 204


# ----------------------------------------------------------------- 11. the client goes away

def test_disconnect_mid_run_cancels_the_build(ld, admin):
    raw = context_tar({"Dockerfile": "FROM minimal\nRUN echo sleeping; sleep 30\nRUN true\n"})
    s = Stream(ld.socket, "POST", build_path("sleepy"), raw=raw, headers={"Content-Type": "application/x-tar"})
    assert s.status == 200, s.error_body()
    s.read_until(lambda l: l["type"] == "output" and "sleeping" in l["data"], "the RUN to start")
    assert build_sandboxes(admin), "the build runs in a sandbox"
    # One build of a name at a time; it is no template until it is done.
    b = build(admin, "sleepy", "FROM minimal\n")
    assert b.status == 409 and "being built" in b.error["message"], b
    assert admin.request("GET", "/v1/templates/sleepy").status == 404
    t0 = time.monotonic()
    s.close()
    wait_for(lambda: not build_sandboxes(admin), 10, "the build's sandbox to be deleted after the disconnect")
    # The name is free again: a build of it goes through.
    wait_for(lambda: not staging_dirs(ld), 10, "the staging dir to be removed")
    assert time.monotonic() - t0 < 15
    assert admin.request("GET", "/v1/templates/sleepy").status == 404
    b = build_ok(admin, "sleepy", "FROM minimal\nENV AWAKE=1\n")
    assert b.template["name"] == "sleepy"
    assert_no_build_sandbox(admin)


def test_restart_mid_build_removes_its_sandbox(ld, admin):
    """A daemon killed during a build (kill -9: its VMs stay up for the next
    one to re-attach) leaves a sandbox that no build owns any more: the next
    daemon deletes it rather than keep it running, and its layer in use."""
    raw = context_tar({"Dockerfile": "FROM minimal\nRUN echo sleeping; sleep 60\n"})
    s = Stream(ld.socket, "POST", build_path("cut"), raw=raw, headers={"Content-Type": "application/x-tar"})
    assert s.status == 200, s.error_body()
    s.read_until(lambda l: l["type"] == "output" and "sleeping" in l["data"], "the RUN to start")
    assert build_sandboxes(admin)
    ld.proc.kill()
    ld.proc.wait()
    s.close()
    ld.start()
    wait_for(lambda: not build_sandboxes(admin), 15, "the cut build's sandbox to be deleted")
    assert not [sb for sb in admin.list(all=True) if BUILD_META in (sb.get("metadata") or {})
                and sb["state"] != "deleted"], admin.list(all=True)
    assert admin.request("GET", "/v1/templates/cut").status == 404
    assert not staging_dirs(ld)
    assert build_ok(admin, "cut", "FROM minimal\nENV AGAIN=1\n").template["name"] == "cut"
