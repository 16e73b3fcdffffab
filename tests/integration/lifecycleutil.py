# SPDX-License-Identifier: Apache-2.0
"""Helpers for the lifecycle tests (test_lifecycle_snapshots.py): a counter
that runs in the guest, snapshots, restores and forks through the API, the
files of a snapshot on the host, and the VMM of a sandbox."""
import hashlib
import os
import time

from conftest import qemu_processes, wait_for

# A background counter: the file always holds a whole number (tmp + mv).
COUNTER = "i=0; while true; do i=$((i+1)); echo $i > /tmp/c.tmp; mv /tmp/c.tmp /tmp/count; sleep 0.1; done"

# Bounds a hang; times nothing.
WAIT_S = 120


def start_counter(api, sid):
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["sh", "-c", COUNTER], "tag": "counter"})
    assert r.status == 201, r
    wait_for(lambda: read_counter(api, sid, must=False), WAIT_S, f"the counter of {sid} to start")


def read_counter(api, sid, must=True):
    """The counter's value (an int), or None while it has not started (must=False)."""
    r = api.exec(sid, ["sh", "-c", "cat /tmp/count 2>/dev/null || true"])
    assert r.status == 200, r
    text = r.json["stdout"].strip()
    if not text:
        assert not must, f"sandbox {sid} has no counter value"
        return None
    return int(text)


def wait_counter_above(api, sid, value, what=None):
    """Waits until the counter of sid passes value; returns what it read."""
    return wait_for(lambda: (lambda v: v if v > value else None)(read_counter(api, sid)), WAIT_S,
                    what or f"the counter of {sid} to pass {value}")


def guest_sh(api, sid, script):
    """stdout of `sh -c script` in the guest; asserts exit 0."""
    r = api.exec(sid, ["sh", "-c", script])
    assert r.status == 200, r
    assert r.json["exit_code"] == 0, r
    return r.json["stdout"]


def snapshot(api, sid, name):
    r = api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": name})
    assert r.status == 201, r
    return r.json


def restore(api, snap_id, **fields):
    r = api.request("POST", "/v1/sandboxes", body={"snapshot": snap_id, **fields})
    assert r.status == 201, r
    assert r.json["state"] == "running", r
    return r.json


def state(api, sid):
    r = api.get(sid)
    assert r.status == 200, r
    return r.json["state"]


def wait_state(api, sid, want, timeout_s=WAIT_S):
    wait_for(lambda: api.get(sid).json["state"] == want, timeout_s, f"sandbox {sid} to be {want}")
    return api.get(sid).json


def snapshot_dir(daemon, snap_id):
    return os.path.join(daemon.state_dir, "snapshots", snap_id)


def file_digests(path):
    """sha256 of each regular file in a directory (name -> hex)."""
    out = {}
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.isfile(p) and not os.path.islink(p):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[name] = h.hexdigest()
    return out


def flip_byte(path, offset=None):
    """Flips one byte of a file in place (the middle by default)."""
    size = os.path.getsize(path)
    offset = size // 2 if offset is None else offset
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def vmm_pid(sid):
    """The pid of the QEMU running sandbox sid (exactly one)."""
    pids = [p for p, cmd in qemu_processes(needle=f"airlock-{sid}").items()]
    assert len(pids) == 1, f"expected one QEMU for {sid}, found {pids}"
    return pids[0]


def ids_in(daemon, sub):
    d = os.path.join(daemon.state_dir, sub)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def monotonic():
    return time.monotonic()
