# SPDX-License-Identifier: Apache-2.0
"""Files and archives through the API (docs/api.md, "Files"): a 200 MiB
round trip with the daemon's memory bounded, stat/list/mkdir/remove/rename
and their errors, tar archives both ways, path validation."""
import hashlib
import io
import os
import tarfile
import threading

import pytest

from apiutil import MIB, rss_kib
from conftest import UnixHTTPConnection

BIG = 200 * MIB
# The minimal template's root disk is ~56 MB: the big file goes to /dev/shm
# (tmpfs, half the guest's memory) of a sandbox with enough memory for it.
BIG_DIR = "/dev/shm"
SANDBOX_MEMORY_MIB = 768


@pytest.fixture(scope="module")
def sandbox(daemon):
    sb = daemon.api.create_ok(template="minimal", vcpus=1, memory_mib=SANDBOX_MEMORY_MIB)
    yield sb
    daemon.api.delete(sb["id"])


def base(sandbox):
    return f"/v1/sandboxes/{sandbox['id']}"


def check_error(r, status, code=None):
    assert r.status == status, r
    assert isinstance(r.json, dict) and set(r.json) == {"error"}, r
    if code:
        assert r.json["error"]["code"] == code, r
    assert r.json["error"]["message"].strip(), r


class RssSampler:
    """Samples a process's VmRSS in a thread until stopped."""

    def __init__(self, pid):
        self.pid = pid
        self.before = rss_kib(pid)
        self.peak = self.before
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_kib(self.pid))
            self.samples += 1

    def stop(self):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, rss_kib(self.pid))
        return (self.peak - self.before) / 1024


def make_big_file(path, size):
    """size bytes of a deterministic stream (SHA-256 in counter mode); its digest."""
    h = hashlib.sha256()
    block = bytearray()
    with open(path, "wb") as f:
        written, counter = 0, 0
        while written < size:
            # 1 MiB per step: 32768 digests of 32 bytes.
            block = b"".join(hashlib.sha256(b"airlock-%d" % (counter + i)).digest() for i in range(32768))
            counter += 32768
            block = block[:size - written]
            f.write(block)
            h.update(block)
            written += len(block)
    return h.hexdigest()


def upload_file(daemon, path, guest_path, size):
    conn = UnixHTTPConnection(daemon.socket, timeout=600)
    try:
        conn.putrequest("PUT", f"{guest_path}")
        conn.putheader("Content-Type", "application/octet-stream")
        conn.putheader("Content-Length", str(size))
        conn.endheaders()
        with open(path, "rb") as f:
            while True:
                chunk = f.read(MIB)
                if not chunk:
                    break
                conn.send(chunk)
        resp = conn.getresponse()
        from conftest import Response
        return Response(resp.status, dict(resp.getheaders()), resp.read(), "PUT", guest_path)
    finally:
        conn.close()


def download_sha256(daemon, url):
    conn = UnixHTTPConnection(daemon.socket, timeout=600)
    try:
        conn.request("GET", url)
        resp = conn.getresponse()
        assert resp.status == 200, (resp.status, resp.read()[:2000])
        assert resp.getheader("Content-Type", "").startswith("application/octet-stream")
        h, n = hashlib.sha256(), 0
        while True:
            chunk = resp.read(MIB)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
        return h.hexdigest(), n
    finally:
        conn.close()


# ------------------------------------------------------------------ big files

def test_big_file_round_trip(daemon, api, sandbox, tmp_path):
    local = tmp_path / "big.bin"
    digest = make_big_file(local, BIG)
    guest = f"{BIG_DIR}/big.bin"
    url = f"{base(sandbox)}/files?path={guest}&mode=0600"

    sampler = RssSampler(daemon.proc.pid)
    r = upload_file(daemon, local, url, BIG)
    up_growth = sampler.stop()
    assert r.status == 201, r
    assert r.json == {"path": guest, "size": BIG}, r
    os.unlink(local)

    st = api.request("GET", f"{base(sandbox)}/files/stat?path={guest}")
    assert st.status == 200 and st.json["size"] == BIG and st.json["type"] == "file", st
    assert st.json["mode"] & 0o7777 == 0o600, st
    r = api.exec_ok(sandbox["id"], ["sha256sum", guest])
    assert r["stdout"].split()[0] == digest, r

    sampler = RssSampler(daemon.proc.pid)
    got, n = download_sha256(daemon, f"{base(sandbox)}/files?path={guest}")
    down_growth = sampler.stop()
    assert n == BIG and got == digest, (n, got, digest)
    assert up_growth < 64, f"the daemon's RSS grew by {up_growth:.1f} MiB during a 200 MiB upload"
    assert down_growth < 64, f"the daemon's RSS grew by {down_growth:.1f} MiB during a 200 MiB download"
    print(f"files: RSS growth upload {up_growth:.1f} MiB, download {down_growth:.1f} MiB")
    r = api.request("POST", f"{base(sandbox)}/files/remove", body={"path": guest})
    assert r.status == 204, r


# ------------------------------------------------------------------ operations

def test_file_operations(api, sandbox):
    b = base(sandbox)
    post = lambda op, body: api.request("POST", f"{b}/files/{op}", body=body)

    # mkdir -p, then mkdir of an existing dir without parents: 409.
    assert post("mkdir", {"path": "/tmp/ops/a/b/c", "parents": True}).status == 201
    assert post("mkdir", {"path": "/tmp/ops/a/b/c", "parents": True}).status == 201  # -p: exists is fine
    check_error(post("mkdir", {"path": "/tmp/ops/a/b/c"}), 409, "conflict")
    check_error(post("mkdir", {"path": "/tmp/ops/missing/x"}), 404, "not_found")
    assert post("mkdir", {"path": "/tmp/ops/m700", "mode": 0o700}).status == 201

    r = api.request("PUT", f"{b}/files?path=/tmp/ops/a/f.txt", raw=b"hello\n")
    assert r.status == 201 and r.json == {"path": "/tmp/ops/a/f.txt", "size": 6}, r
    r = api.request("GET", f"{b}/files?path=/tmp/ops/a/f.txt")
    assert r.status == 200 and r.raw == b"hello\n", r
    r = api.request("PUT", f"{b}/files?path=/tmp/ops/a/empty", raw=b"")
    assert r.status == 201 and r.json["size"] == 0, r
    assert api.request("GET", f"{b}/files?path=/tmp/ops/a/empty").raw == b""

    st = api.request("GET", f"{b}/files/stat?path=/tmp/ops/a/f.txt")
    assert st.status == 200, st
    s = st.json
    assert s["name"] == "f.txt" and s["type"] == "file" and s["size"] == 6, s
    assert s["mode"] & 0o777 == 0o644 and s["uid"] == 0 and s["gid"] == 0 and s["mtime_ms"] > 0, s
    st = api.request("GET", f"{b}/files/stat?path=/tmp/ops/m700")
    assert st.json["type"] == "dir" and st.json["mode"] & 0o777 == 0o700, st
    api.exec_ok(sandbox["id"], ["ln", "-s", "f.txt", "/tmp/ops/a/link"])
    st = api.request("GET", f"{b}/files/stat?path=/tmp/ops/a/link")
    assert st.json["type"] == "symlink" and st.json["target"] == "f.txt", st

    ls = api.request("GET", f"{b}/files/list?path=/tmp/ops/a")
    assert ls.status == 200, ls
    assert {e["name"]: e["type"] for e in ls.json["entries"]} == \
        {"b": "dir", "f.txt": "file", "empty": "file", "link": "symlink"}, ls

    # rename, then the old name is gone.
    assert post("rename", {"path": "/tmp/ops/a/f.txt", "to": "/tmp/ops/g.txt"}).status == 204
    assert api.request("GET", f"{b}/files/stat?path=/tmp/ops/a/f.txt").status == 404  # body: see the end
    assert api.request("GET", f"{b}/files?path=/tmp/ops/g.txt").raw == b"hello\n"
    check_error(post("rename", {"path": "/tmp/ops/nope", "to": "/tmp/ops/x"}), 404, "not_found")

    # remove: a non-empty dir without recursive is 409, with it 204.
    check_error(post("remove", {"path": "/tmp/ops/a"}), 409, "conflict")
    assert post("remove", {"path": "/tmp/ops/a", "recursive": True}).status == 204
    check_error(api.request("GET", f"{b}/files/list?path=/tmp/ops/a"), 404, "not_found")
    check_error(post("remove", {"path": "/tmp/ops/a"}), 404, "not_found")
    assert post("remove", {"path": "/tmp/ops/g.txt"}).status == 204

    # Errors of the transfers.
    check_error(api.request("GET", f"{b}/files?path=/tmp/ops/nope"), 404, "not_found")
    check_error(api.request("GET", f"{b}/files?path=/tmp/ops"), 400, "invalid_argument")  # a dir
    check_error(api.request("PUT", f"{b}/files?path=/tmp/ops/no/dir/f", raw=b"x"), 404, "not_found")
    check_error(api.request("PUT", f"{b}/files?path=/tmp/ops", raw=b"x"), 409, "conflict")  # a dir
    check_error(api.request("GET", f"{b}/files/list?path=/tmp/ops/m700/../nope"), 404, "not_found")
    r = api.request("PUT", f"{b}/files?path=/tmp/ops/t", raw=b"x")
    assert r.status == 201
    check_error(api.request("GET", f"{b}/files/list?path=/tmp/ops/t"), 409, "conflict")  # enotdir
    assert post("remove", {"path": "/tmp/ops", "recursive": True}).status == 204
    # stat of a missing path: a 404 with the error body like every other.
    check_error(api.request("GET", f"{b}/files/stat?path=/tmp/ops"), 404, "not_found")


def test_archives(api, sandbox):
    b = base(sandbox)
    api.exec_ok(sandbox["id"], ["sh", "-c", "mkdir -p /tmp/tree/d1/d2 && echo top > /tmp/tree/top.txt && "
                                            "echo deep > /tmp/tree/d1/d2/deep.txt && ln -s d1/d2 /tmp/tree/link"])
    r = api.request("GET", f"{b}/archive?path=/tmp/tree")
    assert r.status == 200, r
    assert r.headers.get("Content-Type") == "application/x-tar", r.headers
    tar = tarfile.open(fileobj=io.BytesIO(r.raw))
    members = {m.name.rstrip("/"): m for m in tar.getmembers()}
    assert {"tree", "tree/top.txt", "tree/d1", "tree/d1/d2", "tree/d1/d2/deep.txt", "tree/link"} <= set(members), \
        sorted(members)
    assert members["tree/link"].issym() and members["tree/link"].linkname == "d1/d2"
    assert members["tree/d1/d2"].isdir()
    assert tar.extractfile(members["tree/d1/d2/deep.txt"]).read() == b"deep\n"

    # One file as an archive.
    r = api.request("GET", f"{b}/archive?path=/tmp/tree/top.txt")
    assert r.status == 200, r
    assert [m.name for m in tarfile.open(fileobj=io.BytesIO(r.raw)).getmembers()] == ["top.txt"]

    # PUT a tar built here into a directory.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in [("up/a.txt", b"alpha\n"), ("up/sub/b.txt", b"beta\n")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o640
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("up/l")
        link.type = tarfile.SYMTYPE
        link.linkname = "a.txt"
        t.addfile(link)
    assert api.request("POST", f"{b}/files/mkdir", body={"path": "/tmp/dest"}).status == 201
    r = api.request("PUT", f"{b}/archive?path=/tmp/dest", raw=buf.getvalue(),
                    headers={"Content-Type": "application/x-tar"})
    assert r.status == 204, r
    assert api.request("GET", f"{b}/files?path=/tmp/dest/up/sub/b.txt").raw == b"beta\n"
    st = api.request("GET", f"{b}/files/stat?path=/tmp/dest/up/a.txt").json
    assert st["mode"] & 0o777 == 0o640, st
    st = api.request("GET", f"{b}/files/stat?path=/tmp/dest/up/l").json
    assert st["type"] == "symlink" and st["target"] == "a.txt", st

    # Round trip of the tree into another place.
    tree = api.request("GET", f"{b}/archive?path=/tmp/tree").raw
    assert api.request("PUT", f"{b}/archive?path=/tmp/dest", raw=tree).status == 204
    assert api.request("GET", f"{b}/files?path=/tmp/dest/tree/d1/d2/deep.txt").raw == b"deep\n"

    # Errors.
    check_error(api.request("GET", f"{b}/archive?path=/tmp/nope"), 404, "not_found")
    check_error(api.request("PUT", f"{b}/archive?path=/tmp/nope", raw=tree), 404, "not_found")
    check_error(api.request("PUT", f"{b}/archive?path=/tmp/tree/top.txt", raw=tree), 409, "conflict")
    check_error(api.request("PUT", f"{b}/archive?path=/tmp/dest", raw=b"this is not a tar" * 64), 400,
                "invalid_argument")
    api.exec_ok(sandbox["id"], ["rm", "-rf", "/tmp/tree", "/tmp/dest"])


def test_path_validation(api, sandbox):
    b = base(sandbox)
    for q in ["", "?path=", "?path=relative/x", "?path=tmp", "?path=/" + "a" * 4096, "?other=/tmp"]:
        for method, route in [("GET", "files"), ("GET", "files/stat"), ("GET", "files/list"), ("GET", "archive")]:
            check_error(api.request(method, f"{b}/{route}{q}"), 400, "invalid_argument")
        for route in ("files", "archive"):
            check_error(api.request("PUT", f"{b}/{route}{q}", raw=b"x"), 400, "invalid_argument")
    check_error(api.request("PUT", f"{b}/files?path=/tmp/m&mode=999", raw=b"x"), 400, "invalid_argument")
    check_error(api.request("PUT", f"{b}/files?path=/tmp/m&mode=rw", raw=b"x"), 400, "invalid_argument")
    for op, body in [("mkdir", {}), ("mkdir", {"path": "relative"}), ("mkdir", {"path": 7}),
                     ("mkdir", {"path": "/tmp/x", "mode": "0755"}), ("mkdir", {"path": "/tmp/x", "parents": 1}),
                     ("remove", {"path": ""}), ("remove", {"path": "/tmp/x", "recursive": "yes"}),
                     ("rename", {"path": "/tmp/x"}), ("rename", {"path": "/tmp/x", "to": "y"}),
                     ("rename", {"to": "/tmp/y"})]:
        check_error(api.request("POST", f"{b}/files/{op}", body=body), 400, "invalid_argument")
    # An unknown sandbox is 404 before the path matters.
    check_error(api.request("GET", "/v1/sandboxes/sb-0123456789abcdef/files/stat?path=/"), 404, "not_found")
    check_error(api.request("PUT", "/v1/sandboxes/sb-0123456789abcdef/files?path=/x", raw=b"x"), 404, "not_found")
