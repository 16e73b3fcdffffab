# SPDX-License-Identifier: Apache-2.0
"""Imported templates through the daemon (docs/templates.md, "Importing"):
a docker save archive and an OCI layout uploaded to POST /v1/templates/import
(and by `airlock template import`) become templates whose sandboxes boot
and see the image's files, whiteouts, owners, Env, WorkingDir and User;
hostile archives are refused with an error line and leave nothing behind;
a tenant's import is its own; an upload over --max-template-upload-mib is
413. The archives are made here (tests/integration/test_oci_import.py's
helpers) around the host's static busybox, so the guest has a shell."""
import glob
import json
import os
import subprocess

import pytest

from apiutil import ListeningDaemon, TcpApi, free_port
from conftest import AIRLOCK
from test_oci_import import OUTSIDE, docker_save, entry, hostile_layer, layer_tar, oci_blobs, oci_layout

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

UPLOAD_MIB = 8


def busybox_layer():
    with open("/bin/busybox", "rb") as f:
        bb = f.read()
    links = [entry(f"bin/{a}", "sym", link="busybox") for a in ("sh", "cat", "ls", "id", "stat", "env")]
    return layer_tar([
        entry("bin/", "dir"), entry("bin/busybox", data=bb, mode=0o755), *links,
        entry("etc/", "dir"),
        entry("etc/passwd", data=b"root:x:0:0::/root:/bin/sh\napp:x:1234:1250::/srv:/bin/sh\n"),
        entry("etc/group", data=b"root:x:0:\napp:x:1250:\nstaff:x:50:\n"),
        entry("tmp/", "dir", mode=0o1777),
        entry("srv/", "dir", uid=1234, gid=1250),
        entry("srv/old.txt", data=b"old\n"),
        entry("srv/keep.txt", data=b"keep\n", mode=0o640, uid=1234, gid=1250),
    ])


def app_layer():
    return layer_tar([
        entry("srv/.wh.old.txt"),
        entry("srv/new.txt", data=b"new\n", mode=0o600, uid=1234, gid=1250),
        entry("srv/link", "sym", link="keep.txt"),
        entry("srv/hard", "hard", link="srv/keep.txt"),
    ])


def image_config_patch(path, user):
    """docker_save's config says User 1000:1000 and Cmd /bin/tool: the tests
    want the image's own account. Rewrites config and manifest in place."""
    import hashlib
    import io
    import tarfile
    with tarfile.open(path) as t:
        files = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
    cfg_name = next(m.name for m, _ in files if m.name.endswith(".json") and m.name != "manifest.json")
    cfg = json.loads(next(d for m, d in files if m.name == cfg_name))
    cfg["config"]["User"] = user
    cfg["config"]["WorkingDir"] = "/srv"
    raw = json.dumps(cfg).encode()
    new_name = hashlib.sha256(raw).hexdigest() + ".json"
    man = json.loads(next(d for m, d in files if m.name == "manifest.json"))
    man[0]["Config"] = new_name
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for m, d in files:
            if m.name == cfg_name:
                m, d = tarfile.TarInfo(new_name), raw
            elif m.name == "manifest.json":
                d = json.dumps(man).encode()
            if d is not None:
                m.size = len(d)
                t.addfile(m, io.BytesIO(d))
            else:
                t.addfile(m)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return path


@pytest.fixture(scope="module")
def td(tmp_path_factory):
    """One daemon for the module, with a TCP listener (tenant tokens) and a
    small upload limit."""
    class D(ListeningDaemon):
        def argv(self):
            return super().argv() + ["--max-template-upload-mib", str(UPLOAD_MIB)]
    d = D(tmp_path_factory.mktemp("airlockd-import"), free_port()).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture(scope="module")
def tokens(td):
    out = {}
    for tenant in ("ia", "ib"):
        r = td.api.request("POST", "/v1/tokens", body={"tenant": tenant, "description": "import test"})
        assert r.status == 201, r
        out[tenant] = TcpApi(td.port, r.json["token"])
    return out


def lines(r):
    assert r.status == 200, r
    assert r.headers.get("Content-Type", "").startswith("application/x-ndjson"), r.headers
    return [json.loads(x) for x in r.raw.splitlines()]


def import_api(api, name, path):
    with open(path, "rb") as f:
        data = f.read()
    return api.request("POST", f"/v1/templates/import?name={name}", raw=data,
                       headers={"Content-Type": "application/x-tar"}, timeout=300)


def leftovers(td):
    return glob.glob(os.path.join(td.state_dir, "templates", ".staging-*"))


def run_in(api, template, cmd, **kw):
    sb = api.request("POST", "/v1/sandboxes", body={"template": template})
    assert sb.status == 201, sb
    try:
        r = api.request("POST", f"/v1/sandboxes/{sb.json['id']}/exec", body={"cmd": cmd, **kw})
        assert r.status == 200, r
        return r.json
    finally:
        api.request("DELETE", f"/v1/sandboxes/{sb.json['id']}")


def test_docker_save_import(td, tmp_path):
    src = image_config_patch(docker_save([busybox_layer(), app_layer()], tmp_path / "img.tar"), "app")
    out = lines(import_api(td.api, "imp-docker", src))
    assert out[-1]["type"] == "done", out
    layers = [x for x in out if x["type"] == "progress" and x.get("phase") == "layer"]
    assert {x["layer"] for x in layers} == {1, 2} and layers[0]["layers"] == 2, out
    t = out[-1]["template"]
    assert t["name"] == "imp-docker" and t["source"] == "image" and t["tenant"] is None, t
    assert t["config"]["workdir"] == "/srv" and t["config"]["user"] == "app", t
    assert (t["config"]["uid"], t["config"]["gid"]) == (1234, 1250), t
    assert "GREETING=hello world" in t["config"]["env"], t
    got = td.api.request("GET", "/v1/templates/imp-docker")
    assert got.status == 200 and got.json["layers"] == 2, got
    # The sandbox: the image's user, workdir, env; the whiteout, owners, links.
    res = run_in(td.api, "imp-docker", ["/bin/sh", "-c",
                                         "id -u; id -g; pwd; echo \"$GREETING\"; ls /srv; cat hard; cat link; "
                                         "stat -c '%u:%g %a' new.txt keep.txt"])
    assert res["exit_code"] == 0, res
    out = res["stdout"].split("\n")
    assert out[:4] == ["1234", "1250", "/srv", "hello world"], res
    names = out[4:8]
    assert "old.txt" not in names and {"new.txt", "keep.txt", "link", "hard"} <= set(names), res
    assert out[8:10] == ["keep", "keep"], res
    assert out[10:12] == ["1234:1250 600", "1234:1250 640"], res
    # An exec naming its own user and cwd wins over the image's.
    res = run_in(td.api, "imp-docker", ["/bin/sh", "-c", "id -u; pwd"], uid=0, gid=0, cwd="/")
    assert res["stdout"] == "0\n/\n", res


def test_oci_layout_import_by_cli(td, tmp_path):
    src = oci_layout([oci_blobs([busybox_layer(), app_layer()])], tmp_path / "oci.tar")
    p = subprocess.run([AIRLOCK, "--socket", td.socket, "template", "import", "imp-oci", str(src)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "imp-oci", p.stdout
    assert "layer 2/2" in p.stderr and "ready" in p.stderr, p.stderr
    ls = subprocess.run([AIRLOCK, "--socket", td.socket, "template", "ls"], capture_output=True, text=True)
    row = next(x for x in ls.stdout.splitlines() if x.startswith("imp-oci "))
    assert "image" in row, ls.stdout
    # docker_save's config (User 1000:1000, WorkingDir /srv) is this image's too.
    res = run_in(td.api, "imp-oci", ["/bin/sh", "-c", "id -u; ls new.txt"])
    assert res["stdout"] == "1000\nnew.txt\n", res


@pytest.mark.parametrize("case,words", [
    ("symlink_dir", ["evil/pwned", "leads nowhere in the image"]),
    ("chardev", ["dev/null", "device nodes are not allowed"]),
    ("hardlink_out", ["hl", '".." component']),
    ("dotdot", ["../escape", '".." component']),
])
def test_hostile_archive_leaves_nothing(td, tmp_path, case, words):
    before = td.api.request("GET", "/v1/templates").json["templates"]
    src = docker_save([busybox_layer(), layer_tar(hostile_layer(case))], tmp_path / "h.tar")
    out = lines(import_api(td.api, "hostile", src))
    assert out[-1]["type"] == "error", out
    msg = out[-1]["error"]["message"]
    for w in words:
        assert w in msg, msg
    assert td.api.request("GET", "/v1/templates/hostile").status == 404
    assert td.api.request("GET", "/v1/templates").json["templates"] == before
    assert not leftovers(td) and not os.path.exists(OUTSIDE) and not os.path.exists("/etc/pwned")


def test_not_an_archive(td):
    r = td.api.request("POST", "/v1/templates/import?name=junk", raw=b"this is no tar\n" * 100)
    out = lines(r)
    assert out[-1]["type"] == "error" and "airlock-oci" in out[-1]["error"]["message"], out
    assert td.api.request("GET", "/v1/templates/junk").status == 404 and not leftovers(td)


def test_upload_over_the_limit(td):
    r = td.api.request("POST", "/v1/templates/import?name=huge", raw=b"\0" * ((UPLOAD_MIB + 1) << 20))
    assert r.status == 413 and "--max-template-upload-mib" in r.error_message, r
    assert td.api.request("GET", "/v1/templates/huge").status == 404 and not leftovers(td)


@pytest.mark.parametrize("query,status,needle", [
    ("", 400, "name"),
    ("?name=Bad/Name", 400, "name"),
    ("?name=airlock-build-0123", 400, "airlock-build-"),
    ("?name=minimal", 409, "built-in"),
])
def test_bad_names(td, query, status, needle):
    r = td.api.request("POST", "/v1/templates/import" + query, raw=b"x")
    assert r.status == status and needle in r.error_message, r


def test_tenant_import_is_its_own(td, tokens, tmp_path):
    a, b = tokens["ia"], tokens["ib"]
    src = docker_save([busybox_layer()], tmp_path / "t.tar")
    out = lines(import_api(a, "imp-tenant", src))
    assert out[-1]["type"] == "done" and out[-1]["template"]["tenant"] == "ia", out
    assert a.request("GET", "/v1/templates/imp-tenant").status == 200
    assert b.request("GET", "/v1/templates/imp-tenant").status == 404
    assert "imp-tenant" not in [t["name"] for t in b.request("GET", "/v1/templates").json["templates"]]
    r = b.request("POST", "/v1/sandboxes", body={"template": "imp-tenant"})
    assert r.status == 400 and "unknown template" in r.error_message, r
    # A refusal comes before the body is read: a small one (a large one may
    # meet the early answer as a broken pipe in the client).
    r = b.request("POST", "/v1/templates/import?name=imp-tenant", raw=b"x")
    assert r.status == 409 and "taken" in r.error_message, r
    r = a.request("POST", "/v1/templates/import?name=imp-x&tenant=ib", raw=b"x")
    assert r.status == 403, r
    # The operator sees it, with its owner; only the owner (or the operator) deletes it.
    assert td.api.request("GET", "/v1/templates/imp-tenant").json["tenant"] == "ia"
    assert b.request("DELETE", "/v1/templates/imp-tenant").status == 404
    assert a.request("DELETE", "/v1/templates/imp-tenant").status == 204
    assert td.api.request("GET", "/v1/templates/imp-tenant").status == 404
    assert not os.path.exists(os.path.join(td.state_dir, "templates", "imp-tenant"))


def test_delete_in_use(td, tmp_path):
    src = docker_save([busybox_layer()], tmp_path / "u.tar")
    assert lines(import_api(td.api, "imp-used", src))[-1]["type"] == "done"
    sb = td.api.request("POST", "/v1/sandboxes", body={"template": "imp-used"})
    assert sb.status == 201, sb
    r = td.api.request("DELETE", "/v1/templates/imp-used")
    assert r.status == 409 and "1 sandboxes" in r.error_message, r
    r = td.api.request("POST", "/v1/templates/import?name=imp-used", raw=b"x")
    assert r.status == 409 and "in use" in r.error_message, r
    assert td.api.request("GET", "/v1/templates/imp-used").json["in_use"]["sandboxes"] == 1
    td.api.request("DELETE", f"/v1/sandboxes/{sb.json['id']}")
    assert td.api.request("DELETE", "/v1/templates/imp-used").status == 204
    assert td.api.request("DELETE", "/v1/templates/minimal").status == 403
