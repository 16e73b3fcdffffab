# SPDX-License-Identifier: Apache-2.0
"""`airlock cp` (host <-> sandbox through tar streams) and `airlock fs`.

The host-side extractor's handling of hostile archives (../x, absolute
names, symlink escapes) is unit-tested in tests/unit/test-cli-tar.c: a real
guest cannot produce such an archive."""
import hashlib
import io
import json
import os
import stat
import tarfile

import pytest


def text(b):
    return b.decode("utf-8", "replace")


def skip_unless_files(api, sid):
    for path in (f"/v1/sandboxes/{sid}/files/stat?path=/", f"/v1/sandboxes/{sid}/archive?path=/etc/hostname"):
        r = api.request("GET", path)
        if r.status == 404 and "no such endpoint" in (r.error_message or ""):
            pytest.skip(f"airlockd does not implement GET {path.split('?')[0]} yet")


@pytest.fixture(scope="module")
def sid(sandbox):
    return sandbox["id"]


@pytest.fixture(autouse=True)
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_summary(root):
    """{relative path: (kind, mode, sha256 or link target)} of a tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", None, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), sha256(p))
    return out


def make_tree(base):
    root = os.path.join(base, "tree")
    os.makedirs(os.path.join(root, "sub", "deep"))
    os.chmod(os.path.join(root, "sub"), 0o750)
    with open(os.path.join(root, "a.txt"), "w") as f:
        f.write("hello\n")
    with open(os.path.join(root, "sub", "deep", "big.bin"), "wb") as f:
        f.write(os.urandom(5 << 20))
    with open(os.path.join(root, "sub", "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho run\n")
    os.chmod(os.path.join(root, "sub", "run.sh"), 0o755)
    with open(os.path.join(root, "sub", "n" * 150), "w") as f:
        f.write("a long name\n")
    with open(os.path.join(root, "empty"), "w"):
        pass
    os.symlink("a.txt", os.path.join(root, "link"))
    os.symlink("/etc/passwd", os.path.join(root, "sub", "abs-link"))
    return root


def guest(api, sid, script):
    r = api.exec_ok(sid, ["sh", "-c", script])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def test_tree_round_trip(cli, api, sid, tmp_path):
    skip_unless_files(api, sid)
    src = make_tree(str(tmp_path))
    guest(api, sid, "rm -rf /tmp/rt && mkdir -p /tmp/rt")
    # Into an existing directory: lands as /tmp/rt/tree.
    p = cli("cp", src, f"{sid}:/tmp/rt")
    assert p.returncode == 0, text(p.stderr)
    sums = guest(api, sid, "cd /tmp/rt/tree && sha256sum sub/deep/big.bin a.txt && readlink link && stat -c %a sub/run.sh")
    lines = sums.splitlines()
    assert lines[0].split()[0] == sha256(os.path.join(src, "sub", "deep", "big.bin"))
    assert lines[2] == "a.txt" and lines[3] == "755", sums

    # Back to the host, into an existing directory.
    out = tmp_path / "back"
    out.mkdir()
    p = cli("cp", f"{sid}:/tmp/rt/tree", str(out))
    assert p.returncode == 0, text(p.stderr)
    assert tree_summary(str(out / "tree")) == tree_summary(src)

    # To a new name on both sides.
    p = cli("cp", src, f"{sid}:/tmp/rt/renamed")
    assert p.returncode == 0, text(p.stderr)
    p = cli("cp", f"{sid}:/tmp/rt/renamed", str(tmp_path / "again"))
    assert p.returncode == 0, text(p.stderr)
    assert tree_summary(str(tmp_path / "again")) == tree_summary(src)


def test_single_file(cli, api, sid, tmp_path):
    skip_unless_files(api, sid)
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(300000))
    os.chmod(f, 0o640)
    guest(api, sid, "rm -rf /tmp/sf && mkdir -p /tmp/sf")
    assert cli("cp", str(f), f"{sid}:/tmp/sf/").returncode == 0
    assert cli("cp", str(f), f"{sid}:/tmp/sf/other.bin").returncode == 0
    assert guest(api, sid, "stat -c %a /tmp/sf/data.bin").strip() == "640"
    d = tmp_path / "out"
    d.mkdir()
    p = cli("cp", f"{sid}:/tmp/sf/data.bin", str(d))
    assert p.returncode == 0, text(p.stderr)
    assert sha256(d / "data.bin") == sha256(f)
    assert stat.S_IMODE(os.stat(d / "data.bin").st_mode) == 0o640
    p = cli("cp", f"{sid}:/tmp/sf/other.bin", str(d / "renamed.bin"))
    assert p.returncode == 0, text(p.stderr)
    assert sha256(d / "renamed.bin") == sha256(f)
    # Overwrites an existing file.
    p = cli("cp", f"{sid}:/tmp/sf/other.bin", str(d / "renamed.bin"))
    assert p.returncode == 0, text(p.stderr)


def test_tar_streams_on_stdin_and_stdout(cli, api, sid, tmp_path):
    skip_unless_files(api, sid)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        data = b"from a tar on stdin\n"
        ti = tarfile.TarInfo("streamed/hello.txt")
        ti.size = len(data)
        ti.mode = 0o600
        tf.addfile(ti, io.BytesIO(data))
    guest(api, sid, "rm -rf /tmp/ts && mkdir -p /tmp/ts")
    p = cli("cp", "-", f"{sid}:/tmp/ts", input=buf.getvalue())
    assert p.returncode == 0, text(p.stderr)
    assert guest(api, sid, "cat /tmp/ts/streamed/hello.txt") == "from a tar on stdin\n"
    p = cli("cp", f"{sid}:/tmp/ts/streamed", "-")
    assert p.returncode == 0, text(p.stderr)
    with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tf:
        names = tf.getnames()
        assert any(n.rstrip("/").endswith("streamed/hello.txt") for n in names), names
        m = [x for x in tf.getmembers() if x.name.endswith("hello.txt")][0]
        assert tf.extractfile(m).read() == b"from a tar on stdin\n"


def evil_tar(names):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name in names:
            ti = tarfile.TarInfo(name)
            ti.size = 4
            tf.addfile(ti, io.BytesIO(b"evil"))
    return buf.getvalue()


@pytest.mark.parametrize("name", ["../x", "/tmp/evil-abs/x", "a/../../x"])
def test_hostile_tar_into_the_sandbox_is_refused(cli, api, sid, name):
    skip_unless_files(api, sid)
    guest(api, sid, "rm -rf /tmp/ev /tmp/x /tmp/evil-abs && mkdir -p /tmp/ev/in /tmp/evil-abs")
    p = cli("cp", "-", f"{sid}:/tmp/ev/in", input=evil_tar([name]))
    # The guest may refuse the archive or, like GNU tar, strip the leading
    # "/" and ".." parts; either way nothing lands outside the destination.
    assert p.returncode in (0, 125), (p.returncode, text(p.stderr))
    assert p.returncode == 0 or p.stderr
    out = guest(api, sid, "test -e /tmp/x && echo ESCAPED; test -e /tmp/evil-abs/x && echo ESCAPED; "
                          "test -e /x && echo ESCAPED; true")
    assert "ESCAPED" not in out, out


def test_extraction_never_follows_symlinks_in_the_destination(cli, api, sid, tmp_path):
    """A symlink already in the host destination is replaced, not written through."""
    skip_unless_files(api, sid)
    guest(api, sid, "rm -rf /tmp/sl && mkdir -p /tmp/sl/d && echo guest > /tmp/sl/d/f")
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    dest = tmp_path / "dest"
    (dest / "d").mkdir(parents=True)
    os.symlink(str(outside), dest / "d" / "f")
    p = cli("cp", f"{sid}:/tmp/sl/d", str(dest))
    assert p.returncode == 0, text(p.stderr)
    assert outside.read_text() == "precious\n"
    assert not os.path.islink(dest / "d" / "f")
    assert (dest / "d" / "f").read_text() == "guest\n"


def test_cp_errors(cli, api, sid, tmp_path):
    skip_unless_files(api, sid)
    p = cli("cp", f"{sid}:/no/such/path", str(tmp_path))
    assert p.returncode == 125 and b"/no/such/path" in p.stderr, text(p.stderr)
    p = cli("cp", str(tmp_path / "missing"), f"{sid}:/tmp")
    assert p.returncode == 125 and b"missing" in p.stderr
    for args in (["cp", "a", "b"], ["cp", f"{sid}:relative", "x"], ["cp", "onlyone"]):
        assert cli(*args).returncode == 2, args


# ------------------------------------------------------------ fs

def test_fs_verbs(cli, api, sid):
    skip_unless_files(api, sid)
    guest(api, sid, "rm -rf /tmp/fsv")
    p = cli("fs", "mkdir", "-p", sid, "/tmp/fsv/a/b")
    assert p.returncode == 0, text(p.stderr)
    guest(api, sid, "echo 12345 > /tmp/fsv/a/file && ln -s file /tmp/fsv/a/lnk")
    p = cli("fs", "ls", sid, "/tmp/fsv/a")
    assert p.returncode == 0, text(p.stderr)
    out = text(p.stdout)
    assert "file" in out and "lnk -> file" in out and out.count("\n") == 3, out
    p = cli("fs", "ls", sid, "/tmp/fsv/a", "--json")
    names = {e["name"]: e for e in json.loads(p.stdout)}
    assert set(names) == {"b", "file", "lnk"}
    assert names["file"]["size"] == 6
    p = cli("fs", "stat", "--json", sid, "/tmp/fsv/a/file")
    assert json.loads(p.stdout)["size"] == 6
    assert cli("fs", "mv", sid, "/tmp/fsv/a/file", "/tmp/fsv/moved").returncode == 0
    assert guest(api, sid, "cat /tmp/fsv/moved") == "12345\n"
    p = cli("fs", "rm", sid, "/tmp/fsv/a")
    assert p.returncode == 125, "a non-empty directory needs -r"
    assert cli("fs", "rm", "-r", sid, "/tmp/fsv/a").returncode == 0
    p = cli("fs", "stat", sid, "/tmp/fsv/a")
    assert p.returncode == 125 and p.stderr
    assert cli("fs", "frob", sid, "/tmp").returncode == 2
    assert cli("fs", "mkdir", sid).returncode == 2
