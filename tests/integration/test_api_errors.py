# SPDX-License-Identifier: Apache-2.0
"""Every bad request gets its 4xx error in the documented shape, and changes
nothing: no record, no process, no file (docs/api.md)."""
import json

import pytest

MIB = 1024 * 1024
UNKNOWN_ID = "sb-0123456789abcdef"


def snapshot(daemon):
    """What a failed request must not change."""
    api = daemon.api
    return {
        "all": [(s["id"], s["state"], s["updated_at"]) for s in api.list(all=True)],
        "dirs": daemon.sandbox_dirs(),
        "qemus": sorted(daemon.qemus()),
    }


def check_error(r, status, code):
    assert r.status == status, r
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    assert isinstance(r.json, dict) and set(r.json) == {"error"}, r
    assert r.json["error"]["code"] == code, r
    msg = r.json["error"]["message"]
    assert isinstance(msg, str) and msg.strip(), r


@pytest.fixture(scope="module")
def deleted_sandbox(daemon):
    sb = daemon.api.create_ok()
    daemon.api.delete_ok(sb["id"])
    return sb


def create_raw(api, raw, content_type="application/json"):
    headers = {"Content-Type": content_type} if content_type else {}
    return api.request("POST", "/v1/sandboxes", raw=raw, headers=headers)


CREATE_BAD = [
    ("malformed-json", b'{"vcpus": ', "JSON"),
    ("not-an-object", b'["minimal"]', None),
    ("trailing-garbage", b'{"vcpus": 1} x', None),
    ("unknown-field", b'{"template": "minimal", "colour": "blue"}', "colour"),
    ("vcpus-string", b'{"vcpus": "2"}', "vcpus"),
    ("vcpus-float", b'{"vcpus": 1.5}', "vcpus"),
    ("env-not-object", b'{"env": ["A=1"]}', "env"),
    ("env-value-number", b'{"env": {"A": 1}}', "env"),
    ("env-bad-name", b'{"env": {"1A": "x"}}', "env"),
    ("metadata-not-object", b'{"metadata": "x"}', "metadata"),
    ("template-not-string", b'{"template": 7}', "template"),
    ("template-path", b'{"template": "../../etc"}', "template"),
    ("unknown-template", b'{"template": "no-such-template"}', "no-such-template"),
    ("absurd-vcpus", b'{"vcpus": 999}', "vcpus"),
    ("zero-vcpus", b'{"vcpus": 0}', "vcpus"),
    ("negative-vcpus", b'{"vcpus": -1}', "vcpus"),
    ("absurd-memory", b'{"memory_mib": 99999999}', "memory_mib"),
    ("tiny-memory", b'{"memory_mib": 1}', "memory_mib"),
    ("duplicate-key", b'{"vcpus": 1, "vcpus": 2}', None),
    ("not-utf8", b'{"template": "\xff"}', None),
]


@pytest.mark.parametrize("name,raw,mention", CREATE_BAD, ids=[c[0] for c in CREATE_BAD])
def test_bad_create_is_400_and_changes_nothing(daemon, api, name, raw, mention):
    before = snapshot(daemon)
    r = create_raw(api, raw)
    check_error(r, 400, "invalid_argument")
    if mention:
        assert mention.lower() in r.error_message.lower(), r
    assert snapshot(daemon) == before


def test_oversize_create_body_is_413(daemon, api):
    before = snapshot(daemon)
    body = json.dumps({"metadata": {"k": "v" * (MIB + 10)}}).encode()
    r = create_raw(api, body)
    check_error(r, 413, "payload_too_large")
    assert snapshot(daemon) == before


def test_oversize_exec_body_is_413(daemon, api, sandbox):
    before = snapshot(daemon)
    body = json.dumps({"cmd": ["cat"], "stdin": "x" * (16 * MIB + 10)}).encode()
    r = api.request("POST", f"/v1/sandboxes/{sandbox['id']}/exec", raw=body,
                    headers={"Content-Type": "application/json"})
    check_error(r, 413, "payload_too_large")
    assert snapshot(daemon) == before
    # The sandbox is unaffected.
    assert api.exec_ok(sandbox["id"], ["echo", "ok"])["stdout"] == "ok\n"


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
def test_bad_content_type_is_415(daemon, api, ctype):
    before = snapshot(daemon)
    r = create_raw(api, b"{}", content_type=ctype)
    check_error(r, 415, "unsupported_media_type")
    assert snapshot(daemon) == before


def test_json_content_type_with_charset_is_accepted(daemon, api):
    r = create_raw(api, b'{"vcpus": 999}', content_type="application/json; charset=utf-8")
    # Reaches the parser (400 about vcpus), not 415.
    check_error(r, 400, "invalid_argument")


@pytest.mark.parametrize("method,path", [
    ("PUT", "/v1/sandboxes"),
    ("DELETE", "/v1/sandboxes"),
    ("PATCH", "/v1/sandboxes"),
    ("POST", f"/v1/sandboxes/{UNKNOWN_ID}"),
    ("PUT", f"/v1/sandboxes/{UNKNOWN_ID}"),
    ("GET", f"/v1/sandboxes/{UNKNOWN_ID}/exec"),
    ("POST", "/healthz"),
])
def test_wrong_method_is_405(daemon, api, method, path):
    before = snapshot(daemon)
    r = api.request(method, path)
    check_error(r, 405, "method_not_allowed")
    assert snapshot(daemon) == before


@pytest.mark.parametrize("method,path,body", [
    ("GET", f"/v1/sandboxes/{UNKNOWN_ID}", None),
    ("DELETE", f"/v1/sandboxes/{UNKNOWN_ID}", None),
    ("POST", f"/v1/sandboxes/{UNKNOWN_ID}/exec", {"cmd": ["true"]}),
    ("GET", "/v1/sandboxes/not-an-id", None),
    ("GET", "/v1/sandboxes/..%2F..%2Fetc", None),
    ("GET", "/v1/nothing-here", None),
    ("GET", "/", None),
])
def test_unknown_id_or_path_is_404(daemon, api, method, path, body):
    before = snapshot(daemon)
    r = api.request(method, path, body=body)
    check_error(r, 404, "not_found")
    assert snapshot(daemon) == before


def test_exec_on_deleted_sandbox_is_409(daemon, api, deleted_sandbox):
    before = snapshot(daemon)
    r = api.exec(deleted_sandbox["id"], ["echo", "hi"])
    check_error(r, 409, "conflict")
    assert snapshot(daemon) == before


def test_delete_is_idempotent(daemon, api, deleted_sandbox):
    before = snapshot(daemon)
    r = api.delete(deleted_sandbox["id"])
    assert r.status == 200, r
    assert r.json["id"] == deleted_sandbox["id"] and r.json["state"] == "deleted"
    assert snapshot(daemon) == before


EXEC_BAD = [
    ("malformed-json", b'{"cmd": ['),
    ("missing-cmd", b'{}'),
    ("empty-cmd", b'{"cmd": []}'),
    ("cmd-string", b'{"cmd": "echo hi"}'),
    ("cmd-number", b'{"cmd": ["echo", 1]}'),
    ("unknown-field", b'{"cmd": ["true"], "shell": true}'),
    ("relative-cwd", b'{"cmd": ["true"], "cwd": "tmp"}'),
    ("bad-uid", b'{"cmd": ["true"], "uid": 70000}'),
    ("zero-timeout", b'{"cmd": ["true"], "timeout_s": 0}'),
    ("bad-encoding", b'{"cmd": ["true"], "stdin": "x", "stdin_encoding": "rot13"}'),
    ("bad-base64", b'{"cmd": ["true"], "stdin": "!!!", "stdin_encoding": "base64"}'),
    ("huge-max-output", b'{"cmd": ["true"], "max_output_bytes": 1000000000000}'),
]


@pytest.mark.parametrize("name,raw", EXEC_BAD, ids=[c[0] for c in EXEC_BAD])
def test_bad_exec_is_400_and_changes_nothing(daemon, api, sandbox, name, raw):
    before = snapshot(daemon)
    r = api.request("POST", f"/v1/sandboxes/{sandbox['id']}/exec", raw=raw,
                    headers={"Content-Type": "application/json"})
    check_error(r, 400, "invalid_argument")
    assert snapshot(daemon) == before


def test_daemon_still_serves_after_bad_requests(api, sandbox):
    assert api.healthz().status == 200
    assert api.exec_ok(sandbox["id"], ["echo", "still fine"])["stdout"] == "still fine\n"
