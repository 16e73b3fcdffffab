# SPDX-License-Identifier: Apache-2.0
"""Every limit of docs/api.md "Limits", over it and under it, against a real
daemon and real guests: per-sandbox vCPUs, memory and disk (--max-*), a
guest that fills its disk, the console log, exec output, processes and
rlimits in the guest, API request rates per tenant, concurrent starts. Over
a limit is a clear error (400, 409, 429, 503) or a bounded drop counted in
/metrics; nothing on the host grows without bound."""
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from apiutil import ListeningDaemon, TcpApi, free_port
from conftest import Daemon, IMAGES, _report_on_failure, metrics, require_build, stdout_bytes, wait_for

MIB = 1024 * 1024
MAX_DISK_MIB = 128


@pytest.fixture(scope="module")
def ld(tmp_path_factory):
    d = ListeningDaemon(tmp_path_factory.mktemp("limits"), free_port(), extra_args=[
        "--max-vcpus", "2", "--max-memory-mib", "512", "--max-disk-mib", str(MAX_DISK_MIB),
        "--rate-limit-rps", "2", "--rate-limit-burst", "5", "--max-concurrent-starts", "1"]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def api(ld, request):
    yield ld.api
    _report_on_failure(request, ld)


def check_error(r, status, code, *words):
    assert r.status == status, r
    assert r.json["error"]["code"] == code, r
    for w in words:
        assert w in r.json["error"]["message"], (w, r)


def sh(api, sid, script, **kw):
    return api.exec_ok(sid, ["sh", "-c", script], **kw)


# ------------------------------------------------------------------ vCPUs and memory

def test_vcpus_and_memory_maxima(api):
    n = len(api.list(all=True))
    check_error(api.create(vcpus=3), 400, "invalid_argument", "vcpus", "--max-vcpus")
    check_error(api.create(memory_mib=640), 400, "invalid_argument", "memory_mib", "--max-memory-mib")
    # What the request parser refuses for every host stays as it was.
    check_error(api.create(vcpus=17), 400, "invalid_argument", "vcpus")
    assert len(api.list(all=True)) == n, "a refused create leaves no record"
    # At the maxima: fine.
    sb = api.create_ok(vcpus=2, memory_mib=512)
    assert (sb["vcpus"], sb["memory_mib"]) == (2, 512)
    assert sh(api, sb["id"], "grep -c ^processor /proc/cpuinfo")["stdout"].strip() == "2"
    api.delete_ok(sb["id"])


# ------------------------------------------------------------------ disk

def test_disk_size_limits(api):
    n = len(api.list(all=True))
    check_error(api.create(disk_mib=32), 400, "invalid_argument", "disk_mib", "below", "64 MiB")
    check_error(api.create(disk_mib=MAX_DISK_MIB + 1), 400, "invalid_argument", "disk_mib", "--max-disk-mib")
    check_error(api.create(disk_mib=0), 400, "invalid_argument", "disk_mib")
    if os.path.exists(os.path.join(IMAGES, "templates", "base", "rootfs.ext4")):
        # A template bigger than the host allows cannot be used at all.
        check_error(api.create(template="base"), 400, "invalid_argument", "template base", "--max-disk-mib")
    assert len(api.list(all=True)) == n
    sb = api.create_ok()
    assert sb["disk_mib"] == 64, sb  # the template's size
    api.delete_ok(sb["id"])


def test_guest_cannot_grow_its_disk_beyond_its_size(api, ld):
    sb = api.create_ok(disk_mib=96)
    sid = sb["id"]
    assert sb["disk_mib"] == 96
    # The guest sees a 96 MiB block device (the agent grew the filesystem to it).
    assert sh(api, sid, "cat /sys/block/vda/size")["stdout"].strip() == str(96 * 2048)
    # Up to the end of the device: fine; past the end: no space (the writes
    # under the mounted filesystem are harmless here: the device is filled below).
    out = sh(api, sid, "dd if=/dev/zero of=/dev/vda bs=1M seek=80 count=16 conv=notrunc,fsync 2>&1; echo rc=$?")
    assert "rc=0" in out["stdout"], out
    out = sh(api, sid, "dd if=/dev/zero of=/dev/vda bs=1M seek=96 count=1 conv=notrunc 2>&1; echo rc=$?")
    assert "No space left" in out["stdout"] and "rc=0" not in out["stdout"], out
    # Fill the filesystem, then the whole device: the host file stays within
    # the disk's size (plus qcow2 metadata).
    out = sh(api, sid, "dd if=/dev/zero of=/fill bs=1M 2>&1; sync; df -k / | tail -1")
    assert "No space left" in out["stdout"], out
    out = sh(api, sid, "dd if=/dev/zero of=/dev/vda bs=1M conv=fsync 2>&1; echo done")
    assert "No space left" in out["stdout"], out
    disk = os.path.join(ld.vm_dir(sid), "disk.qcow2")
    st = os.stat(disk)
    assert st.st_blocks * 512 <= 96 * MIB + 2 * MIB, st
    assert st.st_size <= 96 * MIB + 2 * MIB, st
    info = subprocess.run(["qemu-img", "info", "-U", "--output=json", disk], capture_output=True, text=True)
    if info.returncode == 0:
        assert '"virtual-size": 100663296' in info.stdout, info.stdout
    api.delete(sid)


# ------------------------------------------------------------------ console log

def test_console_log_is_capped_and_counted(api, ld):
    sb = api.create_ok()
    sid = sb["id"]
    before = metrics(api)
    # A bit more than two files' worth (1 MiB each) through the serial console.
    r = api.exec(sid, ["sh", "-c", "head -c 2200000 /dev/zero | tr '\\0' x > /dev/console"], timeout_s=300)
    assert r.status == 200 and r.json["exit_code"] == 0, r
    sdir = ld.sandbox_dir(sid)
    log, old = os.path.join(sdir, "console.log"), os.path.join(sdir, "console.log.1")
    wait_for(lambda: os.path.exists(old) and os.path.getsize(log) > 0, 30, "the console log to rotate")
    assert os.path.getsize(log) <= MIB and os.path.getsize(old) <= MIB
    after = metrics(api)
    assert after["airlock_console_rotations_total"] - before["airlock_console_rotations_total"] >= 2
    dropped = after['airlock_output_dropped_bytes_total{kind="console"}'] - \
        before['airlock_output_dropped_bytes_total{kind="console"}']
    assert dropped >= 100000, dropped
    # The sandbox is fine, and its logs stay within two files.
    assert sh(api, sid, "echo ok")["stdout"] == "ok\n"
    assert sum(os.path.getsize(os.path.join(sdir, f)) for f in os.listdir(sdir) if f.startswith("console")) \
        <= 2 * MIB
    api.delete_ok(sid)


# ------------------------------------------------------------------ exec output, processes, rlimits

@pytest.fixture(scope="module")
def sandbox(ld):
    sb = ld.api.create_ok()
    yield sb
    ld.api.delete(sb["id"])


def test_exec_output_cap(api, sandbox):
    sid = sandbox["id"]
    before = metrics(api)
    r = api.exec_ok(sid, ["sh", "-c", "head -c 100000 /dev/zero; echo err >&2"], max_output_bytes=1000)
    assert len(stdout_bytes(r)) == 1000 and r["stdout_truncated"] is True, r["stdout_truncated"]
    assert r["stderr"] == "err\n" and r["stderr_truncated"] is False
    after = metrics(api)
    assert after["airlock_exec_output_truncated_total"] == before["airlock_exec_output_truncated_total"] + 1
    assert after['airlock_output_dropped_bytes_total{kind="exec"}'] == \
        before['airlock_output_dropped_bytes_total{kind="exec"}'] + 99000
    # Under the cap: all of it, nothing counted.
    r = api.exec_ok(sid, ["head", "-c", "1000", "/dev/zero"], max_output_bytes=1000)
    assert len(stdout_bytes(r)) == 1000 and r["stdout_truncated"] is False
    assert metrics(api)["airlock_exec_output_truncated_total"] == after["airlock_exec_output_truncated_total"]
    # Over the largest cap there is: refused.
    check_error(api.exec(sid, ["true"], max_output_bytes=64 * MIB + 1), 400, "invalid_argument", "max_output_bytes")


def test_guest_rlimits(api, sandbox):
    sid = sandbox["id"]
    for uid in (0, 1000):
        out = sh(api, sid, "grep -E '^Max (open files|processes)' /proc/self/limits", uid=uid, gid=uid)["stdout"]
        files = re.search(r"Max open files\s+(\d+)\s+(\d+)", out)
        procs = re.search(r"Max processes\s+(\d+)\s+(\d+)", out)
        assert files and files.groups() == ("1024", "4096"), out
        assert procs and procs.group(1) == procs.group(2) and 0 < int(procs.group(1)) <= 4096, out
    # The agent itself may hold more (its streams' pipes); that does not leak into what it starts.
    out = sh(api, sid, "grep '^Max open files' /proc/1/limits")["stdout"]
    assert re.search(r"Max open files\s+8192\s+8192", out), out
    # Enforced for a non-root uid: it cannot raise them past the hard limit.
    out = sh(api, sid, "ulimit -n 4097 2>&1; echo rc=$?", uid=1000, gid=1000)["stdout"]
    assert "rc=0" not in out, out


def test_processes_at_once(api):
    sb = api.create_ok()
    sid = sb["id"]
    for i in range(256):
        r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["sleep", "3600"]})
        assert r.status == 201, (i, r)
    # The 257th, of any kind, is refused with what to do.
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["true"]})
    check_error(r, 409, "conflict", "256", "wait for one to finish")
    check_error(api.exec(sid, ["true"]), 409, "conflict", "256")
    # One ends (the agent takes frames in order: by then it has started all
    # of them): one more may start, and 255 really run in the guest.
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes/p-1/signal", body={"signal": "KILL"})
    assert r.status == 204, r
    wait_for(lambda: api.request("GET", f"/v1/sandboxes/{sid}/processes/p-1").json["state"] == "exited", 120,
             "p-1 to end")
    out = api.exec_ok(sid, ["sh", "-c", "ps | grep -c '[s]leep 3600'"])
    assert out["stdout"].strip() == "255", out
    api.delete_ok(sid)


# ------------------------------------------------------------------ API request rate per tenant

@pytest.fixture(scope="module")
def tokens(ld):
    out = {}
    for tenant in ("rate-a", "rate-b"):
        r = ld.api.request("POST", "/v1/tokens", body={"tenant": tenant})
        assert r.status == 201, r
        out[tenant] = r.json["token"]
    return out


def burst(tcp, n):
    return [tcp.request("GET", "/healthz") for _ in range(n)]


def test_rate_limit_per_tenant(api, ld, tokens):
    a = TcpApi(ld.port, tokens["rate-a"])
    b = TcpApi(ld.port, tokens["rate-b"])
    before = metrics(api)["airlock_rate_limited_total"]
    t0 = time.monotonic()
    answers = burst(a, 12)
    took = time.monotonic() - t0
    ok = [r for r in answers if r.status == 200]
    limited = [r for r in answers if r.status == 429]
    assert len(ok) + len(limited) == len(answers), answers
    # The burst (5), plus what 2/s refilled meanwhile.
    assert 5 <= len(ok) <= 5 + int(2 * took) + 1, (len(ok), took)
    assert limited, answers
    r = limited[0]
    check_error(r, 429, "quota_exceeded", "rate-a", "--rate-limit-rps")
    assert 1 <= int(r.headers["Retry-After"]) <= 2, r.headers
    # Another tenant has its own bucket; the unix socket (the operator) has none.
    assert all(r.status == 200 for r in burst(b, 4))
    assert all(r.status == 200 for r in [api.healthz() for _ in range(30)])
    assert metrics(api)["airlock_rate_limited_total"] - before == len(limited)
    # After Retry-After the tenant may go on.
    time.sleep(int(r.headers["Retry-After"]) + 0.2)
    assert a.request("GET", "/healthz").status == 200


# ------------------------------------------------------------------ concurrent starts

def test_concurrent_starts_wait_for_a_slot(api):
    """--max-concurrent-starts 1: a second create waits for the first's boot
    instead of failing."""
    before = metrics(api)["airlock_start_waits_total"]
    results = [None, None]

    def create(i):
        results[i] = api.create(template="minimal")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status == 201 for r in results), results
    m = metrics(api)
    assert m["airlock_start_waits_total"] >= before + 1
    assert m["airlock_starts_active"] == 0 and m["airlock_starts_waiting"] == 0
    for r in results:
        api.delete_ok(r.json["id"])


def _silent_initramfs(path, workdir):
    """An initramfs whose /init never starts the agent: a boot that holds its
    start slot until the boot timeout."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    root = os.path.join(workdir, "silent-root")
    os.makedirs(os.path.join(root, "bin"))
    os.makedirs(os.path.join(root, "dev"))
    shutil.copy(busybox, os.path.join(root, "bin", "busybox"))
    with open(os.path.join(root, "init"), "w") as f:
        f.write("#!/bin/busybox sh\nwhile :; do /bin/busybox sleep 3600; done\n")
    os.chmod(os.path.join(root, "init"), 0o755)
    files = subprocess.run(["find", ".", "-print0"], cwd=root, check=True, capture_output=True).stdout
    with open(path, "wb") as out:
        subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet"], cwd=root, input=files, stdout=out,
                       check=True)


def test_create_over_the_start_queue_bound_is_503(tmp_path_factory):
    require_build()
    base = tmp_path_factory.mktemp("starts")
    images = str(base / "images")
    os.makedirs(os.path.join(images, "kernels"))
    os.makedirs(os.path.join(images, "templates"))
    os.symlink(os.path.join(IMAGES, "kernels", "vmlinuz"), os.path.join(images, "kernels", "vmlinuz"))
    _silent_initramfs(os.path.join(images, "kernels", "initramfs.cpio"), str(base))
    os.symlink(os.path.join(IMAGES, "templates", "minimal"), os.path.join(images, "templates", "minimal"))
    d = Daemon(base, image_dir=images, boot_timeout_s=8, extra_args=[
        "--max-concurrent-starts", "1", "--start-queue-timeout-s", "1"]).start()
    try:
        api = d.api
        first = {}
        t = threading.Thread(target=lambda: first.setdefault("r", api.create(template="minimal")))
        t.start()
        wait_for(lambda: any(s["state"] == "creating" for s in api.list()), 30, "the first boot to start")
        t0 = time.monotonic()
        r = api.create(template="minimal")
        waited = time.monotonic() - t0
        check_error(r, 503, "unavailable", "--max-concurrent-starts 1", "--start-queue-timeout-s",
                    "nothing was created")
        assert r.headers.get("Retry-After") == "1", r.headers
        assert 0.9 <= waited < 6, waited
        assert len(api.list(all=True)) == 1, "the refused create left no record"
        m = metrics(api)
        assert m["airlock_starts_active"] == 1 and m["airlock_start_rejections_total"] == 1, m
        t.join()
        assert first["r"].status == 500, first["r"]  # the silent guest's own boot timeout
        m = metrics(api)
        assert m["airlock_starts_active"] == 0 and m["airlock_starts_waiting"] == 0, m
    finally:
        leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}"
