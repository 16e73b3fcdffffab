# SPDX-License-Identifier: Apache-2.0
"""airlockd with --backend firecracker, end to end through its API, on a host
without KVM: the real daemon (sandbox lifecycle, store, egress gateway,
network namespaces) drives the fake `firecracker` (fake_firecracker.py, every
request checked against Firecracker's spec), whose "guest" is a real
airlock-agent of each VM's own (chrooted in a copy of the minimal
template's files, behind the fake's hybrid vsock).

Two things of a real host are replaced, explicitly, for this test only:
  - /dev/kvm: airlockd refuses --backend firecracker without it; the test
    hook AIRLOCK_TEST_HOOK_FIRECRACKER_WITHOUT_KVM=1 lets the choice be made
    anyway (and nothing else: the jail still asks for /dev/kvm);
  - airlock-jailer: the fake is a Python script and there is no /dev/kvm
    to put in a jail, so airlockd is given `--jailer tests/fc/fake_jailer.sh`,
    which records what airlockd asks of the jailer (checked here) and runs
    the VMM without a jail. The real jail of Firecracker needs a KVM host
    (make test-kvm).

Covered: create (a restore of the template's snapshot, and a cold boot),
exec, files, pause/resume, snapshot (memory, device state and raw disk,
digested), exec after the snapshot (Firecracker resets the vsock connection:
the daemon continues the channel over a new one, and a process started
before keeps its id, output and stdin), a snapshot while paused, restore, fork, a tampered
snapshot refused, daemon restart re-attach (running and paused), a killed VMM
then recover (from its snapshot and cold), delete, and the jailer's command
lines.
"""
import importlib.util
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from conftest import AGENT, FAKE, FAKE_JAILER, ROOT, alive, require

IMAGES = os.path.join(os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build"))), "images")


def _integration():
    """tests/integration/conftest.py's Daemon and Api, loaded under another name
    (its own imports, such as apihttp, are found beside it: appended to the
    path, so this directory's conftest still comes first)."""
    here = os.path.join(ROOT, "tests", "integration")
    if here not in sys.path:
        sys.path.append(here)
    spec = importlib.util.spec_from_file_location("airlock_integration_conftest", os.path.join(here, "conftest.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


class FcDaemon:
    def __init__(self, base, daemon):
        self.base = base
        self.d = daemon
        self.api = daemon.api
        self.fc_log = os.path.join(base, "fake-fc.jsonl")
        self.jailer_log = os.path.join(base, "fake-jailer.log")

    def records(self, event="request"):
        if not os.path.exists(self.fc_log):
            return []
        with open(self.fc_log) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        return [r for r in recs if r.get("event") == event]

    def jailer_runs(self):
        if not os.path.exists(self.jailer_log):
            return []
        with open(self.jailer_log, "rb") as f:
            return [line.rstrip(b"\0").decode().split("\0") for line in f.read().split(b"\n") if line]


@pytest.fixture(scope="module")
def fcd(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, the jail's uids)")
    for tool in ("debugfs", "chroot", "nsenter"):
        if not shutil.which(tool):
            pytest.skip(f"needs {tool}")
    rootfs = os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4")
    require(rootfs, "run 'make images'")
    require(os.path.join(IMAGES, "kernels", "vmlinux"), "run 'make images'")
    require(AGENT, "run 'make all'")
    m = _integration()
    m.require_build()
    base = str(tmp_path_factory.mktemp("fcd"))
    # The guest's files: the minimal template's, read without mounting it.
    groot = os.path.join(base, "guest-root")
    os.mkdir(groot)
    subprocess.run(["debugfs", "-R", f"rdump / {groot}", rootfs], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    assert os.path.exists(os.path.join(groot, "bin", "busybox"))
    bindir = os.path.join(base, "bin")
    os.mkdir(bindir)
    os.symlink(FAKE, os.path.join(bindir, "firecracker"))
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    mp.setenv("FAKE_FC_LOG", os.path.join(base, "fake-fc.jsonl"))
    mp.setenv("FAKE_JAILER_LOG", os.path.join(base, "fake-jailer.log"))
    mp.setenv("FAKE_FC_AGENT", AGENT)
    mp.setenv("FAKE_FC_GUEST_ROOT", groot)
    mp.setenv("AIRLOCK_TEST_HOOK_FIRECRACKER_WITHOUT_KVM", "1")
    mp.delenv("AIRLOCK_TEST_BACKEND", raising=False)
    d = m.Daemon(base, extra_args=["--backend", "firecracker", "--jailer", FAKE_JAILER])
    try:
        d.start()
        yield FcDaemon(base, d)
    finally:
        try:
            if d.proc is not None and d.proc.poll() is None:
                for sb in d.api.list(all=False):
                    d.api.delete(sb["id"])
                d.stop()
        finally:
            mp.undo()
            left = [r["pid"] for r in FcDaemon(base, d).records("start") if alive(r["pid"])]
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            assert not left, f"fake firecrackers outlived their sandboxes: {left}"


def sh(api, sid, script):
    r = api.exec(sid, ["sh", "-c", script])
    assert r.status == 200, r
    assert r.json["exit_code"] == 0, r
    return r.json["stdout"]


def test_backend_and_hook_are_reported(fcd):
    h = fcd.api.healthz().json
    assert h["backend"] == "firecracker", h
    # The hook changes the choice only where /dev/kvm is not usable; where it
    # is (a KVM host, or a nested one), Firecracker is chosen without it.
    hooked = "TEST HOOK AIRLOCK_TEST_HOOK_FIRECRACKER_WITHOUT_KVM=1" in fcd.d.log(400)
    assert hooked == (not os.access("/dev/kvm", os.R_OK | os.W_OK)), fcd.d.log(400)


@pytest.fixture(scope="module")
def box(fcd):
    sb = fcd.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    yield sb
    fcd.api.delete(sb["id"])


def _jailer_run(fcd, sid):
    runs = [r for r in fcd.jailer_runs() if "--" in r and r[r.index("--id") + 1] == sid]
    assert len(runs) == 1, f"airlockd did not start Firecracker for {sid} through the jailer once: {runs}"
    run = runs[0]
    return run[:run.index("--")], run[run.index("--") + 1:]


def _check_jail(fcd, sid, keep):
    opts, vmm = _jailer_run(fcd, sid)
    vm = fcd.d.vm_dir(sid) if sid.startswith("sb-") else None
    assert opts.count("--dev") == 2 and "/dev/kvm" in opts and "/dev/net/tun" in opts
    assert "--seccomp" not in opts and "--new-pid-ns" in opts
    assert [opts[i + 1] for i, o in enumerate(opts) if o == "--keep-fd"] == keep
    if vm:
        assert opts[opts.index("--root") + 1] == vm
    assert opts[opts.index("--uid") + 1] == opts[opts.index("--gid") + 1]
    assert int(opts[opts.index("--uid") + 1]) >= 1000
    assert vmm[1:] == ["--api-sock", "fc.sock", "--id", f"airlock-{sid}"]
    return opts


def _no_refusals(fcd):
    bad = [(r["method"], r["path"], r["problems"] or r.get("fault")) for r in fcd.records()
           if r["problems"] or r["status"] >= 400]
    assert not bad, bad


def test_create_restores_the_template_snapshot(fcd, box):
    """The template is booted once (tpl-*) and saved like a snapshot; a create
    restores it (File memory backend), through the jailer."""
    sid = box["id"]
    assert box["backend"] == "firecracker" and box["state"] == "running"
    assert box["boot"] == "template", box
    builds = [r for r in fcd.jailer_runs() if "--" in r and r[r.index("--id") + 1].startswith("tpl-")]
    assert len(builds) == 1, builds
    _check_jail(fcd, builds[0][builds[0].index("--id") + 1], ["4", "5"])
    opts = _check_jail(fcd, sid, ["6", "7"])
    vm = fcd.d.vm_dir(sid)
    st = os.stat(os.path.join(vm, "disk.raw"))
    assert st.st_uid == int(opts[opts.index("--uid") + 1]) and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_ISFIFO(os.stat(os.path.join(vm, "con.fifo")).st_mode)
    assert not os.path.exists(os.path.join(vm, "disk.qcow2"))
    tdir = os.path.join(fcd.d.state_dir, "template-snapshots")
    (one,) = os.listdir(tdir)
    assert sorted(os.listdir(os.path.join(tdir, one))) == ["disk.raw", "manifest.json", "memory.bin", "memory.bin.vmstate", "vmm.log"]
    loads = [r for r in fcd.records() if r["template"] == "/snapshot/load"]
    assert loads and loads[-1]["body"]["mem_backend"] == {"backend_type": "File", "backend_path": "/proc/self/fd/6"}
    _no_refusals(fcd)


def test_cold_boot(fcd):
    sb = fcd.api.create_ok(template="minimal", vcpus=1, memory_mib=256, boot="cold")
    sid = sb["id"]
    assert sb["boot"] == "cold", sb
    _check_jail(fcd, sid, ["4", "5"])
    assert [r for r in fcd.records() if r["template"] == "/actions" and r["status"] == 204]
    assert sh(fcd.api, sid, "echo cold") == "cold\n"
    # The CA went into the guest's own files, not the host's.
    assert os.path.exists(os.path.join(fcd.d.vm_dir(sid), "guest", "usr", "local", "share", "ca-certificates"))
    _no_refusals(fcd)
    fcd.api.delete_ok(sid)


def test_exec_and_files(fcd, box):
    sid = box["id"]
    assert sh(fcd.api, sid, "echo hello") == "hello\n"
    r = fcd.api.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/f.txt", raw=b"through vsock\n")
    assert r.status in (200, 201, 204), r
    r = fcd.api.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/f.txt")
    assert r.status == 200 and r.raw == b"through vsock\n", r


def test_pause_resume(fcd, box):
    sid = box["id"]
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert r.status == 200 and r.json["state"] == "paused", r
    assert [r["body"]["state"] for r in fcd.records() if r["template"] == "/vm"][-1] == "Paused"
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    assert sh(fcd.api, sid, "echo resumed") == "resumed\n"


@pytest.fixture(scope="module")
def snap(fcd, box):
    sid = box["id"]
    sh(fcd.api, sid, "echo before > /root/before.txt && sync")
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "fc-1"})
    assert r.status == 201, r
    return r.json


def test_snapshot_files_and_digests(fcd, box, snap):
    assert snap["backend"] == "firecracker"
    assert set(snap["digests"]) == {"memory", "state", "disk", "kernel", "initramfs"}, snap
    sdir = os.path.join(fcd.d.state_dir, "snapshots", snap["id"])
    assert sorted(os.listdir(sdir)) == ["disk.raw", "memory.bin", "memory.bin.vmstate", "snapshot.json"]
    import hashlib

    def sha(name):
        with open(os.path.join(sdir, name), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    assert sha("memory.bin") == snap["digests"]["memory"]
    assert sha("memory.bin.vmstate") == snap["digests"]["state"]
    assert sha("disk.raw") == snap["digests"]["disk"]
    # The daemon's copies, not the VMM's files; nothing of the save left in the jail root.
    for name in ("memory.bin", "memory.bin.vmstate"):
        st = os.stat(os.path.join(sdir, name))
        assert st.st_uid == 0 and st.st_nlink == 1
    assert not [f for f in os.listdir(fcd.d.vm_dir(box["id"])) if f.startswith("save.mem")]
    created = [r for r in fcd.records() if r["template"] == "/snapshot/create"]
    assert created and created[-1]["body"] == {"snapshot_type": "Full", "mem_file_path": "save.mem",
                                               "snapshot_path": "save.mem.vmstate"}


def test_exec_after_snapshot_reconnects(fcd, box, snap):
    # Firecracker reset the vsock connection at the snapshot; the daemon opened a new one.
    assert fcd.records("vsock-reset")
    assert sh(fcd.api, box["id"], "echo still-here") == "still-here\n"
    assert fcd.api.get(box["id"]).json["state"] == "running"


def _output(api, sid, pid):
    r = api.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}/output?from=start")
    assert r.status == 200, r
    lines = [json.loads(line) for line in r.raw.splitlines() if line.strip()]
    import base64
    out = b""
    for line in lines:
        if line.get("type") == "stdout":
            out += base64.b64decode(line["data"]) if line.get("encoding") == "base64" else line["data"].encode()
    return out


def test_process_lives_across_a_snapshot(fcd, box):
    """The vsock connection is reset by the save; the channel goes on over a
    new one: a process started before keeps its id, its output and its stdin."""
    sid = box["id"]
    cmd = ["sh", "-c", "echo one; read x; echo two-$x; exit 7"]
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": cmd, "tag": "across",
                                                                          "stdin_stream": True})
    assert r.status == 201, r
    pid = r.json["id"]
    deadline = time.monotonic() + 20
    while _output(fcd.api, sid, pid) != b"one\n":
        assert time.monotonic() < deadline, _output(fcd.api, sid, pid)
        time.sleep(0.1)
    resets = len(fcd.records("vsock-reset"))
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "with-a-process"})
    assert r.status == 201, r
    assert len(fcd.records("vsock-reset")) == resets + 1
    r = fcd.api.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}")
    assert r.status == 200 and r.json["state"] == "running", r
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/processes/{pid}/stdin?eof=true", raw=b"go\n",
                        headers={"Content-Type": "application/octet-stream"})
    assert r.status == 204, r
    r = fcd.api.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}/wait?timeout_s=30")
    assert r.status == 200 and r.json["exit_code"] == 7, r
    assert _output(fcd.api, sid, pid) == b"one\ntwo-go\n"


def test_restore(fcd, box, snap):
    r = fcd.api.request("POST", "/v1/sandboxes", body={"snapshot": snap["id"]})
    assert r.status == 201 and r.json["state"] == "running", r
    sid = r.json["id"]
    assert r.json["boot"] == "snapshot" and r.json["backend"] == "firecracker"
    loads = [x for x in fcd.records() if x["template"] == "/snapshot/load"]
    assert loads and loads[-1]["status"] == 204
    assert loads[-1]["body"] == {"snapshot_path": "/proc/self/fd/7", "resume_vm": False,
                                 "mem_backend": {"backend_type": "File", "backend_path": "/proc/self/fd/6"}}
    assert sh(fcd.api, sid, "echo restored") == "restored\n"
    assert sh(fcd.api, sid, "cat /run/airlock/sandbox_id").strip() == sid
    fcd.api.delete_ok(sid)


def test_fork(fcd, box):
    r = fcd.api.request("POST", f"/v1/sandboxes/{box['id']}/fork", body={"count": 2})
    assert r.status in (200, 201), r
    forks = r.json["sandboxes"]
    assert len(forks) == 2 and len({f["id"] for f in forks}) == 2
    for f in forks:
        assert sh(fcd.api, f["id"], "echo forked") == "forked\n"
        fcd.api.delete_ok(f["id"])
    assert sh(fcd.api, box["id"], "echo parent") == "parent\n"


def test_snapshot_of_a_paused_sandbox(fcd, box):
    """Its channel is reset by the save while paused: the daemon opens a new one at the resume."""
    sid = box["id"]
    assert fcd.api.request("POST", f"/v1/sandboxes/{sid}/pause").status == 200
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "paused"})
    assert r.status == 201, r
    assert fcd.api.get(sid).json["state"] == "paused"
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    assert sh(fcd.api, sid, "echo after-paused-snapshot") == "after-paused-snapshot\n"


def test_tampered_state_is_refused(fcd, box):
    r = fcd.api.request("POST", f"/v1/sandboxes/{box['id']}/snapshots", body={"name": "to-tamper"})
    assert r.status == 201, r
    s = r.json
    path = os.path.join(fcd.d.state_dir, "snapshots", s["id"], "memory.bin.vmstate")
    with open(path, "ab") as f:
        f.write(b" ")
    loads = len([x for x in fcd.records() if x["template"] == "/snapshot/load"])
    r = fcd.api.request("POST", "/v1/sandboxes", body={"snapshot": s["id"]})
    assert r.status == 409 and "digest" in r.error_message, r
    assert len([x for x in fcd.records() if x["template"] == "/snapshot/load"]) == loads


def test_daemon_restart_reattaches(fcd, box):
    paused = fcd.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    r = fcd.api.request("POST", f"/v1/sandboxes/{paused['id']}/pause")
    assert r.status == 200, r
    assert fcd.d.stop() == 0
    fcd.d.start()
    assert fcd.api.get(box["id"]).json["state"] == "running"
    assert sh(fcd.api, box["id"], "echo reattached") == "reattached\n"
    assert fcd.api.get(paused["id"]).json["state"] == "paused"
    r = fcd.api.request("POST", f"/v1/sandboxes/{paused['id']}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    assert sh(fcd.api, paused["id"], "echo resumed-after-restart") == "resumed-after-restart\n"
    fcd.api.delete_ok(paused["id"])


def _vmm_pid(fcd, sid):
    pids = [r["pid"] for r in fcd.records("start") if f"airlock-{sid}" in r["argv"] and alive(r["pid"])]
    assert len(pids) == 1, pids
    return pids[0]


def _wait_state(api, sid, want, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sb = api.get(sid).json
        if sb["state"] == want:
            return sb
        time.sleep(0.1)
    raise AssertionError(f"{sid} is {api.get(sid).json['state']}, not {want}")


def test_killed_vmm_then_recover(fcd):
    sb = fcd.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    sid = sb["id"]
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/snapshots", body={"name": "before the crash"})
    assert r.status == 201, r
    os.kill(_vmm_pid(fcd, sid), signal.SIGKILL)
    gone = _wait_state(fcd.api, sid, "error")
    assert "exited unexpectedly" in gone["error"], gone
    # From its latest snapshot (memory, state and disk).
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/recover", body={})
    assert r.status == 200 and r.json["state"] == "running", r
    assert sh(fcd.api, sid, "cat /run/airlock/generation").strip() == "1"
    # A cold boot of its raw disk.
    os.kill(_vmm_pid(fcd, sid), signal.SIGKILL)
    _wait_state(fcd.api, sid, "error")
    r = fcd.api.request("POST", f"/v1/sandboxes/{sid}/recover", body={"memory": False})
    assert r.status == 200 and r.json["state"] == "running", r
    assert sh(fcd.api, sid, "echo cold-again") == "cold-again\n"
    fcd.api.delete_ok(sid)


def test_delete_ends_the_vmm(fcd):
    sb = fcd.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    sid = sb["id"]
    pids = [r["pid"] for r in fcd.records("start") if f"airlock-{sid}" in r["argv"]]
    assert len(pids) == 1 and alive(pids[0])
    fcd.api.delete_ok(sid)
    deadline = time.monotonic() + 10
    while alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pids[0])
    assert not os.path.exists(fcd.d.sandbox_dir(sid))
    assert any(r[:1] == ["--cleanup"] and sid in r for r in fcd.jailer_runs())
