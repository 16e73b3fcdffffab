# SPDX-License-Identifier: Apache-2.0
"""Template snapshots kept across restarts of airlockd (docs/architecture.md,
"Template snapshots"; src/daemon/core/template-snap.c, template-snap-disk.c).

The first create of a (template, vCPUs, memory) boots the template once and
keeps its snapshot on disk with a manifest (what it was made of, the digests of
its files). After a restart, SIGTERM or SIGKILL, on the same state dir, the
first create of that kind loads it (the daemon logs "loaded the kept one")
instead of booting the template again, and its guests are still each their own
(hostname, sandbox id, random bytes: THAW). A kept snapshot whose inputs changed
(here: a manifest naming another kernel digest) or whose files do not match
their digests (a byte of its memory changed) is never restored: it is removed
and made again. A snapshot cut by a crash (no manifest) is removed at start-up.
At most 8 stay on disk (one per kind, the newest), at start-up and after.

Which path a create took is read from the daemon's log, never from timings.
Root only (the daemon jails its VMMs). Run: pytest-3 -v tests/integration/test_tsnap_restart.py
"""
import glob
import json
import os
import signal
import time

import pytest

import lifecycleutil as lu

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="airlockd needs root")

KEY = "minimal/1/256"
BUILT = f"template snapshot {KEY}: booting the template once"
KEPT = f"template snapshot {KEY}: kept on disk for a restart"
LOADED = f"template snapshot {KEY}: loaded the kept one"
NOT_USED = f"template snapshot {KEY}: the one kept in"


@pytest.fixture
def d(restart_daemon):
    return restart_daemon


def log_size(d):
    return os.path.getsize(d.log_path)


def log_from(d, offset):
    with open(d.log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def kept_dirs(d):
    """The template snapshots on disk with a manifest."""
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(d.state_dir, "template-snapshots", "*",
                                                                     "manifest.json")))


def snapshot_dirs(d):
    return sorted(glob.glob(os.path.join(d.state_dir, "template-snapshots", "*")))


def create(d):
    sb = d.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    assert sb["boot"] == "template", sb
    return sb["id"]


def identity(d, sid):
    """(hostname, sandbox id, 32 random bytes) as the guest sees them."""
    out = lu.guest_sh(d.api, sid, "hostname; cat /run/airlock/sandbox_id; echo; "
                                  "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'").split()
    assert len(out) == 3, out
    return out


def template_memfd_seals(d, sid):
    """F_GET_SEALS of the template memory (memfd:airlock-template) sandbox
    sid's VMM maps."""
    import fcntl
    pids = [pid for pid, argv in d.qemus().items() if f"airlock-{sid} " in argv + " "]
    assert len(pids) == 1, d.qemus()
    fds = [fd for fd in os.listdir(f"/proc/{pids[0]}/fd")
           if os.readlink(f"/proc/{pids[0]}/fd/{fd}").startswith("/memfd:airlock-template")]
    assert fds, f"the VMM of {sid} maps no template memory"
    f = os.open(f"/proc/{pids[0]}/fd/{fds[0]}", os.O_RDONLY)
    try:
        return fcntl.fcntl(f, 1034)  # F_GET_SEALS
    finally:
        os.close(f)


def first_create_and_stop(d, sig):
    """A create that makes the snapshot (and keeps it), then the daemon goes
    by sig; returns the kept snapshot's directory."""
    off = log_size(d)
    sid = create(d)
    text = log_from(d, off)
    assert BUILT in text and KEPT in text, text
    assert identity(d, sid)[:2] == [sid, sid]
    d.api.delete_ok(sid)
    kept = kept_dirs(d)
    assert len(kept) == 1, snapshot_dirs(d)
    if sig == signal.SIGKILL:
        d.proc.kill()
        d.proc.wait()
    else:
        assert d.stop() == 0, d.log()
    return kept[0]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_first_create_after_a_restart_restores_the_kept_snapshot(d, sig):
    kept = first_create_and_stop(d, sig)
    off = log_size(d)
    d.start()
    a, b = create(d), create(d)
    text = log_from(d, off)
    assert LOADED in text, text
    assert BUILT not in text, "the template was booted again after the restart:\n" + text
    assert f"sandbox {a}: started (template)" in text, text
    assert kept_dirs(d) == [kept], snapshot_dirs(d)
    # Each guest of the loaded snapshot is its own (THAW after the restore).
    ida, idb = identity(d, a), identity(d, b)
    assert ida[:2] == [a, a] and idb[:2] == [b, b], (ida, idb)
    assert ida[2] != idb[2], f"two sandboxes of the kept snapshot read the same random bytes: {ida} {idb}"
    assert d.api.exec_ok(a, ["echo", "ok"])["stdout"] == "ok\n"
    # The loaded memory is sealed, as a built one: no VMM (nor root holding it) can write it.
    assert template_memfd_seals(d, a) & 0x0f == 0x0f
    d.api.delete_ok(a)
    d.api.delete_ok(b)
    # And again after a second restart: it stays kept.
    assert d.stop() == 0, d.log()
    off = log_size(d)
    d.start()
    c = create(d)
    text = log_from(d, off)
    assert LOADED in text and BUILT not in text, text
    d.api.delete_ok(c)


def rebuilt_not_reused(d, kept, reason):
    """After a restart the first create removes the kept snapshot (reason in
    the log), boots the template again, and its guest works."""
    off = log_size(d)
    d.start()
    sid = create(d)
    text = log_from(d, off)
    assert LOADED not in text, "a kept snapshot that should not match was loaded:\n" + text
    assert f"{NOT_USED} {kept} is not used: {reason}" in text, text
    # It was refused before any guest started from it, then made again.
    assert text.index(NOT_USED) < text.index(BUILT) < text.index(f"sandbox {sid}: started (template)"), text
    assert not os.path.exists(kept)
    assert len(kept_dirs(d)) == 1 and kept_dirs(d) != [kept], snapshot_dirs(d)
    assert identity(d, sid)[:2] == [sid, sid]
    d.api.delete_ok(sid)


def test_a_corrupted_memory_file_is_rebuilt_not_reused(d):
    kept = first_create_and_stop(d, signal.SIGKILL)
    ram = os.path.join(kept, "memory.ram")
    size = os.path.getsize(ram)
    assert size == 256 << 20, size
    with open(ram, "r+b") as f:
        # A byte of a page the guest wrote (the file is sparse: zero pages are holes).
        f.seek(os.SEEK_SET)
        pos = os.lseek(f.fileno(), 0, os.SEEK_DATA)
        f.seek(pos + 100)
        byte = f.read(1)
        f.seek(pos + 100)
        f.write(bytes([byte[0] ^ 0x01]))
    rebuilt_not_reused(d, kept, "memory.ram does not match its digest")


def test_a_manifest_naming_another_kernel_is_rebuilt_not_reused(d):
    kept = first_create_and_stop(d, signal.SIGTERM)
    path = os.path.join(kept, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    m["inputs"]["kernel"]["sha256"] = "0" * 64
    with open(path, "w") as f:
        json.dump(m, f)
    rebuilt_not_reused(d, kept, "its kernel's sha256 changed")


def test_a_snapshot_cut_by_a_crash_is_removed_at_start(d):
    kept = first_create_and_stop(d, signal.SIGKILL)
    # As if the daemon died before the manifest was in place.
    os.rename(os.path.join(kept, "manifest.json"), os.path.join(kept, "manifest.json.tmp.1"))
    off = log_size(d)
    d.start()
    text = log_from(d, off)
    assert f"template snapshot dir {kept}: not complete" in text, text
    assert not os.path.exists(kept)
    sid = create(d)
    text = log_from(d, off)
    assert BUILT in text and LOADED not in text, text
    d.api.delete_ok(sid)


def test_disk_use_is_bounded(d):
    """At most 8 snapshots stay on disk (TSNAP_MAX), one per kind, the newest:
    at start-up, and when a new kind is made while kept ones wait for their
    first use."""
    kept = first_create_and_stop(d, signal.SIGTERM)
    base = os.path.dirname(kept)
    now = time.time()
    # Complete-looking snapshots of 8 other kinds, older than the real one, and
    # an older second one of the real kind.
    fakes = []
    for i, key in enumerate([f"fake{i}/1/256" for i in range(8)] + [KEY]):
        fdir = os.path.join(base, f"fake-{i}")
        os.mkdir(fdir, 0o700)
        path = os.path.join(fdir, "manifest.json")
        with open(path, "w") as f:
            json.dump({"format": 1, "key": key}, f)
        os.utime(path, (now - 1000 + i, now - 1000 + i))
        fakes.append(fdir)
    os.utime(os.path.join(kept, "manifest.json"), (now, now))
    off = log_size(d)
    d.start()
    text = log_from(d, off)
    # 10 complete ones: the older of the real kind goes, then the oldest fake.
    assert not os.path.exists(fakes[8]) and not os.path.exists(fakes[0]), snapshot_dirs(d)
    assert f"{NOT_USED} {fakes[8]} is removed (a newer one of the same kind is kept)" in text, text
    assert "is removed (at most 8 are kept)" in text, text
    assert snapshot_dirs(d) == sorted([kept] + fakes[1:8])
    # Its first use loads the real one; a new kind made then pushes out the
    # oldest kept one not loaded yet.
    sid = create(d)
    big = d.api.create_ok(template="minimal", vcpus=1, memory_mib=320)
    text = log_from(d, off)
    assert LOADED in text and "template snapshot minimal/1/320: booting the template once" in text, text
    assert len(snapshot_dirs(d)) == 8 and not os.path.exists(fakes[1]), snapshot_dirs(d)
    assert kept in snapshot_dirs(d)
    d.api.delete_ok(sid)
    d.api.delete_ok(big["id"])
