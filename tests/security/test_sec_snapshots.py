# SPDX-License-Identifier: Apache-2.0
"""Category 6: snapshot tampering. Someone with write access to the state
dir's snapshot files (a shared volume, a backup restored from elsewhere)
changes them; a restore must refuse to load anything that is not what was
taken (digest mismatch: 409), start no VMM and leave no record. Another
tenant's snapshot is not found (404) whatever the verb."""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

from secutil import attempt


@pytest.fixture(scope="module")
def snap(secd, peer, tmp_path_factory):
    """A snapshot of the peer (tenant victim), with a pristine copy of its
    files to put back after each tampering."""
    api = secd.api
    r = api.request("POST", f"/v1/sandboxes/{peer['id']}/snapshots", body={"name": "tamper-me"})
    assert r.status == 201, r
    s = r.json
    sdir = os.path.join(secd.state_dir, "snapshots", s["id"])
    backup = tmp_path_factory.mktemp("snap-backup")
    for name in os.listdir(sdir):
        shutil.copy2(os.path.join(sdir, name), backup / name)
    yield {"id": s["id"], "dir": sdir, "backup": str(backup), "obj": s}
    api.request("DELETE", f"/v1/snapshots/{s['id']}")


def put_back(snap):
    for name in os.listdir(snap["dir"]):
        p = os.path.join(snap["dir"], name)
        if os.path.islink(p) or not os.path.exists(os.path.join(snap["backup"], name)):
            os.unlink(p)
    for name in os.listdir(snap["backup"]):
        dst = os.path.join(snap["dir"], name)
        if os.path.lexists(dst):
            os.unlink(dst)
        shutil.copy2(os.path.join(snap["backup"], name), dst)


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def refused(api, secd, snap, word="digest"):
    before = (sorted(s["id"] for s in api.list(all=True)), sorted(secd.qemus()))
    r = api.create(snapshot=snap["id"], tenant="victim")
    assert r.status == 409, r
    assert word in r.error_message, r
    assert (sorted(s["id"] for s in api.list(all=True)), sorted(secd.qemus())) == before


def test_tampered_files_are_never_loaded(api, secd, snap):
    mem = os.path.join(snap["dir"], "memory.bin")
    disk = os.path.join(snap["dir"], "disk.qcow2")
    size = os.path.getsize(mem)
    cases = (
        ("flip-memory", "one byte of memory.bin changed (the middle)", lambda: flip(mem, size // 2), "digest"),
        ("flip-memory-tail", "the last byte of memory.bin changed", lambda: flip(mem, size - 1), "digest"),
        ("flip-disk", "one byte of disk.qcow2 changed", lambda: flip(disk, os.path.getsize(disk) // 2), "digest"),
        ("truncate-memory", "memory.bin cut to half its size", lambda: os.truncate(mem, size // 2), "digest"),
        ("append-memory", "a byte appended to memory.bin", lambda: open(mem, "ab").write(b"\0"), "digest"),
        ("delete-memory", "memory.bin removed", lambda: os.unlink(mem), "damaged"),
        ("symlink-memory", "memory.bin replaced by a symlink to a host file", lambda: (os.unlink(mem),
                                                                                      os.symlink("/etc/passwd", mem)), ""),
    )
    for slug, what, tamper, word in cases:
        with attempt("snapshots", slug, what):
            tamper()
            try:
                refused(api, secd, snap, word)
            finally:
                put_back(snap)

    with attempt("snapshots", "qcow2-backing-swap", "disk.qcow2 rebased onto /etc/shadow (a host file as the guest's disk)"):
        r = subprocess.run(["qemu-img", "rebase", "-u", "-b", "/etc/shadow", "-F", "raw", disk],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        try:
            refused(api, secd, snap)
        finally:
            put_back(snap)

    with attempt("snapshots", "rewrite-state-file", "memory.bin changed and snapshot.json rewritten with the new digest"):
        flip(mem, size // 3)
        meta = os.path.join(snap["dir"], "snapshot.json")
        try:
            assert os.path.exists(meta), os.listdir(snap["dir"])
            doc = json.load(open(meta))
            h = hashlib.sha256()
            with open(mem, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            text = json.dumps(doc).replace(snap["obj"]["digests"]["memory"], h.hexdigest())
            assert h.hexdigest() in text, "snapshot.json does not hold the memory digest where expected"
            doc = json.loads(text)
            if "tenant" in doc:
                doc["tenant"] = "mallory"
            with open(meta, "w") as f:
                json.dump(doc, f)
            refused(api, secd, snap)
        finally:
            put_back(snap)

    with attempt("snapshots", "swap-memory", "memory.bin replaced by another snapshot's (valid) memory"):
        r = api.request("POST", f"/v1/sandboxes/{snap['obj']['sandbox_id']}/snapshots", body={"name": "other"})
        assert r.status == 201, r
        other = r.json
        try:
            shutil.copy2(os.path.join(secd.state_dir, "snapshots", other["id"], "memory.bin"), mem)
            refused(api, secd, snap)
        finally:
            put_back(snap)
            api.request("DELETE", f"/v1/snapshots/{other['id']}")

    # Control: the put-back snapshot restores, so the 409s above were the tampering.
    r = api.create(snapshot=snap["id"], tenant="victim")
    assert r.status == 201, r
    api.delete(r.json["id"])


def test_another_tenants_snapshot(api, tcp, snap):
    mal = tcp["mallory"]
    sid = snap["id"]
    with attempt("snapshots", "tenant-snapshot-read", "as tenant mallory: get and list tenant victim's snapshot"):
        r = mal.request("GET", f"/v1/snapshots/{sid}")
        assert r.status == 404, r
        r = mal.request("GET", "/v1/snapshots")
        assert r.status == 200 and sid not in r.raw.decode(), r
        r = mal.request("GET", f"/v1/snapshots?sandbox={snap['obj']['sandbox_id']}")
        assert r.status in (200, 404) and sid not in r.raw.decode(), r

    with attempt("snapshots", "tenant-snapshot-restore", "as tenant mallory: restore tenant victim's snapshot"):
        before = sorted(s["id"] for s in api.list(all=True))
        r = mal.request("POST", "/v1/sandboxes", body={"snapshot": sid})
        assert r.status == 404, r
        assert sorted(s["id"] for s in api.list(all=True)) == before

    with attempt("snapshots", "tenant-snapshot-delete", "as tenant mallory: delete tenant victim's snapshot"):
        r = mal.request("DELETE", f"/v1/snapshots/{sid}")
        assert r.status == 404, r
        assert api.request("GET", f"/v1/snapshots/{sid}").status == 200
        assert os.path.exists(os.path.join(snap["dir"], "memory.bin"))

    with attempt("snapshots", "tenant-snapshot-create", "as tenant mallory: snapshot and fork tenant victim's sandbox"):
        pid = snap["obj"]["sandbox_id"]
        for path, body in ((f"/v1/sandboxes/{pid}/snapshots", {"name": "stolen"}), (f"/v1/sandboxes/{pid}/fork", {})):
            r = mal.request("POST", path, body=body)
            assert r.status == 404, r
        assert "stolen" not in api.request("GET", "/v1/snapshots").raw.decode()
