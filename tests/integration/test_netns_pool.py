# SPDX-License-Identifier: Apache-2.0
"""The pool of network namespaces made ahead (airlockd --netns-pool): a
create takes a ready namespace and only gives its tap to the sandbox's jail
uid. What is checked is what an operator would look at: the namespaces the
daemon holds (its fds), whose tap each one is (`ip -d link`), and the
metrics."""
import grp
import os
import pwd
import re
import subprocess

from conftest import AIRLOCKD, Daemon, metrics, qemu_processes, wait_for

POOL_DEFAULT = 4


def held_namespaces(pid):
    """{inode: /proc path} of the network namespaces the process holds as fds."""
    out = {}
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        m = re.fullmatch(r"net:\[(\d+)\]", link)
        if m:
            out[int(m.group(1))] = f"{fd_dir}/{fd}"
    return out


def tap_owner(ns_path):
    """(user, group) of tap0 in that namespace, as `ip -d link` shows them."""
    r = subprocess.run(["nsenter", f"--net={ns_path}", "ip", "-d", "link", "show", "tap0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    m = re.search(r"\btun type tap\b.*\bpersist on user (\S+) group (\S+)", r.stdout)
    assert m, r.stdout
    # ip names the ids it finds in /etc/passwd and /etc/group (root).
    user = int(m.group(1)) if m.group(1).isdigit() else pwd.getpwnam(m.group(1)).pw_uid
    group = int(m.group(2)) if m.group(2).isdigit() else grp.getgrnam(m.group(2)).gr_gid
    return user, group


def vmm_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))


def pooled(d):
    """The daemon's namespaces whose tap is still root's: the ready ones."""
    return {ino: p for ino, p in held_namespaces(d.proc.pid).items() if tap_owner(p) == (0, 0)}


def test_pool_fills_and_a_create_takes_one(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        wait_for(lambda: metrics(d.api)["airlock_netns_pool_ready"] == POOL_DEFAULT, 60, "a full pool")
        ready = pooled(d)
        # SECURITY: every ready tap has an owner (root): a tap without one
        # would be open to any process of its namespace.
        assert len(ready) == POOL_DEFAULT and len(held_namespaces(d.proc.pid)) == POOL_DEFAULT, \
            held_namespaces(d.proc.pid)

        sb = d.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
        # The namespace works: the gateway's DNS listener answers through the
        # tap and the rules (the default policy denies every name, so no
        # query leaves).
        r = d.api.exec(sb["id"], ["nslookup", "www.denied.test"])
        assert r.status == 200 and "10.0.2.2:53" in r.json["stdout"] and "NXDOMAIN" in r.json["stdout"], r
        m = metrics(d.api)
        # The template's first boot and the sandbox each took a ready one.
        assert m['airlock_netns_takes_total{from="pool"}'] == 2, m
        assert m['airlock_netns_takes_total{from="new"}'] == 0, m

        qemu = list(qemu_processes(needle=sb["id"]))
        assert len(qemu) == 1, qemu
        ns = os.stat(f"/proc/{qemu[0]}/ns/net").st_ino
        assert ns in held_namespaces(d.proc.pid) and ns not in pooled(d)
        uid = vmm_uid(qemu[0])
        assert uid >= 1000 and tap_owner(f"/proc/{qemu[0]}/ns/net") == (uid, uid)

        # Refilled with fresh namespaces; the sandbox's is never offered again.
        wait_for(lambda: len(pooled(d)) == POOL_DEFAULT, 60, "the pool refilled")
        assert ns not in pooled(d)
        d.api.delete_ok(sb["id"])
        wait_for(lambda: ns not in held_namespaces(d.proc.pid), 30, "the daemon let the sandbox's namespace go")
        assert len(pooled(d)) == POOL_DEFAULT
    finally:
        d.cleanup()
    assert not d.proc or d.proc.poll() is not None


def test_no_pool(tmp_path):
    d = Daemon(tmp_path, extra_args=["--netns-pool", "0", "--template-snapshots", "off"]).start()
    try:
        assert metrics(d.api)["airlock_netns_pool_ready"] == 0
        assert held_namespaces(d.proc.pid) == {}
        sb = d.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
        m = metrics(d.api)
        assert m['airlock_netns_takes_total{from="new"}'] == 1 and m['airlock_netns_takes_total{from="pool"}'] == 0
        qemu = list(qemu_processes(needle=sb["id"]))
        assert len(qemu) == 1 and tap_owner(f"/proc/{qemu[0]}/ns/net") == (vmm_uid(qemu[0]),) * 2
        r = d.api.exec(sb["id"], ["nslookup", "www.denied.test"])
        assert r.status == 200 and "NXDOMAIN" in r.json["stdout"], r
        d.api.delete_ok(sb["id"])
    finally:
        d.cleanup()


def test_pool_size_is_bounded(tmp_path):
    r = subprocess.run([AIRLOCKD, "--state-dir", str(tmp_path), "--socket", str(tmp_path / "s"), "--netns-pool",
                        "65"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--netns-pool must be from 0 to 64" in r.stderr, r
