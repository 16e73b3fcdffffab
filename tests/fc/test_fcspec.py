# SPDX-License-Identifier: Apache-2.0
"""The spec checker itself (fcspec.py): it must refuse what Firecracker
refuses, or the conformance tests prove nothing."""
import json
import os

import pytest

import fcspec

H = {"content-type": "application/json", "host": "localhost"}


def problems(spec, method, path, body):
    data = json.dumps(body).encode() if body is not None else b""
    return spec.check_request(method, path, H, data)[3]


def test_spec_is_the_shared_one(spec):
    assert spec.path in (fcspec.SHARED_SPEC, fcspec.VENDORED_SPEC)
    if os.path.exists(fcspec.SHARED_SPEC):
        # The repository's copy (what CI uses on a clone alone) is the shared file.
        with open(fcspec.SHARED_SPEC, "rb") as a, open(fcspec.VENDORED_SPEC, "rb") as b:
            assert a.read() == b.read(), "tests/fc/firecracker.yaml differs from ../shared: copy it again"
    assert spec.version.startswith("1.")
    assert ("PUT", "/snapshot/load") in spec.ops and ("PATCH", "/vm") in spec.ops


GOOD = [
    ("PUT", "/machine-config", {"vcpu_count": 2, "mem_size_mib": 256, "smt": False, "track_dirty_pages": True}),
    ("PUT", "/boot-source", {"kernel_image_path": "/k", "initrd_path": "/i", "boot_args": "console=ttyS0"}),
    ("PUT", "/drives/root", {"drive_id": "root", "path_on_host": "disk.raw", "is_root_device": False,
                             "is_read_only": False, "cache_type": "Writeback"}),
    ("PUT", "/network-interfaces/eth0", {"iface_id": "eth0", "host_dev_name": "tap0", "guest_mac": "02:00:00:00:00:01"}),
    ("PUT", "/vsock", {"guest_cid": 3, "uds_path": "v.sock"}),
    ("PUT", "/entropy", {}),
    ("PUT", "/actions", {"action_type": "InstanceStart"}),
    ("PATCH", "/vm", {"state": "Paused"}),
    ("PUT", "/snapshot/create", {"snapshot_type": "Diff", "snapshot_path": "s", "mem_file_path": "m"}),
    ("PUT", "/snapshot/load", {"snapshot_path": "s", "mem_backend": {"backend_type": "File", "backend_path": "m"},
                               "resume_vm": False}),
    ("GET", "/", None),
]


@pytest.mark.parametrize("method,path,body", GOOD, ids=[f"{m} {p}" for m, p, _ in GOOD])
def test_good_requests_pass(spec, method, path, body):
    assert problems(spec, method, path, body) == []


BAD = [
    ("POST", "/vm", {"state": "Paused"}, "POST is not an operation"),
    ("PUT", "/nope", {}, "not a path of the spec"),
    ("PUT", "/machine-config", {"vcpu_count": 2}, "missing required field \"mem_size_mib\""),
    ("PUT", "/machine-config", {"vcpu_count": 0, "mem_size_mib": 1}, "below the minimum 1"),
    ("PUT", "/machine-config", {"vcpu_count": 33, "mem_size_mib": 1}, "above the maximum 32"),
    ("PUT", "/machine-config", {"vcpu_count": "2", "mem_size_mib": 1}, "expected an integer"),
    ("PUT", "/machine-config", {"vcpu_count": True, "mem_size_mib": 1}, "expected an integer"),
    ("PUT", "/machine-config", {"vcpu_count": 3, "mem_size_mib": 1, "smt": True}, "1 or even"),
    ("PUT", "/machine-config", {"vcpu_count": 1, "mem_size_mib": 1, "cpus": 1}, "unknown field \"cpus\""),
    ("PUT", "/drives/root", {"drive_id": "other", "path_on_host": "d", "is_root_device": False,
                             "is_read_only": False}, "not the path's"),
    ("PUT", "/drives/root", {"drive_id": "root", "is_root_device": False}, "needs path_on_host"),
    ("PUT", "/drives/root", {"drive_id": "root", "path_on_host": "d", "is_root_device": False,
                             "is_read_only": False, "cache_type": "None"}, "is not one of"),
    ("PUT", "/vsock", {"guest_cid": 2, "uds_path": "v.sock"}, "below the minimum 3"),
    ("PUT", "/actions", {"action_type": "Start"}, "is not one of"),
    ("PATCH", "/vm", {"state": "paused"}, "is not one of"),
    ("PATCH", "/vm", None, "needs a body"),
    ("PUT", "/snapshot/create", {"snapshot_type": "Full", "snapshot_path": "s"}, "mem_file_path"),
    ("PUT", "/snapshot/load", {"snapshot_path": "s"}, "exactly one of"),
    ("PUT", "/snapshot/load", {"snapshot_path": "s", "mem_file_path": "m",
                               "mem_backend": {"backend_type": "File", "backend_path": "m"}}, "exactly one of"),
    ("PUT", "/snapshot/load", {"snapshot_path": "s", "mem_backend": {"backend_type": "Mmap", "backend_path": "m"}},
     "is not one of"),
    ("GET", "/", {}, "takes no body"),
]


@pytest.mark.parametrize("method,path,body,needle", BAD, ids=[n for *_, n in BAD])
def test_bad_requests_are_caught(spec, method, path, body, needle):
    found = problems(spec, method, path, body)
    assert any(needle in p for p in found), found


def test_content_type_and_json(spec):
    assert spec.check_request("PATCH", "/vm", {"host": "x"}, b'{"state":"Paused"}')[3]
    assert "not JSON" in spec.check_request("PATCH", "/vm", H, b"{state")[3][0]
