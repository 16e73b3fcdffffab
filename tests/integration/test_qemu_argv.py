# SPDX-License-Identifier: Apache-2.0
"""qemuutil.qemu_argv, the command line the tests and the seccomp
derivation (security/seccomp/derive-profile.py) start QEMU with, is
airlockd's: compared with /proc/PID/cmdline of the QEMUs a real airlockd
starts (src/daemon/vmm/qemu/vmm-qemu.c, qemu_spawn) in each of its four forms: a cold
boot, a restore of a snapshot, the boot of a template's snapshot (RAM in a
shared memfd) and a restore from it (that memfd mapped private). Each
VM's NIC has a MAC of its own (a sandbox's: GET .../network).

Root only (the daemon jails its VMMs). Run: pytest-3 -v tests/integration/test_qemu_argv.py
"""
import os
import re
import threading
import time

import pytest

import lifecycleutil as lu
import qemuutil as q
from conftest import qemu_processes

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="airlockd needs root"),
    pytest.mark.skipif(os.environ.get("AIRLOCK_TEST_BACKEND", "qemu") != "qemu",
                       reason="the QEMU backend's command line"),
]


def cmdline(pid):
    """Its argv ([] once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode() for a in raw.rstrip(b"\0").split(b"\0")] if raw else []


def vmm_argv(daemon, sid):
    """The command line of the QEMU of sandbox sid (its -name is airlock-ID)."""
    pids = [pid for pid in daemon.qemus(sid) if f"airlock-{sid}" in cmdline(pid)]
    assert len(pids) == 1, (sid, daemon.qemus())
    return cmdline(pids[0])


def comparable(argv):
    """The host's TSC frequency is read from /proc/cpuinfo by each side at its
    own time ("cpu MHz" may move on a host that scales its clock)."""
    return [re.sub(r"tsc_early_khz=[1-9][0-9]*", "tsc_early_khz=KHZ", a) for a in argv]


def assert_same(got, want):
    got, want = comparable(got), comparable(want)
    assert got == want, "\n".join(f"  {i}: daemon {g!r} != qemuutil {w!r}"
                                  for i, (g, w) in enumerate(zip(got, want)) if g != w) or (got, want)


class Watch:
    """Collects the command lines of QEMUs started from the daemon's state
    dir while it runs (a template's boot lives only for its build)."""

    def __init__(self, daemon):
        self.daemon, self.seen, self.stop = daemon, {}, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            for pid in qemu_processes(self.daemon.state_dir):
                argv = cmdline(pid)
                if "-name" in argv:
                    self.seen.setdefault(argv[argv.index("-name") + 1], argv)
            time.sleep(0.02)

    def done(self):
        self.stop.set()
        self.thread.join()
        return self.seen


def guest_mac(api, sid):
    """The sandbox's own MAC (GET .../network): every sandbox's QEMU has it."""
    r = api.request("GET", f"/v1/sandboxes/{sid}/network")
    assert r.status == 200, r
    mac = r.json["guest"]["mac"]
    assert mac != q.NET_GUEST_MAC, mac
    return mac


def test_template_snapshot_boot_and_restore(daemon, api):
    # The first create of a template boots it once (memory-backend-file on
    # a memfd at fd 8, shared), then restores from it (the same, private).
    watch = Watch(daemon)
    try:
        sb = api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    finally:
        seen = watch.done()
    assert sb["boot"] == "template", sb
    builds = [name for name in seen if name.startswith("airlock-tpl-")]
    assert len(builds) == 1, sorted(seen)
    # The build's NIC has its namespace's own MAC (no sandbox reports it).
    nic = [a for a in seen[builds[0]] if a.startswith("virtio-net-device,")]
    assert len(nic) == 1 and re.fullmatch(r"virtio-net-device,netdev=n0,mac=02(:[0-9a-f]{2}){5}", nic[0]), nic
    build_mac = nic[0].rsplit("=", 1)[1]
    assert build_mac != q.NET_GUEST_MAC
    assert_same(seen[builds[0]], q.qemu_argv(builds[0], mem_shared=True, mac=build_mac))
    assert_same(vmm_argv(daemon, sb["id"]), q.qemu_argv(f"airlock-{sb['id']}", restore=True, mem_shared=False,
                                                            mac=guest_mac(api, sb["id"])))
    api.delete_ok(sb["id"])


def test_cold_boot_and_snapshot_restore(daemon, api):
    sb = api.create_ok(template="minimal", vcpus=1, memory_mib=256, boot="cold")
    assert sb["boot"] == "cold", sb
    assert_same(vmm_argv(daemon, sb["id"]), q.qemu_argv(f"airlock-{sb['id']}", mac=guest_mac(api, sb["id"])))
    snap = lu.snapshot(api, sb["id"], "argv")
    api.delete_ok(sb["id"])
    rb = lu.restore(api, snap["id"])
    assert rb["boot"] == "snapshot", rb
    assert_same(vmm_argv(daemon, rb["id"]), q.qemu_argv(f"airlock-{rb['id']}", restore=True, mac=guest_mac(api, rb["id"])))
    api.delete_ok(rb["id"])
