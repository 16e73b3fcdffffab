# SPDX-License-Identifier: Apache-2.0
"""Warm pools (docs/api.md, "Warm pools"): VMs restored from the template's
snapshot and paused ahead of creates; a create takes one and gets its own
identity (THAW); the pool refills, counts its memory, yields its CPU and
sheds VMs above the host memory mark. One daemon with --listen and
`--warm-pool minimal=2` for most of the module; the memory test and the
restart test have daemons of their own."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from apiutil import ListeningDaemon, TcpApi, free_port
from conftest import Daemon, _report_on_failure, cgroup_mounts, wait_for

SHAPE = {"template": "minimal", "vcpus": 1, "memory_mib": 256}
POOL_WAIT_S = 120  # the first fill builds the template's snapshot (TCG: seconds)


def pools(api):
    r = api.request("GET", "/v1/pools")
    assert r.status == 200, r
    return r.json


def pool_of(api, template="minimal", tenant=None):
    for p in pools(api)["pools"]:
        if p["template"] == template and p["tenant"] == tenant:
            return p
    return None


def wait_ready(api, n, tenant=None, timeout_s=POOL_WAIT_S):
    wait_for(lambda: (pool_of(api, tenant=tenant) or {}).get("ready", -1) >= n, timeout_s,
             f"{n} pooled VMs ready")
    return pool_of(api, tenant=tenant)


def vm_ids(daemon):
    """Ids of the sandboxes whose VMM runs (pooled ones included), from QEMU's -name."""
    out = set()
    for argv in daemon.qemus().values():
        m = re.search(r"-name airlock-(sb-[0-9a-f]{16})", argv)
        if m:
            out.add(m.group(1))
    return out


def pooled_ids(daemon):
    """VMs no sandbox record owns: the pool's."""
    listed = {s["id"] for s in daemon.api.request("GET", "/v1/sandboxes?all=true").json["sandboxes"]}
    return vm_ids(daemon) - listed


def sh(api, sid, script):
    r = api.exec_ok(sid, ["/bin/sh", "-c", script])
    return r["stdout"]


@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    d = ListeningDaemon(tmp_path_factory.mktemp("airlockd-pool"), free_port(),
                        extra_args=["--warm-pool", "minimal=2"]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def api(pd, request):
    yield pd.api
    _report_on_failure(request, pd)


@pytest.fixture(scope="module")
def tenant_tokens(pd):
    out = {}
    for t in ("pa", "pb"):
        r = pd.api.request("POST", "/v1/tokens", body={"tenant": t, "description": "pool test"})
        assert r.status == 201, r
        out[t] = TcpApi(pd.port, r.json["token"])
    return out


def cpu_weight(daemon, sid):
    """The sandbox's cgroup CPU weight as cgroup v2 counts it (v1: cpu.shares * 100 / 1024)."""
    mnt, kind = cgroup_mounts()["cpu"]
    base = os.path.join(mnt, "airlock", sid)
    if kind == "v2":
        return int(open(os.path.join(base, "cpu.weight")).read())
    return int(open(os.path.join(base, "cpu.shares")).read()) * 100 // 1024


def test_create_takes_a_pooled_vm_and_the_pool_refills(pd, api):
    p = wait_ready(api, 2)
    assert p["size"] == 2 and p["vcpus"] == 1 and p["memory_mib"] == 256, p
    assert p["pss_bytes"] > 8 << 20, f"two pooled VMs should hold memory: {p}"
    before = pooled_ids(pd)
    assert len(before) == 2, before
    # A pooled VM has no CPU share to speak of until it is taken.
    for sid in before:
        assert cpu_weight(pd, sid) <= 1, sid
    sb = api.create_ok(**SHAPE, env={"WHO": "first"}, metadata={"team": "pool"})
    assert sb["boot"] == "pool", sb
    assert sb["id"] in before, "the create took one of the pooled VMs"
    assert sb["state"] == "running" and sb["metadata"] == {"team": "pool"}, sb
    assert cpu_weight(pd, sb["id"]) == 100
    # It is the create's sandbox: its id, hostname and env.
    out = sh(api, sb["id"], "hostname; cat /run/airlock/sandbox_id; echo $WHO")
    assert out.split() == [sb["id"], sb["id"], "first"], out
    assert api.get(sb["id"]).json["boot"] == "pool"
    # The pool refills behind it.
    p = wait_ready(api, 2, timeout_s=60)
    assert p["counts"]["hits"] >= 1 and p["counts"]["fills"] >= 3, p
    assert sb["id"] not in pooled_ids(pd)
    api.delete_ok(sb["id"])


def test_pooled_sandboxes_share_nothing(pd, api):
    """Two creates from the pool: their RNG output, boot id, hostname and
    files are their own; a VM is never handed out twice, and nothing of
    an earlier sandbox reaches a later one."""
    wait_ready(api, 2)
    a = api.create_ok(**SHAPE, env={"SECRET_OF_A": "a-only"})
    b = api.create_ok(**SHAPE)
    assert a["boot"] == b["boot"] == "pool", (a, b)
    probe = ("head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; cat /proc/sys/kernel/random/boot_id; "
             "hostname; cat /sys/class/net/eth0/address")
    oa, ob = sh(api, a["id"], probe).split(), sh(api, b["id"], probe).split()
    assert len(oa) == len(ob) == 4, (oa, ob)
    for x, y, what in zip(oa, ob, ("RNG output", "boot id", "hostname", "MAC")):
        assert x != y, f"{what} shared by two pooled sandboxes: {x}"
    # A file and env of a's; deleted; the next pooled sandbox has neither.
    sh(api, a["id"], "echo mine > /root/a-was-here; sync")
    api.delete_ok(a["id"])
    api.delete_ok(b["id"])
    wait_ready(api, 1)
    c = api.create_ok(**SHAPE)
    assert c["boot"] == "pool" and c["id"] not in (a["id"], b["id"]), c
    out = sh(api, c["id"], "ls /root; env")
    assert "a-was-here" not in out and "SECRET_OF_A" not in out, out
    api.delete_ok(c["id"])


def test_pool_memory_in_metrics(pd, api):
    wait_ready(api, 2)
    text = api.request("GET", "/metrics").raw.decode()
    labels = 'template="minimal",vcpus="1",memory_mib="256",tenant=""'
    m = re.search(r"^airlock_pool_pss_bytes\{%s\} (\d+)$" % re.escape(labels), text, re.M)
    assert m and int(m.group(1)) > 8 << 20, text
    assert re.search(r"^airlock_pool_ready\{%s\} 2$" % re.escape(labels), text, re.M), text
    assert re.search(r"^airlock_pool_size\{%s\} 2$" % re.escape(labels), text, re.M), text
    total = int(re.search(r"^airlock_pools_pss_bytes (\d+)$", text, re.M).group(1))
    assert total >= int(m.group(1)), text
    assert re.search(r"^airlock_pools_shedding 0$", text, re.M), text
    listing = pools(api)
    assert listing["host_memory"]["total_bytes"] > listing["host_memory"]["available_bytes"] > 0, listing
    assert listing["host_memory"]["high_pct"] == 80 and listing["host_memory"]["shedding"] is False, listing


def test_pooled_vm_that_dies_is_replaced(pd, api):
    wait_ready(api, 2)
    victim = sorted(pooled_ids(pd))[0]
    pids = [pid for pid, argv in pd.qemus().items() if f"airlock-{victim} " in argv + " "]
    assert pids, victim
    os.kill(pids[0], signal.SIGKILL)
    wait_for(lambda: (pool_of(api) or {}).get("counts", {}).get("lost", 0) >= 1, 30, "the dead VM noticed")
    p = wait_ready(api, 2, timeout_s=60)
    assert victim not in pooled_ids(pd), p
    sb = api.create_ok(**SHAPE)
    assert sb["boot"] == "pool" and sb["id"] != victim, sb
    assert sh(api, sb["id"], "echo ok").strip() == "ok"
    api.delete_ok(sb["id"])


def test_pool_api_and_tenant_pools(pd, api, tenant_tokens):
    a, b = tenant_tokens["pa"], tenant_tokens["pb"]
    # Bad requests: clear 400s, nothing changed.
    for body, field in [({"size": 1}, "template"), ({"template": "minimal"}, "size"),
                        ({"template": "minimal", "size": 65}, "size"),
                        ({"template": "Bad Name", "size": 1}, "template"),
                        ({"template": "minimal", "size": 1, "vcpus": 0}, "vcpus"),
                        ({"template": "minimal", "size": 1, "color": "red"}, "color"),
                        ({"template": "nosuch", "size": 1}, "nosuch")]:
        r = api.request("PUT", "/v1/pools", body=body)
        assert r.status == 400 and r.error_code == "invalid_argument" and field in r.error_message, (body, r)
    assert len(pools(api)["pools"]) == 1
    # A tenant sets its own pool, within its quotas; not another's.
    r = a.request("PUT", "/v1/pools", body={"template": "minimal", "size": 1, "tenant": "pb"})
    assert r.status == 403, r
    assert api.request("PUT", "/v1/tenants/pa", body={"max_sandboxes": 2}).status == 200
    r = a.request("PUT", "/v1/pools", body={"template": "minimal", "size": 3})
    assert r.status == 429 and r.error_code == "quota_exceeded", r
    r = a.request("PUT", "/v1/pools", body={"template": "minimal", "size": 1})
    assert r.status == 200, r
    # pa sees the shared pool and its own, pb only the shared one; of the
    # shared one a tenant sees the shape and readiness, not other tenants' counts.
    assert {p["tenant"] for p in pools(a)["pools"]} == {None, "pa"}
    seen_b = pools(b)
    assert [p["tenant"] for p in seen_b["pools"]] == [None] and "host_memory" not in seen_b, seen_b
    assert set(seen_b["pools"][0]) == {"tenant", "template", "vcpus", "memory_mib", "size", "ready", "filling"}
    own_view = [p for p in pools(a)["pools"] if p["tenant"] == "pa"][0]
    assert "counts" in own_view and "pss_bytes" in own_view, own_view
    wait_ready(api, 1, tenant="pa")
    wait_ready(api, 2)
    own = pooled_ids(pd)
    # pb's create comes from the shared pool, pa's from its own.
    sb_b = b.request("POST", "/v1/sandboxes", body=SHAPE).json
    assert sb_b["boot"] == "pool" and sb_b["tenant"] == "pb", sb_b
    assert pool_of(api, tenant="pa")["ready"] == 1
    sb_a = a.request("POST", "/v1/sandboxes", body=SHAPE).json
    assert sb_a["boot"] == "pool" and sb_a["tenant"] == "pa" and sb_a["id"] in own, sb_a
    assert pool_of(api, tenant="pa")["counts"]["hits"] == 1
    # pa's own pool refills only within its quota: 1 live + 1 pooled = 2.
    wait_ready(api, 1, tenant="pa", timeout_s=60)
    sb_a2 = a.request("POST", "/v1/sandboxes", body=SHAPE).json
    assert sb_a2.get("boot") == "pool", sb_a2
    time.sleep(2)  # room for a wrong refill to happen
    assert pool_of(api, tenant="pa")["ready"] == 0, "a refill would pass pa's quota of 2"
    # Size 0 removes a pool and stops its VMs.
    for s in (sb_a, sb_a2, sb_b):
        api.delete_ok(s["id"])
    wait_ready(api, 1, tenant="pa", timeout_s=60)
    before = pooled_ids(pd)
    r = api.request("PUT", "/v1/pools", body={"template": "minimal", "size": 0, "tenant": "pa"})
    assert r.status == 200 and "pa" not in {p["tenant"] for p in r.json["pools"]}, r
    wait_for(lambda: len(pooled_ids(pd)) == len(before) - 1, 30, "the tenant pool's VM stopped")


def test_cold_and_other_shapes_do_not_use_the_pool(pd, api):
    wait_ready(api, 2)
    sb = api.create_ok(template="minimal", vcpus=1, memory_mib=384)
    assert sb["boot"] == "template", sb
    api.delete_ok(sb["id"])
    assert pool_of(api)["ready"] == 2


def test_memory_high_water_mark_sheds_the_pool(tmp_path):
    """Above --pool-memory-high-pct the pool sheds its VMs and stops filling;
    below it, it fills again. The mark is set a little above what the host
    uses now, and a process of the test's then takes memory past it."""
    def used_pct():
        info = dict(line.split(":", 1) for line in open("/proc/meminfo"))
        total = int(info["MemTotal"].split()[0])
        avail = int(info["MemAvailable"].split()[0])
        return (total - avail) * 100 / total, total
    pct, total_kib = used_pct()
    mark = int(pct) + 4
    if mark > 90:
        pytest.skip(f"the host uses {pct:.0f}% of its memory already")
    d = Daemon(tmp_path, extra_args=["--warm-pool", "minimal=2", "--pool-memory-high-pct", str(mark)]).start()
    hog = None
    try:
        wait_ready(d.api, 2)
        # Take 6% of the host's memory (touched, so it counts) and hold it.
        hog_mib = int(total_kib * 0.06 / 1024)
        hog = subprocess.Popen([sys.executable, "-c",
                                f"import sys,time\nb=bytearray({hog_mib}<<20)\n"
                                "for i in range(0,len(b),4096): b[i]=1\n"
                                "print('held',flush=True)\ntime.sleep(600)"],
                               stdout=subprocess.PIPE, text=True)
        assert hog.stdout.readline().strip() == "held"
        wait_for(lambda: pools(d.api)["host_memory"]["shedding"], 30, "the pool noticing the mark")
        wait_for(lambda: pool_of(d.api)["ready"] == 0, 30, "the pool shed")
        p = pool_of(d.api)
        assert p["counts"]["shed"] >= 2, p
        text = d.api.request("GET", "/metrics").raw.decode()
        assert re.search(r"^airlock_pools_shedding 1$", text, re.M), text
        # Creates still work meanwhile: the restore path.
        sb = d.api.create_ok(**SHAPE)
        assert sb["boot"] == "template", sb
        d.api.delete_ok(sb["id"])
        time.sleep(1)
        assert pool_of(d.api)["ready"] == 0, "nothing is filled above the mark"
        hog.kill()
        hog.wait()
        hog = None
        wait_ready(d.api, 2, timeout_s=60)
        assert not pools(d.api)["host_memory"]["shedding"]
    finally:
        if hog:
            hog.kill()
        leftovers = d.cleanup()
        assert not leftovers, leftovers


def test_restart_stops_pooled_vms_and_refills(restart_daemon):
    d = restart_daemon
    d.extra_args = ["--warm-pool", "minimal=1"]
    d.stop()
    d.start()
    wait_ready(d.api, 1)
    old = pooled_ids(d)
    assert len(old) == 1
    sb = d.api.create_ok(**SHAPE)
    assert sb["boot"] == "pool"
    wait_ready(d.api, 1, timeout_s=60)
    old = pooled_ids(d)
    # A crash (SIGKILL) leaves the pooled VM to the next start, which stops it.
    d.proc.kill()
    d.proc.wait()
    d.start()
    wait_ready(d.api, 1)
    assert not (old & vm_ids(d)), "a restart stops the pool's VMs of the daemon before"
    assert not any(os.path.exists(d.sandbox_dir(i)) for i in old)
    # The sandbox that was handed out lives on.
    assert d.api.get(sb["id"]).json["state"] == "running"
    assert sh(d.api, sb["id"], "hostname").strip() == sb["id"]
    d.api.delete_ok(sb["id"])
    # A clean stop stops them too.
    left = pooled_ids(d)
    assert len(left) == 1
    d.stop()
    assert not (left & vm_ids(d)), left
    assert not any(os.path.exists(d.sandbox_dir(i)) for i in left)
