# SPDX-License-Identifier: Apache-2.0
"""airlock-oci import (issue 23): docker save archives and OCI layouts into
an Airlock template image, and hostile archives refused.

The archives are made here with tarfile/json/hashlib (no registry, no
docker); the ext4 image is read back with debugfs (read-only). Runs as root
(owners, setuid, security.capability need it); needs no daemon or VM.
"""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid

import pytest

from conftest import BUILD

OCI = os.path.join(BUILD, "airlock-oci")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (owners, setuid, mkfs)")


# ----------------------------------------------------------------- archives

def entry(name, kind="file", data=b"", mode=None, uid=0, gid=0, link="", xattrs=None, size=None):
    ti = tarfile.TarInfo(name)
    ti.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
               "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE}[kind]
    ti.mode = mode if mode is not None else (0o755 if kind == "dir" else 0o644)
    ti.uid, ti.gid, ti.mtime = uid, gid, 1700000000
    ti.linkname = link
    if kind == "chr":
        ti.devmajor, ti.devminor = 1, 3
    if xattrs:
        ti.pax_headers = {"SCHILY.xattr." + k: v for k, v in xattrs.items()}
    ti.size = len(data) if size is None else size
    return ti, data


def layer_tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for ti, data in entries:
            t.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return buf.getvalue()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def image_config(layers, arch="amd64", cmd=None):
    return json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin", "GREETING=hello world"], "WorkingDir": "/srv",
                   "User": "1000:1000", "Cmd": cmd if cmd is not None else ["/bin/tool", "--serve"],
                   "Entrypoint": None},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(raw) for raw in layers]},
    }).encode()


def outer_tar(files, path, compress=None):
    """files: [(name, bytes)] or (name, "->target") for a symlink member."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files:
            ti = tarfile.TarInfo(name)
            if isinstance(data, str):
                ti.type, ti.linkname = tarfile.SYMTYPE, data[2:]
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    if compress == "gzip":
        raw = gzip.compress(raw)
    with open(path, "wb") as f:
        f.write(raw)
    return path


def docker_save(layers, path, arch="amd64", missing=None, compress=None, links=None):
    """layers: raw layer tars (plain, as docker save has them); links: {i:
    target} makes layer i's layer.tar a symlink member to target."""
    cfg = image_config(layers, arch)
    files, names = [], []
    for i, raw in enumerate(layers):
        lid = sha(b"id%d" % i + raw)
        names.append(lid + "/layer.tar")
        if links and i in links:
            files.append((lid + "/layer.tar", "->" + links[i].replace("ID0", names[0].split("/")[0])))
        elif missing != i:
            files += [(lid + "/VERSION", b"1.0"), (lid + "/layer.tar", raw)]
    files.append((sha(cfg) + ".json", cfg))
    files.append(("manifest.json", json.dumps([{"Config": sha(cfg) + ".json", "RepoTags": ["t:latest"],
                                                 "Layers": names}]).encode()))
    return outer_tar(files, path, compress)


def compress_layer(raw, comp):
    if comp == "gzip":
        return gzip.compress(raw, mtime=0)
    if comp == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=raw, capture_output=True, check=True).stdout
    return raw


def oci_blobs(layers, arch="amd64", comp="gzip", corrupt=None):
    """The blobs of one image (gzip layers by default) and its manifest descriptor."""
    blobs = {}
    descs = []
    for i, raw in enumerate(layers):
        blob = compress_layer(raw, comp)
        d = sha(blob)
        if corrupt == i:
            blob = blob[:-8] + b"\0" * 8
        blobs[d] = blob
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+" + comp if comp else ""),
                      "digest": "sha256:" + d, "size": len(blob)})
    cfg = image_config(layers, arch)
    blobs[sha(cfg)] = cfg
    man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": "sha256:" + sha(cfg), "size": len(cfg)},
                      "layers": descs}).encode()
    blobs[sha(man)] = man
    return blobs, {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + sha(man),
                   "size": len(man), "platform": {"architecture": arch, "os": "linux"}}


def oci_layout(images, path, as_dir=False):
    """images: [(blobs, desc)]; a tar at path, or a directory."""
    blobs = {}
    for b, _ in images:
        blobs.update(b)
    index = json.dumps({"schemaVersion": 2, "manifests": [d for _, d in images]}).encode()
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
    files += [("blobs/sha256/" + d, b) for d, b in blobs.items()]
    if not as_dir:
        return outer_tar(files, path)
    for name, data in files:
        p = os.path.join(path, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    return path


# The image every positive test imports: three layers.
def good_layers():
    l1 = layer_tar([
        entry("./", "dir"),
        entry("etc/", "dir"), entry("etc/passwd", data=b"root:x:0:0::/root:/bin/sh\n"),
        entry("bin/", "dir"), entry("bin/tool", data=b"#!/bin/sh\necho tool\n", mode=0o4755),
        entry("bin/ping", data=b"ELF?", mode=0o755, xattrs={"security.capability": "\x01\x00\x00\x02\x00\x20\x00"
                                                                                   "\x00\x00\x00\x00\x00\x00\x00"
                                                                                   "\x00\x00\x00\x00\x00\x00"}),
        entry("home/user/", "dir", uid=1000, gid=1000, mode=0o750),
        entry("home/user/.profile", data=b"export A=1\n", mode=0o600, uid=1000, gid=1000),
        entry("data.txt", data=b"x", xattrs={"user.airlock": "hello", "trusted.skip": "no"}),
        entry("opq/", "dir"), entry("opq/a", data=b"a"), entry("opq/sub/", "dir"), entry("opq/sub/deep", data=b"d"),
        entry("gone", data=b"gone"), entry("gonedir/", "dir"), entry("gonedir/x", data=b"x"),
        entry("target", data=b"TARGET"),
        entry("replaced", data=b"was a file"),
    ])
    l2 = layer_tar([
        entry("opq/", "dir"),
        entry("opq/c", data=b"c from layer 2"),       # before the marker: must survive it
        entry("opq/.wh..wh..opq", data=b""),
        entry(".wh.gone"), entry(".wh.gonedir"),
        entry("hl", "hard", link="target"),
        entry("sl", "sym", link="/etc/passwd"),
        entry("up", "sym", link="../../../../etc/shadow"),
        entry("replaced/", "dir"), entry("replaced/inner", data=b"now a dir"),
        entry("fifo", "fifo", mode=0o600),
    ])
    l3 = layer_tar([
        entry("./etc/motd", data=b"layer 3\n"),
        entry("/srv/", "dir", uid=1000, gid=1000),
        entry("opq/.wh.c"),                                # removes layer 2's c
        entry("opq/d", data=b"d from layer 3"),
    ])
    return [l1, l2, l3]


# ----------------------------------------------------------------- running

@pytest.fixture
def work(tmp_path):
    return tmp_path


def run_import(src, out, *args):
    return subprocess.run([OCI, "import", *args, str(src), str(out)], capture_output=True, text=True, timeout=300)


def debugfs(img, cmd):
    r = subprocess.run(["debugfs", "-R", cmd, str(img)], capture_output=True, text=True, timeout=60)
    return r.stdout


def stat_field(img, path):
    out = debugfs(img, "stat " + path)
    assert "Inode:" in out, (path, out)
    return out


def check_image(out, label=None):
    img = os.path.join(out, "rootfs.ext4")
    assert sorted(os.listdir(out)) == ["config.json", "rootfs.ext4"]
    fsck = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert debugfs(img, "cat /etc/passwd") == "root:x:0:0::/root:/bin/sh\n"
    assert debugfs(img, "cat /etc/motd") == "layer 3\n"
    tool = stat_field(img, "/bin/tool")
    assert "Mode:  04755" in tool and "User:     0" in tool
    prof = stat_field(img, "/home/user/.profile")
    assert "Mode:  0600" in prof and "User:  1000   Group:  1000" in prof
    assert "Mode:  0750" in stat_field(img, "/home/user")
    # Directory times as the tar says, though entries were written into them after.
    assert "mtime: 0x6553f100" in stat_field(img, "/bin") and "mtime: 0x6553f100" in stat_field(img, "/home/user")
    assert "mtime: 0x6553f100" in stat_field(img, "/bin/tool")
    assert "User:  1000" in stat_field(img, "/srv")
    assert "hello" in debugfs(img, "ea_get /data.txt user.airlock")
    assert "trusted.skip" not in debugfs(img, "ea_list /data.txt")
    assert "security.capability" in debugfs(img, "ea_list /bin/ping")
    # Whiteouts and the opaque dir.
    root = debugfs(img, "ls /")
    assert " gone " not in root + " " and "gonedir" not in root
    opq = debugfs(img, "ls /opq").split()
    assert "a" not in opq and "sub" not in opq and "c" not in opq and "d" in opq
    assert debugfs(img, "cat /opq/d") == "d from layer 3"
    assert debugfs(img, "cat /replaced/inner") == "now a dir"
    # Links: the hard link shares the inode; symlinks keep their text.
    hl, tg = stat_field(img, "/hl"), stat_field(img, "/target")
    assert hl.split()[1] == tg.split()[1] and "Links: 2" in tg
    assert 'Fast link dest: "/etc/passwd"' in stat_field(img, "/sl")
    assert 'Fast link dest: "../../../../etc/shadow"' in stat_field(img, "/up")
    assert "Type: FIFO" in stat_field(img, "/fifo")
    if label:
        dump = subprocess.run(["dumpe2fs", "-h", img], capture_output=True, text=True).stdout
        assert "Filesystem volume name:   " + label in dump
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["env"] == ["PATH=/usr/bin:/bin", "GREETING=hello world"]
    assert cfg["workdir"] == "/srv" and cfg["user"] == "1000:1000"
    assert cfg["cmd"] == ["/bin/tool", "--serve"] and cfg["entrypoint"] is None
    assert cfg["architecture"] == "amd64" and cfg["layers"] == 3 and cfg["bytes"] > 0


def check_progress(stdout, layers=3):
    lines = [json.loads(line) for line in stdout.splitlines()]
    starts = [x for x in lines if x["phase"] == "layer"]
    assert [x["layer"] for x in starts] == list(range(1, layers + 1))
    assert all(x["layers"] == layers for x in starts)
    assert lines[-2] == {"phase": "mkfs"}
    assert lines[-1]["phase"] == "done" and lines[-1]["size_mib"] >= 64


def test_docker_save(work):
    src = docker_save(good_layers(), work / "img.tar")
    r = run_import(src, work / "out", "--label", "myimg")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    check_progress(r.stdout)
    check_image(work / "out", label="myimg")


def test_docker_save_duplicate_layer_symlink(work):
    """docker save stores a layer used twice once; the other is a symlink member."""
    layers = good_layers()
    layers.append(layers[0])
    src = docker_save(layers, work / "dup.tar", links={3: "../ID0/layer.tar"})
    r = run_import(src, work / "out")
    assert r.returncode == 0, r.stderr
    assert json.load(open(work / "out" / "config.json"))["layers"] == 4
    # A symlink member that leads out of the archive is no member at all.
    src = docker_save(layers, work / "out.tar", links={3: "../../../../etc/passwd"})
    r = run_import(src, work / "out2")
    check_refused(r, work / "out2", "layer 4 of 4", "missing from the archive")


def test_docker_save_gzip_whole(work):
    src = docker_save(good_layers(), work / "img.tar.gz", compress="gzip")
    os.mkdir(work / "out")  # an empty OUTDIR that is there is fine
    r = run_import(src, work / "out", "--label", "a-long-template-name")
    assert r.returncode == 0, r.stderr
    check_image(work / "out", label="a-long-template-")  # ext4 keeps 16 bytes


def test_oci_layout_tar_picks_amd64(work):
    arm = oci_blobs(good_layers()[:1], arch="arm64")
    amd = oci_blobs(good_layers())
    src = oci_layout([arm, amd], work / "oci.tar")
    r = run_import(src, work / "out")
    assert r.returncode == 0, r.stderr
    check_progress(r.stdout)
    check_image(work / "out")


def test_oci_layout_dir(work):
    src = oci_layout([oci_blobs(good_layers())], work / "layout", as_dir=True)
    r = run_import(src, work / "out")
    assert r.returncode == 0, r.stderr
    check_image(work / "out")


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs zstd")
def test_oci_layout_zstd_and_plain(work):
    blobs, desc = oci_blobs(good_layers(), comp="zstd")
    src = oci_layout([(blobs, desc)], work / "zstd", as_dir=True)
    r = run_import(src, work / "out")
    assert r.returncode == 0, r.stderr
    check_image(work / "out")
    src = oci_layout([oci_blobs(good_layers(), comp=None)], work / "plain.tar")
    r = run_import(src, work / "out2")
    assert r.returncode == 0, r.stderr
    check_image(work / "out2")


def test_progress_every_16_mib(work):
    big = os.urandom(1 << 20) * 40  # 40 MiB in one file
    src = docker_save([layer_tar([entry("big", data=big)])], work / "big.tar")
    r = run_import(src, work / "out")
    assert r.returncode == 0, r.stderr
    layer_lines = [json.loads(x) for x in r.stdout.splitlines() if '"layer"' in x]
    assert [x["bytes"] for x in layer_lines][:1] == [0] and len(layer_lines) >= 3
    assert json.load(open(work / "out" / "config.json"))["bytes"] == len(big)


def test_usage_errors(work):
    assert subprocess.run([OCI], capture_output=True).returncode == 2
    assert subprocess.run([OCI, "import", "only-one"], capture_output=True).returncode == 2
    assert subprocess.run([OCI, "import", "--max-bytes", "x", "a", "b"], capture_output=True).returncode == 2
    os.mkdir(work / "full")
    (work / "full" / "keep").write_text("mine")
    src = docker_save(good_layers(), work / "img.tar")
    r = run_import(src, work / "full")
    assert r.returncode == 1 and "not empty" in r.stderr
    assert os.listdir(work / "full") == ["keep"]


# ----------------------------------------------------------------- hostile

OUTSIDE = "/tmp/airlock-oci-outside-" + uuid.uuid4().hex[:8]


def hostile_layer(name):
    e = entry
    return {
        "dotdot": [e("../escape", data=b"x")],
        "abs_dotdot": [e("/../../" + OUTSIDE.lstrip("/") + "/abs", data=b"x")],
        "symlink_dir": [e("evil", "sym", link=OUTSIDE), e("evil/pwned", data=b"x")],
        "symlink_dir_rel": [e("a/", "dir"), e("a/evil", "sym", link="../../../../../.." + OUTSIDE),
                            e("a/evil/pwned", data=b"x")],
        "hardlink_out": [e("hl", "hard", link="../../etc/passwd")],
        "hardlink_symlink": [e("s", "sym", link="/etc/passwd"), e("h", "hard", link="s")],
        "hardlink_missing": [e("h", "hard", link="etc/shadow")],
        "chardev": [e("dev/", "dir"), e("dev/null", "chr")],
        "entries": [e("f%d" % i, data=b"x") for i in range(50)],
        "depth": deep_entries(),
    }[name]


def deep_entries():
    """Each entry at most 250 components deep, but each goes on where the
    last one ended through a symlink: a tree 1250 directories deep."""
    out, prev = [], ""
    for i in range(5):
        chain = "/".join(["d%d" % i] * 250)
        out.append(entry((prev + "/" if prev else "") + chain + "/", "dir"))
        out.append(entry("s%d" % i, "sym", link="/" + ((prev + "/") if prev else "") + chain))
        prev = "s%d" % i
    return out


HOSTILE = {
    "dotdot": ("../escape", '".." component'),
    "abs_dotdot": ("abs", '".." component'),
    "symlink_dir": ("evil/pwned", "leads nowhere in the image"),
    "symlink_dir_rel": ("a/evil/pwned", "leads nowhere in the image"),
    "hardlink_out": ('"hl": hard link target', '".." component'),
    "hardlink_symlink": ('"h"', "symbolic link"),
    "hardlink_missing": ('"h"', "does not exist"),
    "chardev": ("dev/null", "device nodes are not allowed"),
    "entries": ('entry "f', "more than 20 entries (--max-entries)"),
    "depth": ("s0/d1/d1", "deeper than 256 levels"),
}


def check_refused(r, out, *words):
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("airlock-oci: "), r.stderr
    print(lines[0])
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not os.path.exists(out) or os.listdir(out) == []
    assert not os.path.exists(OUTSIDE)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_layer(work, case):
    shutil.rmtree(OUTSIDE, ignore_errors=True)
    src = docker_save([good_layers()[0], layer_tar(hostile_layer(case))], work / "h.tar")
    r = run_import(src, work / "out", "--max-entries", "20" if case == "entries" else "1000")
    check_refused(r, work / "out", "layer 2 of 2", *HOSTILE[case])
    assert not os.path.exists("/etc/pwned")


def test_gzip_bomb(work):
    bomb = layer_tar([entry("zeros", data=b"\0" * (64 << 20))])
    src = oci_layout([oci_blobs([bomb])], work / "bomb.tar")
    assert os.path.getsize(src) < (1 << 20)
    r = run_import(src, work / "out", "--max-bytes", str(16 << 20))
    check_refused(r, work / "out", "zeros", "--max-bytes")


def test_bytes_across_layers(work):
    l1 = layer_tar([entry("a", data=b"\0" * (10 << 20))])
    l2 = layer_tar([entry("b", data=b"\0" * (10 << 20))])
    src = docker_save([l1, l2], work / "two.tar")
    r = run_import(src, work / "out", "--max-bytes", str(16 << 20))
    check_refused(r, work / "out", "layer 2 of 2", '"b"', "--max-bytes")


def test_digest_mismatch(work):
    src = oci_layout([oci_blobs(good_layers(), corrupt=1)], work / "bad.tar")
    r = run_import(src, work / "out")
    check_refused(r, work / "out", "layer 2 of 3", "digest mismatch")


def test_docker_layer_tampered(work):
    layers = good_layers()
    cfg_layers = list(layers)
    layers[2] = layers[2].replace(b"layer 3", b"LAYER 3")
    src = docker_save(cfg_layers, work / "t.tar")
    # Rewrite the archive with the tampered layer under the same name.
    with tarfile.open(src) as t:
        files = [(m.name, t.extractfile(m).read()) for m in t.getmembers()]
    files = [(n, d.replace(b"layer 3", b"LAYER 3") if n.endswith("layer.tar") else d) for n, d in files]
    outer_tar(files, src)
    r = run_import(src, work / "out")
    check_refused(r, work / "out", "layer 3 of 3", "digest mismatch")


def test_missing_layer(work):
    src = docker_save(good_layers(), work / "m.tar", missing=1)
    r = run_import(src, work / "out")
    check_refused(r, work / "out", "layer 2 of 3", "missing from the archive")


def test_non_amd64(work):
    src = oci_layout([oci_blobs(good_layers(), arch="arm64")], work / "arm.tar")
    r = run_import(src, work / "out")
    check_refused(r, work / "out", "arm64", "amd64")
    two = oci_layout([oci_blobs(good_layers(), arch="arm64"), oci_blobs(good_layers(), arch="s390x")],
                     work / "two.tar")
    r = run_import(two, work / "out2")
    check_refused(r, work / "out2", "no linux/amd64 image", "arm64, s390x")
    r = run_import(docker_save(good_layers(), work / "d.tar", arch="arm64"), work / "out3")
    check_refused(r, work / "out3", "arm64")


def test_control_characters_in_names(work):
    """The stderr line stays one line whatever an entry's name holds."""
    src = docker_save([layer_tar([entry("a\nb\x1b[31m/../x", data=b"x")])], work / "c.tar")
    r = run_import(src, work / "out")
    check_refused(r, work / "out", 'entry "a?b?[31m/../x"')


def test_not_an_archive(work):
    (work / "junk").write_bytes(os.urandom(4096))
    r = run_import(work / "junk", work / "out")
    check_refused(r, work / "out", "not a tar")


def test_sigterm_leaves_nothing(work):
    """airlockd cancels an import with SIGTERM: exit 1, OUTDIR removed."""
    zeros = b"\0" * (1 << 20)
    layer = layer_tar([entry("z%d" % i, data=zeros) for i in range(200)])
    src = oci_layout([oci_blobs([layer])], work / "slow.tar")
    p = subprocess.Popen([OCI, "import", str(src), str(work / "out")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    assert json.loads(first)["phase"] == "layer"
    p.terminate()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, (out, err)
    assert err.startswith("airlock-oci: ") and "stopped by a signal" in err
    assert not os.path.exists(work / "out")


def test_layout_dir_symlink_out(work):
    """A layout directory's blob that is a symlink out of it is not read."""
    blobs, desc = oci_blobs(good_layers())
    src = oci_layout([(blobs, desc)], work / "layout", as_dir=True)
    man = json.loads(blobs[desc["digest"][7:]])
    victim = os.path.join(src, "blobs", "sha256", man["layers"][0]["digest"][7:])
    os.unlink(victim)
    os.symlink("/etc/passwd", victim)
    r = run_import(src, work / "out")
    check_refused(r, work / "out", "layer 1 of 3", "missing from the archive")


def test_manifest_names_outside(work):
    cfg = image_config([])
    files = [("manifest.json", json.dumps([{"Config": "../../../etc/passwd", "Layers": []}]).encode()),
             (sha(cfg) + ".json", cfg)]
    r = run_import(outer_tar(files, work / "m.tar"), work / "out")
    check_refused(r, work / "out", "../../../etc/passwd", "not a name an image file has")
