# SPDX-License-Identifier: Apache-2.0
"""Category 18: templates (issue 23). A hostile tenant (mallory, over TCP
with its token) at another tenant's (victim's) built and imported templates
and build cache; hostile build contexts, Dockerfiles and image archives; the
build sandbox's network and host; builds as a resource.

Containment is read from outside: the victim's template as the operator
sees it (created_ms, the inode of its rootfs.ext4), the daemon's state dir
(templates/, .staging-*), host paths the attacks aim at, the sandboxes the
operator lists (a build's has metadata airlock.build=NAME), the Sniffer,
the Canary and the fake internet's logs. One `minimal` template of the
victim's is built once for the module (a RUN that writes a random value)."""
import glob
import io
import json
import os
import re
import secrets
import tarfile
import threading
import time
import urllib.parse
import zlib

import pytest

import secutil as su
from secutil import attempt, fn
from test_oci_import import docker_save, entry, hostile_layer, layer_tar, sha

RUN_VALUE = "RUN cat /proc/sys/kernel/random/uuid > /value && echo value=$(cat /value)\n"
DOCKERFILE_A = "FROM minimal\n" + RUN_VALUE
MARK = "airlock-sec-tpl-" + secrets.token_hex(4)
OUTSIDE = f"/tmp/{MARK}"           # where the traversals aim on the host
HOST_SECRET = "/tmp/" + MARK + "-secret"   # a host file the symlinks and hard links aim at
HOST_SECRET_TEXT = "host-secret-" + secrets.token_hex(16)


# ----------------------------------------------------------------- helpers

def ctx_tar(files, extra=()):
    """A build context: files {name: text or bytes}; extra: (TarInfo, data)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
            t.addfile(ti, io.BytesIO(data))
        for ti, data in extra:
            t.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return buf.getvalue()


def ndjson(r):
    assert r.status == 200, r
    return [json.loads(x) for x in r.raw.splitlines() if x.strip()]


def build(api, name, context, query="", timeout=300):
    """POST /v1/templates?name=NAME: the Response."""
    return api.request("POST", f"/v1/templates?name={name}{query}", raw=context,
                       headers={"Content-Type": "application/x-tar"}, timeout=timeout)


def build_lines(api, name, dockerfile, files=None, query="", extra=()):
    return ndjson(build(api, name, ctx_tar({"Dockerfile": dockerfile, **(files or {})}, extra), query))


def import_archive(api, name, data, timeout=300):
    return api.request("POST", f"/v1/templates/import?name={name}", raw=data,
                       headers={"Content-Type": "application/x-tar"}, timeout=timeout)


def error_of(lines):
    assert lines and lines[-1]["type"] == "error", lines
    return lines[-1]["error"]["message"]


def output_of(lines):
    return "".join(x["data"] for x in lines if x["type"] == "output")


def staging(secd):
    return glob.glob(os.path.join(secd.state_dir, "templates", ".staging-*"))


def build_sandboxes(secd):
    """The build sandboxes the operator sees (metadata airlock.build)."""
    return [s for s in secd.api.list() if "airlock.build" in (s.get("metadata") or {})]


def nothing_outside(secd):
    """No host path an attack aimed at, no staging directory left, no build sandbox."""
    hits = [p for p in glob.glob(f"/tmp/{MARK}*") if p != HOST_SECRET] + glob.glob("/etc/pwned*")
    assert not hits, hits
    assert not staging(secd), staging(secd)
    with open(HOST_SECRET) as f:
        assert f.read() == HOST_SECRET_TEXT


def no_template(secd, name):
    assert secd.api.request("GET", f"/v1/templates/{name}").status == 404
    assert not os.path.exists(os.path.join(secd.state_dir, "templates", name))


def wait_no_build_sandbox(secd, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while build_sandboxes(secd):
        assert time.monotonic() < deadline, build_sandboxes(secd)
        time.sleep(0.5)


def identity(secd, name):
    """What says a template was not replaced: created_ms and the inode of its image."""
    t = secd.api.request("GET", f"/v1/templates/{name}")
    assert t.status == 200, t
    st = os.stat(os.path.join(secd.state_dir, "templates", name, "rootfs.ext4"))
    return t.json["created_ms"], st.st_ino


def run_in(api, template, script, tenant_api=None):
    """A sandbox of template (created with tenant_api, else the operator's), sh -c script, deleted."""
    a = tenant_api or api
    r = a.request("POST", "/v1/sandboxes", body={"template": template, "vcpus": 1, "memory_mib": 256})
    assert r.status == 201, r
    sid = r.json["id"]
    try:
        e = a.request("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": ["sh", "-c", script], "timeout_s": 60})
        assert e.status == 200, e
        return e.json["exit_code"], su.stdout_bytes(e.json).decode(errors="replace"), e.json.get("stderr", "")
    finally:
        a.request("DELETE", f"/v1/sandboxes/{sid}")


def busybox_layer():
    with open("/bin/busybox", "rb") as f:
        bb = f.read()
    return layer_tar([entry("bin/", "dir"), entry("bin/busybox", data=bb, mode=0o755),
                      entry("bin/sh", "sym", link="busybox"), entry("tmp/", "dir", mode=0o1777)])


def gzip_bomb_layout(gib=9):
    """An OCI layout whose one gzip layer holds gib files of 1 GiB of zeros
    each (each header is within --max-bytes, their sum is not), about 1 MiB
    a GiB: the deflate stream of 64 MiB of zeros after a full flush is the
    same bytes every time, so it is made once and repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts, seg = [], None
    for i in range(gib):
        ti = tarfile.TarInfo("z%d" % i)
        ti.size, ti.mode = 1 << 30, 0o644
        parts.append(c.compress(ti.tobuf(format=tarfile.PAX_FORMAT)) + c.flush(zlib.Z_FULL_FLUSH))
        if seg is None:
            seg = c.compress(b"\0" * (64 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
        parts.append(seg * 16)
    parts.append(c.flush())
    blob = b"".join(parts)
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}}).encode()
    man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": "sha256:" + sha(cfg), "size": len(cfg)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                  "digest": "sha256:" + sha(blob), "size": len(blob)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + sha(man),
         "size": len(man)}]}).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index),
                           ("blobs/sha256/" + sha(blob), blob), ("blobs/sha256/" + sha(cfg), cfg),
                           ("blobs/sha256/" + sha(man), man)):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def raw_post(tcp_api, path, body, read_until=None, timeout=120):
    """A POST on a raw socket: sends the body (stops at a reset), then reads
    the answer until read_until (bytes) shows, or the end. Returns (socket,
    what was read); the caller closes the socket."""
    s = tcp_api.raw_socket(timeout=timeout)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tcp_api.token}\r\n"
            f"Content-Type: application/x-tar\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    try:
        s.sendall(head + body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    got = b""
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            c = s.recv(65536)
        except OSError:
            break
        if not c:
            break
        got += c
        if read_until and read_until in got:
            break
    return s, got


# ----------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def host_secret():
    with open(HOST_SECRET, "w") as f:
        f.write(HOST_SECRET_TEXT)
    yield HOST_SECRET
    os.unlink(HOST_SECRET)
    for p in glob.glob(f"/tmp/{MARK}*"):
        os.system(f"rm -rf '{p}'")


@pytest.fixture(scope="module")
def victim_tpl(secd, tcp, host_secret):
    """The victim's built template (its RUN's random value) and imported one."""
    v = tcp["victim"]
    lines = build_lines(v, "sec-vic-built", DOCKERFILE_A)
    assert lines[-1]["type"] == "done", lines
    value = output_of(lines).split("value=")[1].split()[0]
    r = import_archive(v, "sec-vic-imported", open(docker_save([busybox_layer()], "/tmp/" + MARK + "-img.tar"),
                                                       "rb").read())
    os.unlink("/tmp/" + MARK + "-img.tar")
    assert ndjson(r)[-1]["type"] == "done", r
    layers = []
    for d in glob.glob(os.path.join(secd.state_dir, "templates", "airlock-build-*")):
        meta = json.load(open(os.path.join(d, "template.json")))
        if meta.get("tenant") == "victim":
            layers.append(os.path.basename(d))
    assert layers, "the victim's build left no layer in the cache"
    yield {"built": "sec-vic-built", "imported": "sec-vic-imported", "value": value, "layers": layers}
    for name in ("sec-vic-built", "sec-vic-imported"):
        v.request("DELETE", f"/v1/templates/{name}")


# ----------------------------------------------------------------- 1. another tenant's templates

def test_another_tenants_templates(secd, tcp, victim_tpl):
    m = tcp["mallory"]
    names = (victim_tpl["built"], victim_tpl["imported"])
    before = {n: identity(secd, n) for n in names}

    with attempt("templates", "tpl-get-other-tenant", "GET another tenant's built and imported templates"):
        for n in names:
            r = m.request("GET", f"/v1/templates/{n}")
            assert r.status == 404, r
            assert b"victim" not in r.raw, r

    with attempt("templates", "tpl-list-other-tenant", "list templates: another tenant's are not there"):
        r = m.request("GET", "/v1/templates")
        assert r.status == 200, r
        listed = {t["name"] for t in r.json["templates"]}
        assert not listed & set(names), listed
        assert not any(n.startswith("airlock-build-") for n in listed), listed

    with attempt("templates", "tpl-create-other-tenant", "create a sandbox from another tenant's templates"):
        for n in names:
            r = m.request("POST", "/v1/sandboxes", body={"template": n, "vcpus": 1, "memory_mib": 256})
            assert r.status == 400 and "unknown template" in r.error_message, r
        assert not [s for s in secd.api.list() if s["template"] in names]

    with attempt("templates", "tpl-from-other-tenant", "build FROM another tenant's built and imported templates"):
        for n in names:
            err = error_of(build_lines(m, "sec-mal-from", f"FROM {n}\nRUN true\n"))
            assert "no such template" in err, err
        no_template(secd, "sec-mal-from")

    with attempt("templates", "tpl-build-over-other-tenant",
                 "build, and import, over another tenant's template names (409 taken; theirs unchanged)"):
        for n in names:
            r = build(m, n, ctx_tar({"Dockerfile": "FROM minimal\n"}))
            assert r.status == 409 and "taken" in r.error_message and "victim" not in r.error_message, r
            r = import_archive(m, n, b"x" * 1024)
            assert r.status == 409 and "taken" in r.error_message, r
        assert {n: identity(secd, n) for n in names} == before

    with attempt("templates", "tpl-delete-other-tenant", "DELETE another tenant's templates"):
        for n in names:
            r = m.request("DELETE", f"/v1/templates/{n}")
            assert r.status == 404, r
        assert {n: identity(secd, n) for n in names} == before

    with attempt("templates", "tpl-cache-layer-other-tenant",
                 "start, GET, DELETE, build FROM and build over another tenant's cache layers by their real names"):
        for layer in victim_tpl["layers"]:
            r = m.request("POST", "/v1/sandboxes", body={"template": layer, "vcpus": 1, "memory_mib": 256})
            assert r.status == 400, r
            for method in ("GET", "DELETE"):
                r = m.request(method, f"/v1/templates/{layer}")
                assert r.status == 404, r
            err = error_of(build_lines(m, "sec-mal-layer", f"FROM {layer}\nRUN true\n"))
            assert "no such template" in err, err
            r = build(m, layer, ctx_tar({"Dockerfile": "FROM minimal\n"}))
            assert r.status == 400, r
            assert os.path.exists(os.path.join(secd.state_dir, "templates", layer, "rootfs.ext4"))
        assert not [s for s in secd.api.list() if s["template"].startswith("airlock-build-")]
        assert {n: identity(secd, n) for n in names} == before


# ----------------------------------------------------------------- 2. cache poisoning

def test_cache_poisoning(secd, tcp, victim_tpl):
    m = tcp["mallory"]
    with attempt("templates", "tpl-cache-cross-tenant",
                 "build the exact Dockerfile and context another tenant built: its RUN layer is not reused"):
        lines = build_lines(m, "sec-mal-same", DOCKERFILE_A)
        assert lines[-1]["type"] == "done", lines
        disk = [x for x in lines if x["type"] == "step" and x["instruction"].startswith("RUN")]
        assert disk and not any(x["cached"] for x in disk), disk
        value = output_of(lines).split("value=")[1].split()[0]
        assert value != victim_tpl["value"]
        code, out, _ = run_in(secd.api, "sec-mal-same", "cat /value", tenant_api=m)
        assert code == 0 and out.strip() == value and victim_tpl["value"] not in out, out
        assert m.request("DELETE", "/v1/templates/sec-mal-same").status == 204

    with attempt("templates", "tpl-cache-operator", "the operator's build of the same Dockerfile is not cached "
                 "from a tenant's layers"):
        lines = build_lines(secd.api, "sec-op-same", DOCKERFILE_A)
        assert lines[-1]["type"] == "done", lines
        disk = [x for x in lines if x["type"] == "step" and x["instruction"].startswith("RUN")]
        assert disk and not any(x["cached"] for x in disk), disk
        assert victim_tpl["value"] not in output_of(lines)
        assert secd.api.request("DELETE", "/v1/templates/sec-op-same").status == 204


# ----------------------------------------------------------------- 3. hostile contexts

def _link(name, target, kind=tarfile.SYMTYPE):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname = kind, target
    return ti, b""


def test_hostile_contexts(secd, tcp, host_secret):
    m = tcp["mallory"]
    copy_all = "FROM minimal\nCOPY . /ctx/\n"

    with attempt("templates", "ctx-dotdot", "a context entry ../../..<host path>"):
        ti = tarfile.TarInfo("../../../../.." + OUTSIDE + "-dotdot")
        ti.size = 4
        err = error_of(build_lines(m, "sec-ctx", copy_all, extra=[(ti, b"pwnd")]))
        assert ".." in err, err
        no_template(secd, "sec-ctx")
        nothing_outside(secd)

    with attempt("templates", "ctx-absolute", "a context entry with an absolute host path (taken inside the "
                 "context: the guest has it under /ctx)"):
        ti = tarfile.TarInfo(OUTSIDE + "-abs")
        ti.size = 4
        lines = build_lines(m, "sec-ctx", copy_all, extra=[(ti, b"pwnd")])
        # Refused, or taken as a path inside the context: never written on the host.
        if lines[-1]["type"] == "done":
            code, out, _ = run_in(secd.api, "sec-ctx", f"cat /ctx{OUTSIDE}-abs", tenant_api=m)
            assert code == 0 and out == "pwnd", out
            assert m.request("DELETE", "/v1/templates/sec-ctx").status == 204
        no_template(secd, "sec-ctx")
        nothing_outside(secd)

    with attempt("templates", "ctx-symlink-host-file",
                 "a context symlink to /etc/shadow and to a host file, then COPY link /x"):
        for target in ("/etc/shadow", HOST_SECRET):
            lines = build_lines(m, "sec-ctx", "FROM minimal\nCOPY link /x\n", extra=[_link("link", target)])
            if lines[-1]["type"] == "done":
                code, out, _ = run_in(secd.api, "sec-ctx",
                                      "readlink /x; cat /x 2>/dev/null | head -c 200; echo", tenant_api=m)
                assert HOST_SECRET_TEXT not in out and "root:" not in out, out
                assert out.splitlines()[0] == target, out   # the guest got the link itself
                assert m.request("DELETE", "/v1/templates/sec-ctx").status == 204
            else:
                assert HOST_SECRET_TEXT not in json.dumps(lines)
        no_template(secd, "sec-ctx")
        nothing_outside(secd)

    with attempt("templates", "ctx-symlink-dir-write", "a context symlink to a host dir, then an entry through it"):
        ti = tarfile.TarInfo("d/pwned")
        ti.size = 4
        lines = build_lines(m, "sec-ctx", copy_all, extra=[_link("d", "/tmp"), (ti, b"pwnd")])
        assert lines[-1]["type"] == "error", lines
        assert not os.path.exists("/tmp/pwned")
        no_template(secd, "sec-ctx")
        nothing_outside(secd)

    with attempt("templates", "ctx-hardlink-out", "a context hard link to ../../etc/passwd and to a host file"):
        for target in ("../../etc/passwd", HOST_SECRET):
            lines = build_lines(m, "sec-ctx", "FROM minimal\nCOPY hl /x\n",
                                extra=[_link("hl", target, tarfile.LNKTYPE)])
            assert lines[-1]["type"] == "error", lines
            assert HOST_SECRET_TEXT not in json.dumps(lines) and "root:x:0" not in json.dumps(lines)
        no_template(secd, "sec-ctx")
        nothing_outside(secd)

    with attempt("templates", "ctx-device-node", "a context character device (/dev/mem's numbers) and a FIFO"):
        for kind in (tarfile.CHRTYPE, tarfile.FIFOTYPE):
            ti = tarfile.TarInfo("dev0")
            ti.type, ti.devmajor, ti.devminor = kind, 1, 1
            err = error_of(build_lines(m, "sec-ctx", "FROM minimal\nCOPY dev0 /x\n", extra=[(ti, b"")]))
            assert "dev0" in err, err
        no_template(secd, "sec-ctx")
        nothing_outside(secd)


# ----------------------------------------------------------------- 4. hostile Dockerfiles

def test_hostile_dockerfiles(secd, tcp, watch, host_secret):
    m = tcp["mallory"]

    with attempt("templates", "df-copy-host-path", "COPY /etc/shadow and a host file's absolute path: the "
                 "context's root, never the host's"):
        for src in ("/etc/shadow", HOST_SECRET):
            lines = build_lines(m, "sec-df", f"FROM minimal\nCOPY {src} /x\n")
            assert lines[-1]["type"] == "error", lines
            assert HOST_SECRET_TEXT not in json.dumps(lines)
        # With the same path in the context, the guest gets the context's file.
        lines = build_lines(m, "sec-df", "FROM minimal\nCOPY /etc/shadow /x\n", files={"etc/shadow": "CONTEXT\n"})
        assert lines[-1]["type"] == "done", lines
        code, out, _ = run_in(secd.api, "sec-df", "cat /x", tenant_api=m)
        assert out == "CONTEXT\n", out
        assert m.request("DELETE", "/v1/templates/sec-df").status == 204
        nothing_outside(secd)

    with attempt("templates", "df-add-url", "ADD http://www.allowed.test/ and a git URL"):
        mk = watch.mark()
        for src in (f"http://{fn.WWW_ALLOWED}/", f"https://{fn.WWW_ALLOWED}/x.tar",
                    f"git@{fn.WWW_ALLOWED}:x/y.git"):
            err = error_of(build_lines(m, "sec-df", f"FROM minimal\nADD {src} /x\n"))
            assert "ADD" in err, err
        watch.nothing_left(mk)
        assert not watch.net.http_requests() and not watch.net.tcp_connections()
        no_template(secd, "sec-df")

    with attempt("templates", "df-copy-from", "COPY --from another image (and --from another tenant's name)"):
        for df in ("FROM minimal\nCOPY --from=base /etc/passwd /x\n",
                   "FROM minimal AS a\nFROM minimal\nCOPY --from=a /etc /x\n"):
            err = error_of(build_lines(m, "sec-df", df))
            assert "FROM" in err or "--from" in err, err
        no_template(secd, "sec-df")

    with attempt("templates", "df-arg-bomb", "an ARG expansion bomb: ${A}${A}... chained 12 deep, and ${A:-${A:-...}} nested 40 deep"):
        df = "ARG A0=" + "x" * 1024 + "\n"
        for i in range(1, 13):
            df += f"ARG A{i}=" + f"${{A{i - 1}}}" * 16 + "\n"
        df += "FROM minimal\nENV X=${A12}\nRUN echo ${A12}\n"
        t0 = time.monotonic()
        err = error_of(build_lines(m, "sec-df", df))
        assert time.monotonic() - t0 < 30, "the bomb took long"
        assert "longer than" in err or "MiB" in err, err
        # Substitutions nested past the parser's depth.
        err = error_of(build_lines(m, "sec-df", "FROM minimal\nENV X=" + "${A:-" * 40 + "x" + "}" * 40 + "\n"))
        assert "nest" in err or "deep" in err, err
        assert secd.api.request("GET", "/healthz").status == 200
        no_template(secd, "sec-df")
        assert not build_sandboxes(secd)

    with attempt("templates", "df-too-big", "a Dockerfile over 1 MiB"):
        df = "FROM minimal\n" + ("# padding " + "x" * 100 + "\n") * 10000 + "RUN true\n"
        assert len(df) > (1 << 20)
        err = error_of(build_lines(m, "sec-df", df))
        assert "1 MiB" in err or "1048576" in err or "large" in err, err
        no_template(secd, "sec-df")
        nothing_outside(secd)


# ----------------------------------------------------------------- 5. hostile image archives

def test_hostile_image_archives(secd, tcp, host_secret, tmp_path):
    m = tcp["mallory"]
    cases = [("imp-dotdot", "dotdot", "an image layer with ../escape", '".." component'),
             ("imp-symlink-escape", "symlink_dir", "an image layer: a symlink out of the root, then a file "
              "through it", "leads nowhere"),
             ("imp-device-node", "chardev", "an image layer with a character device", "device nodes"),
             ("imp-hardlink-out", "hardlink_out", "an image layer with a hard link to ../../etc/passwd",
              '".." component')]
    for name, case, what, words in cases:
        with attempt("templates", name, what):
            src = docker_save([busybox_layer(), layer_tar(hostile_layer(case))], tmp_path / "h.tar")
            err = error_of(ndjson(import_archive(m, "sec-imp", open(src, "rb").read())))
            assert "airlock-oci: " in err and words in err, err
            no_template(secd, "sec-imp")
            nothing_outside(secd)
            assert not os.path.exists("/tmp/airlock-oci-outside-" + "x")

    with attempt("templates", "imp-gzip-bomb", "a 9 MiB gzip layer of 9 GiB of zeros (9 files of 1 GiB)"):
        t0 = time.monotonic()
        err = error_of(ndjson(import_archive(m, "sec-imp", gzip_bomb_layout(9), timeout=300)))
        assert "--max-bytes" in err, err
        assert time.monotonic() - t0 < 120
        no_template(secd, "sec-imp")
        nothing_outside(secd)

    with attempt("templates", "imp-over-upload-limit", "an archive over --max-template-upload-mib"):
        limit = secd.template_upload_mib
        bomb = os.urandom((limit << 20) + 4096)
        s, got = raw_post(m, "/v1/templates/import?name=sec-imp", bomb)
        s.close()
        assert got.startswith(b"HTTP/1.1 413"), got[:300]
        no_template(secd, "sec-imp")
        nothing_outside(secd)


# ----------------------------------------------------------------- 6. the build network

def test_build_network(secd, tcp, watch):
    m = tcp["mallory"]
    name = "tplbuild-" + secrets.token_hex(4) + ".allowed.test"
    probe = (f"RUN wget -q -O- http://{fn.WWW_ALLOWED}/ >/dev/null 2>&1; echo www=$?; "
             f"wget -q -O- http://{fn.ALLOWED_IP}/ >/dev/null 2>&1; echo ip=$?; "
             f"nslookup {name} >/dev/null 2>&1; echo dns=$?; "
             # The gateway may take the connection and close it: what the
             # echo server would send back is the sign of a reach.
             f"echo nc=$(echo echo-back | nc -w 3 {fn.OTHER_IP} {fn.TCP_ECHO_PORT} 2>/dev/null); "
             f"wget -q -O- http://{fn.WWW_OTHER}/ >/dev/null 2>&1; echo other=$?\n")

    with attempt("templates", "build-net-default-deny", "a RUN without a network reaches the fake internet "
                 "(wget by name and by IP, DNS, nc)"):
        mk = watch.mark()
        lines = build_lines(m, "sec-net", "FROM minimal\n" + probe, query="&no_cache=1")
        assert lines[-1]["type"] == "done", lines
        out = output_of(lines)
        for k in ("www", "ip", "other"):
            assert f"{k}=0" not in out, out
        assert "nc=echo-back" not in out, out
        watch.nothing_left(mk)
        assert name not in watch.dns_qnames()
        assert not watch.net.http_requests() and not watch.net.tcp_connections()
        assert m.request("DELETE", "/v1/templates/sec-net").status == 204

    with attempt("templates", "build-net-one-host", "network allows www.allowed.test: the RUN reaches it, "
                 "not www.other.test nor other IPs"):
        mk = watch.mark()
        pol = urllib.parse.quote(json.dumps({"allow": [fn.WWW_ALLOWED]}))
        lines = build_lines(m, "sec-net", "FROM minimal\n" + probe, query=f"&no_cache=1&network={pol}")
        assert lines[-1]["type"] == "done", lines
        out = output_of(lines)
        assert "www=0" in out, out
        for k in ("ip", "other"):
            assert f"{k}=0" not in out, out
        assert "nc=echo-back" not in out, out
        http = watch.net.http_requests()
        assert http and all(e.get("host", fn.WWW_ALLOWED).split(":")[0] == fn.WWW_ALLOWED for e in http), http
        assert not watch.syns(mk, dst=fn.OTHER_IP), watch.syns(mk)
        assert fn.WWW_OTHER not in watch.dns_qnames() and name not in watch.dns_qnames()
        assert not watch.host_hits(mk)
        assert m.request("DELETE", "/v1/templates/sec-net").status == 204

    with attempt("templates", "build-net-outside-ceiling", "a build network allowing the host's networks "
                 "(10.0.2.2, 10.1.2.0/24:8080, 198.51.100.1): 403 before anything runs"):
        for rule in ("10.0.2.2", "10.1.2.0/24:8080", f"{fn.HOST_IP}:22"):
            pol = urllib.parse.quote(json.dumps({"allow": [rule]}))
            r = build(m, "sec-net", ctx_tar({"Dockerfile": "FROM minimal\nRUN true\n"}), query=f"&network={pol}")
            assert r.status == 403, (rule, r)
        assert not build_sandboxes(secd)
        no_template(secd, "sec-net")
        assert not staging(secd)


# ----------------------------------------------------------------- 7. the build sandbox

def test_build_sandbox_is_a_sandbox(secd, tcp, watch):
    m = tcp["mallory"]

    with attempt("templates", "build-run-host-ports", "a RUN connects to the gateway 10.0.2.2 and the host "
                 "198.51.100.1 on the Canary's ports, and to the API's port"):
        ports = (22, 80, 443, 8080, 15001, 15002, secd.port)
        # The gateway may accept a connection to 10.0.2.2 or the host's address
        # itself and answer 403 (as in test_sec_services.py); anything else
        # that answers, or a Canary hit, is the host reached.
        script = " ".join(f"echo reply={ip}:{p}:$(printf 'GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' | "
                          f"nc -w 2 {ip} {p} 2>/dev/null | head -c 40 | tr -d '\\r\\n');"
                          for ip in ("10.0.2.2", fn.HOST_IP, "127.0.0.1") for p in ports)
        mk = watch.mark()
        lines = build_lines(m, "sec-run", "FROM minimal\nRUN " + script + " echo end\n", query="&no_cache=1")
        assert lines[-1]["type"] == "done", lines
        replies = [ln.split(":", 2) for ln in output_of(lines).splitlines() if ln.startswith("reply=")]
        assert len(replies) == 3 * len(ports), output_of(lines)
        bad = [r for r in replies if r[2] and not re.match(r"HTTP/1\.[01] 403", r[2])]
        assert not bad, bad
        watch.nothing_left(mk)
        assert m.request("DELETE", "/v1/templates/sec-run").status == 204

    with attempt("templates", "build-sandbox-deleted", "the build sandbox is gone when the build ends, "
                 "successful or failed"):
        wait_no_build_sandbox(secd, 30)
        err = error_of(build_lines(m, "sec-run", "FROM minimal\nRUN exit 3\n", query="&no_cache=1"))
        assert "non-zero" in err, err
        wait_no_build_sandbox(secd, 30)
        no_template(secd, "sec-run")

    with attempt("templates", "build-client-gone", "the client disconnects mid-RUN: the build sandbox and "
                 "its VMM go, nothing is published"):
        body = ctx_tar({"Dockerfile": "FROM minimal\nRUN echo started-" + MARK + "; sleep 120\n"})
        s, got = raw_post(m, "/v1/templates?name=sec-gone&no_cache=1", body, read_until=b"started-" + MARK.encode())
        assert b"started-" + MARK.encode() in got, got[-500:]
        assert build_sandboxes(secd)
        s.close()
        wait_no_build_sandbox(secd, 60)
        assert not list(su.qemu_processes(needle="sec-gone"))
        no_template(secd, "sec-gone")
        assert not staging(secd)


# ----------------------------------------------------------------- 8. resource abuse

def test_build_resources(secd, tcp, world, fakenet):
    m = tcp["mallory"]

    with attempt("templates", "build-same-name-concurrent", "3 concurrent builds of one name: one runs, "
                 "the others 409"):
        body = ctx_tar({"Dockerfile": "FROM minimal\nRUN sleep 3\n"})
        results = [None] * 3

        def one(i):
            results[i] = build(m, "sec-conc", body, query="&no_cache=1")
        ts = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        st = sorted(r.status for r in results)
        assert st == [200, 409, 409], results
        ok = next(r for r in results if r.status == 200)
        assert ndjson(ok)[-1]["type"] == "done", ok
        for r in results:
            if r.status == 409:
                assert "being built" in r.error_message, r
        assert m.request("DELETE", "/v1/templates/sec-conc").status == 204
        wait_no_build_sandbox(secd, 30)

    with attempt("templates", "build-over-quota", "a build by a tenant whose quota allows no more sandboxes"):
        a = secd.api
        r = a.request("PUT", "/v1/tenants/tplquota", body={"max_sandboxes": 1})
        assert r.status == 200, r
        r = a.request("POST", "/v1/tokens", body={"tenant": "tplquota", "description": "security suite"})
        assert r.status == 201, r
        q = su.TcpApi(fakenet, secd.port, r.json["token"])
        sb = q.request("POST", "/v1/sandboxes", body={"template": "minimal", "vcpus": 1, "memory_mib": 256})
        assert sb.status == 201, sb
        try:
            err = error_of(build_lines(q, "sec-quota", "FROM minimal\nRUN true\n", query="&no_cache=1"))
            assert "quota" in err.lower() or "max_sandboxes" in err, err
            sbs = [s for s in a.list() if s.get("tenant") == "tplquota"]
            assert len(sbs) == 1, sbs
            no_template(secd, "sec-quota")
        finally:
            q.request("DELETE", f"/v1/sandboxes/{sb.json['id']}")
