# SPDX-License-Identifier: Apache-2.0
"""E2B's filesystem over raw HTTP (docs/e2b.md "Files (envd)"): the unary
Connect RPCs of filesystem.Filesystem and /files, with what the SDK cannot
show: Connect error bodies and statuses, paths with NUL or over 4096 bytes,
a wrong access token, multipart bodies, an upload over --max-file-bytes that
leaves nothing behind. One daemon and one `base` sandbox for the module."""
import http.client
import json
import os

import pytest

from apiutil import MIB, free_port
from e2butil import E2bDaemon, basic_auth, e2b_daemon_stop, envd_token

MAX_FILE_BYTES = 2 * MIB
FS = "/e2b/envd/filesystem.Filesystem/"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = E2bDaemon(tmp_path_factory.mktemp("airlockd-e2b-fs"), free_port(),
                  extra_args=["--max-file-bytes", str(MAX_FILE_BYTES)]).start()
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=300)
    conn.request("POST", "/v1/sandboxes", body=json.dumps({"template": "base", "vcpus": 1}),
                 headers={"Authorization": f"Bearer {d.key}", "Content-Type": "application/json"})
    r = conn.getresponse()
    sb = json.loads(r.read())
    assert r.status == 201, sb
    yield d, sb["id"], envd_token(d, sb)
    d.api.delete(sb["id"])
    e2b_daemon_stop(d)


def call(env, method, path, body=b"", headers=None, token=None):
    d, sid, tok = env
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
    h = {"E2b-Sandbox-Id": sid, "X-Access-Token": token or tok}
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read()
    return r.status, r.getheader("Content-Type"), data


def rpc(env, name, msg, user=None, token=None):
    headers = {"Content-Type": "application/json"}
    if user:
        headers.update(basic_auth(user))
    status, _, data = call(env, "POST", FS + name, json.dumps(msg).encode(), headers, token)
    return status, json.loads(data) if data else None


def test_stat_entry_info(env):
    status, body = rpc(env, "Stat", {"path": "/etc/passwd"})
    assert status == 200, body
    e = body["entry"]
    assert e["name"] == "passwd" and e["path"] == "/etc/passwd" and e["type"] == "FILE_TYPE_FILE"
    assert isinstance(e["size"], str) and int(e["size"]) > 0
    assert e["permissions"] == "-rw-r--r--" and e["mode"] == 0o644
    assert e["owner"] == "root" and e["group"] == "root"
    assert e["modifiedTime"].endswith("Z")
    status, body = rpc(env, "Stat", {"path": "/home/user"})
    assert body["entry"]["type"] == "FILE_TYPE_DIRECTORY" and body["entry"]["owner"] == "user"


def test_missing_is_not_found(env):
    for name in ("Stat", "ListDir"):
        status, body = rpc(env, name, {"path": "/no/such/thing"})
        assert status == 404 and body["code"] == "not_found", (name, body)
    status, body = rpc(env, "Move", {"source": "/no/such", "destination": "/tmp/x"})
    assert status == 404 and body["code"] == "not_found", body
    status, ct, data = call(env, "GET", "/e2b/envd/files?path=/no/such/file")
    assert status == 404 and json.loads(data)["code"] == "not_found", data


def test_bad_paths_refused(env):
    status, body = rpc(env, "Stat", {"path": "/tmp/a\0b"})
    assert status == 400 and body["code"] == "invalid_argument", body
    status, body = rpc(env, "Stat", {"path": "/" + "a" * 4100})
    assert status == 400 and body["code"] == "invalid_argument", body
    status, _, data = call(env, "GET", "/e2b/envd/files?path=/" + "a" * 4100)
    assert status in (400, 414), data


def test_wrong_token(env):
    status, body = rpc(env, "Stat", {"path": "/"}, token="ea_" + "0" * 64)
    assert status == 401 and body["code"] == "unauthenticated", body
    status, _, data = call(env, "GET", "/e2b/envd/files?path=/etc/passwd", token="ea_" + "0" * 64)
    assert status == 401, data


def test_make_dir_list_move_remove(env):
    status, body = rpc(env, "MakeDir", {"path": "rawdir/a/b"})
    assert status == 200 and body["entry"]["path"] == "/home/user/rawdir/a/b", body
    assert body["entry"]["owner"] == "user"
    status, body = rpc(env, "MakeDir", {"path": "rawdir/a/b"})
    assert status == 409 and body["code"] == "already_exists", body
    status, body = rpc(env, "ListDir", {"path": "/home/user/rawdir", "depth": 1})
    assert [e["path"] for e in body["entries"]] == ["/home/user/rawdir/a"], body
    status, body = rpc(env, "ListDir", {"path": "~/rawdir", "depth": 2})
    assert sorted(e["path"] for e in body["entries"]) == ["/home/user/rawdir/a", "/home/user/rawdir/a/b"], body
    # depth first in lexical order, as envd's walk
    for p in ("rawdir/c/z", "rawdir/b", "rawdir/c/y"):
        rpc(env, "MakeDir", {"path": p})
    status, body = rpc(env, "ListDir", {"path": "rawdir", "depth": 3})
    assert [e["path"][len("/home/user/rawdir/"):] for e in body["entries"]] == ["a", "a/b", "b", "c", "c/y", "c/z"]
    status, body = rpc(env, "ListDir", {"path": "rawdir", "depth": 0})  # proto's default: 1
    assert [e["name"] for e in body["entries"]] == ["a", "b", "c"], body
    status, body = rpc(env, "ListDir", {"path": "rawdir", "depth": 65})
    assert status == 400, body
    status, body = rpc(env, "Move", {"source": "rawdir/a", "destination": "rawdir/moved"})
    assert status == 200 and body["entry"]["path"] == "/home/user/rawdir/moved", body
    status, body = rpc(env, "Remove", {"path": "rawdir"})
    assert status == 200, body
    status, body = rpc(env, "Remove", {"path": "rawdir"})  # envd's RemoveAll: gone already is fine
    assert status == 200, body
    status, body = rpc(env, "Stat", {"path": "rawdir"})
    assert status == 404, body
    status, body = rpc(env, "ListDir", {"path": "/etc/passwd"})
    assert status == 400, body
    status, body = rpc(env, "MakeDir", {"path": "/etc/passwd"})
    assert status == 400 and body["code"] == "invalid_argument", body


def test_list_dir_follows_a_symlink(env):
    d, sid, _ = env
    d.api.exec_ok(sid, ["sh", "-c", "mkdir -p /tmp/real && touch /tmp/real/in && ln -sfn /tmp/real /tmp/link"])
    status, body = rpc(env, "ListDir", {"path": "/tmp/link"})
    assert status == 200 and [e["path"] for e in body["entries"]] == ["/tmp/link/in"], body
    status, body = rpc(env, "Stat", {"path": "/tmp/link"})
    assert body["entry"]["type"] == "FILE_TYPE_SYMLINK" and body["entry"]["symlinkTarget"] == "/tmp/real", body
    assert body["entry"]["permissions"] == "Lrwxrwxrwx", body


def test_octet_stream_upload_and_download(env):
    data = os.urandom(300 * 1024)
    status, ct, out = call(env, "POST", "/e2b/envd/files?path=up/nested/blob.bin", data,
                           {"Content-Type": "application/octet-stream"})
    assert status == 200, out
    assert json.loads(out) == [{"name": "blob.bin", "type": "file", "path": "/home/user/up/nested/blob.bin"}]
    status, ct, out = call(env, "GET", "/e2b/envd/files?path=/home/user/up/nested/blob.bin")
    assert status == 200 and ct == "application/octet-stream" and out == data
    status, body = rpc(env, "Stat", {"path": "up/nested/blob.bin"})
    assert body["entry"]["owner"] == "user" and body["entry"]["group"] == "user", body
    status, body = rpc(env, "Stat", {"path": "up/nested"})
    assert body["entry"]["owner"] == "user", body


def test_multipart_upload(env):
    boundary = "airlockboundary42"
    parts = [("mp/one.txt", b"one\n"), ("/tmp/mp-two.txt", b"two\r\n--not-a-boundary\r\n"), ("mp/empty", b"")]
    body = b""
    for name, content in parts:
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                 f"Content-Type: application/octet-stream\r\n\r\n").encode() + content + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    status, ct, out = call(env, "POST", "/e2b/envd/files", body,
                           {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert status == 200, out
    assert [e["path"] for e in json.loads(out)] == ["/home/user/mp/one.txt", "/tmp/mp-two.txt",
                                                     "/home/user/mp/empty"]
    for name, content in parts:
        status, ct, out = call(env, "GET", "/e2b/envd/files?path=" + name)
        assert status == 200 and out == content, (name, out)


def test_upload_over_limit_leaves_nothing(env):
    # declared too large: refused before the body is read (so none is sent here)
    d, sid, tok = env
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
    conn.putrequest("POST", "/e2b/envd/files?path=/tmp/too-big")
    for k, v in {"E2b-Sandbox-Id": sid, "X-Access-Token": tok, "Content-Type": "application/octet-stream",
                 "Content-Length": str(MAX_FILE_BYTES + 1)}.items():
        conn.putheader(k, v)
    conn.endheaders()
    r = conn.getresponse()
    out = r.read()
    assert r.status in (400, 413), out
    conn.close()
    status, body = rpc(env, "Stat", {"path": "/tmp/too-big"})
    assert status == 404, body

    # chunked: the limit is found while the body streams
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
    conn.putrequest("POST", "/e2b/envd/files?path=/tmp/too-big-chunked")
    for k, v in {"E2b-Sandbox-Id": sid, "X-Access-Token": tok, "Content-Type": "application/octet-stream",
                 "Transfer-Encoding": "chunked"}.items():
        conn.putheader(k, v)
    conn.endheaders()
    chunk = b"y" * (256 * 1024)
    for _ in range(MAX_FILE_BYTES // len(chunk) + 2):
        conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    conn.send(b"0\r\n\r\n")
    r = conn.getresponse()
    out = r.read()
    assert r.status in (400, 413), out
    status, body = rpc(env, "ListDir", {"path": "/tmp"})
    names = [e["name"] for e in body["entries"]]
    assert not [n for n in names if "too-big" in n], names


def test_gzip_upload_refused(env):
    status, ct, out = call(env, "POST", "/e2b/envd/files?path=/tmp/gz", b"\x1f\x8b",
                           {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
    assert status in (400, 415), out
    assert "gzip" in json.loads(out)["message"]


def test_metadata_upload_refused(env):
    status, ct, out = call(env, "POST", "/e2b/envd/files?path=/tmp/meta", b"m",
                           {"Content-Type": "application/octet-stream", "X-Metadata-Owner": "me"})
    assert status == 400, out
    assert "X-Metadata" in json.loads(out)["message"]
    status, body = rpc(env, "Stat", {"path": "/tmp/meta"})
    assert status == 404, body


def test_unknown_user(env):
    status, body = rpc(env, "Stat", {"path": "/"}, user="nosuchuser")
    assert status == 400 and "nosuchuser" in body["message"], body
    status, body = rpc(env, "Stat", {"path": "~"}, user="root")
    assert status == 200 and body["entry"]["path"] == "/root", body


def test_parents_created_as_root_given_to_the_user(env):
    # /opt is root's: E2B's envd creates missing parents as root and gives them to the user
    status, ct, out = call(env, "POST", "/e2b/envd/files?path=/opt/e2bnew/deeper/f.txt", b"f",
                           {"Content-Type": "application/octet-stream"})
    assert status == 200, out
    for p in ("/opt/e2bnew", "/opt/e2bnew/deeper", "/opt/e2bnew/deeper/f.txt"):
        status, body = rpc(env, "Stat", {"path": p})
        assert body["entry"]["owner"] == "user", body
    status, body = rpc(env, "Stat", {"path": "/opt"})
    assert body["entry"]["owner"] == "root", body
    status, body = rpc(env, "MakeDir", {"path": "/opt/e2bmade/x"})
    assert status == 200 and body["entry"]["owner"] == "user", body


def multipart_body(boundary, parts):
    body = b""
    for field, name, content in parts:
        disp = f"form-data; name=\"{field}\"" + (f"; filename=\"{name}\"" if name is not None else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + content + b"\r\n"
    return body + f"--{boundary}--\r\n".encode()


def test_multipart_as_envd(env):
    b = "b0undary"
    ct = {"Content-Type": f"multipart/form-data; boundary={b}"}
    # only parts named "file" are files
    body = multipart_body(b, [("other", None, b"ignored"), ("file", "/tmp/mp-only.txt", b"kept")])
    status, _, out = call(env, "POST", "/e2b/envd/files", body, ct)
    assert status == 200 and [e["path"] for e in json.loads(out)] == ["/tmp/mp-only.txt"], out
    # ?path= wins over the part's filename
    body = multipart_body(b, [("file", "ignored-name.txt", b"q")])
    status, _, out = call(env, "POST", "/e2b/envd/files?path=/tmp/mp-query.txt", body, ct)
    assert status == 200 and json.loads(out)[0]["path"] == "/tmp/mp-query.txt", out
    status, _, out = call(env, "GET", "/e2b/envd/files?path=/tmp/mp-query.txt")
    assert out == b"q"
    # one path twice in one upload
    body = multipart_body(b, [("file", "/tmp/mp-dup", b"1"), ("file", "/tmp/mp-dup", b"2")])
    status, _, out = call(env, "POST", "/e2b/envd/files", body, ct)
    assert status == 400 and "once" in json.loads(out)["message"], out
    # malformed: no closing boundary
    status, _, out = call(env, "POST", "/e2b/envd/files", f"--{b}\r\nContent-Disp".encode(), ct)
    assert status == 400, out


def test_read_follows_symlinks(env):
    d, sid, _ = env
    d.api.exec_ok(sid, ["sh", "-c", "mkdir -p /tmp/sl && echo target > /tmp/sl/t && ln -sfn t /tmp/sl/l1 && "
                                    "ln -sfn /tmp/sl/l1 /tmp/sl/l2 && ln -sfn nowhere /tmp/sl/dangling && "
                                    "ln -sfn /tmp/sl /tmp/sl-dir && ln -sfn loop /tmp/sl/loop"])
    status, _, out = call(env, "GET", "/e2b/envd/files?path=/tmp/sl/l2")
    assert status == 200 and out == b"target\n", out
    status, _, out = call(env, "GET", "/e2b/envd/files?path=/tmp/sl/dangling")
    assert status == 404, out
    status, _, out = call(env, "GET", "/e2b/envd/files?path=/tmp/sl-dir")
    assert status == 400 and "directory" in json.loads(out)["message"], out
    status, _, out = call(env, "GET", "/e2b/envd/files?path=/tmp/sl/loop")
    assert status == 400 and "symlinks" in json.loads(out)["message"], out
