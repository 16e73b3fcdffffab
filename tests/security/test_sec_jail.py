# SPDX-License-Identifier: Apache-2.0
"""Category 8: the jail itself, read from /proc of a running VMM (the
attacker's): every VMM runs inside airlock-jailer (docs/jailer.md). One
test per jailer step."""
import os
import re
import signal
import stat
import tempfile

import pytest

import secutil as su
from secutil import attempt

def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


@pytest.fixture(scope="module")
def vmm(attacker, peer):
    return {"pid": su.vmm_pid(attacker["id"]), "peer_pid": su.vmm_pid(peer["id"]), "sid": attacker["id"]}


def test_vmm_runs_as_a_uid_of_its_own(vmm, secd):
    with attempt("jail", "vmm-uid", "the VMM runs as a non-root uid/gid unique to its sandbox"):
        a, b = status(vmm["pid"]), status(vmm["peer_pid"])
        uids = set(a["Uid"].split()) | set(a["Gid"].split())
        assert "0" not in uids, a["Uid"]
        assert a["Uid"].split()[0] != b["Uid"].split()[0], (a["Uid"], b["Uid"])
        assert a["Uid"].split()[0] != str(os.stat(secd.state_dir).st_uid)


def test_vmm_has_no_capabilities(vmm):
    with attempt("jail", "vmm-capabilities", "the VMM's effective, permitted, inheritable, ambient and bounding sets are empty"):
        s = status(vmm["pid"])
        for k in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"):
            assert int(s[k], 16) == 0, (k, s[k])


def test_vmm_has_no_new_privs_and_seccomp(vmm):
    with attempt("jail", "vmm-seccomp", "the VMM has no_new_privs and a seccomp filter (mode 2)"):
        s = status(vmm["pid"])
        assert s.get("NoNewPrivs") == "1", s.get("NoNewPrivs")
        assert s.get("Seccomp") == "2", s.get("Seccomp")
        assert int(s.get("Seccomp_filters", "0")) >= 1


def test_vmm_namespaces(vmm, secd):
    with attempt("jail", "vmm-namespaces", "the VMM has its own mount and pid namespaces (and the sandbox's network one)"):
        d = secd.proc.pid
        for ns in ("mnt", "pid", "net"):
            mine = os.readlink(f"/proc/{vmm['pid']}/ns/{ns}")
            assert mine != os.readlink(f"/proc/{d}/ns/{ns}"), ns
            assert mine != os.readlink(f"/proc/{vmm['peer_pid']}/ns/{ns}") or ns == "pid", ns
        with open(f"/proc/{vmm['pid']}/status") as f:
            nspid = [line.split()[1:] for line in f if line.startswith("NSpid:")][0]
        assert len(nspid) >= 2, nspid  # a pid in a namespace of its own


def test_vmm_root_holds_only_what_it_needs(vmm, secd):
    with attempt("jail", "vmm-root", "the VMM's root is its jail directory: no host files, no state dir, no other sandbox"):
        root = f"/proc/{vmm['pid']}/root"
        # Its "/" is the sandbox's vm/ directory (a bind of it), never the host's.
        st, host, jail = os.stat(root), os.stat("/"), os.stat(secd.vm_dir(vmm["sid"]))
        assert (st.st_dev, st.st_ino) != (host.st_dev, host.st_ino)
        assert (st.st_dev, st.st_ino) == (jail.st_dev, jail.st_ino)
        for host_path in ("etc/shadow", "etc/passwd", "home", "root", "usr/bin/sh", "bin/sh",
                          secd.state_dir.lstrip("/"), su.IMAGES.lstrip("/")):
            assert not os.path.lexists(os.path.join(root, host_path)), host_path
        entries = set(os.listdir(root))
        assert len(entries) <= 16, sorted(entries)


def test_vmm_cgroup_limits(vmm, api):
    with attempt("jail", "vmm-cgroup", "the VMM is in a cgroup of its sandbox with memory (incl. swap), pids and cpu limits"):
        with open(f"/proc/{vmm['pid']}/cgroup") as f:
            lines = [ln.strip().split(":", 2) for ln in f if ln.strip()]
        paths = {ctrl: path for _, ctrls, path in lines for ctrl in (ctrls.split(",") if ctrls else [""])}
        assert any(vmm["sid"] in p for p in paths.values()), paths
        mem_mib = api.get(vmm["sid"]).json["memory_mib"]
        if "" in paths and len(paths) == 1:  # cgroup v2
            base = "/sys/fs/cgroup" + paths[""]
            limits = {n: open(os.path.join(base, n)).read().strip() for n in ("memory.max", "pids.max", "cpu.max")}
            assert limits["memory.max"] != "max" and int(limits["memory.max"]) <= (mem_mib + 1024) << 20, limits
            assert limits["pids.max"] != "max", limits
        else:  # cgroup v1
            mem = open(f"/sys/fs/cgroup/memory{paths['memory']}/memory.limit_in_bytes").read().strip()
            assert int(mem) <= (mem_mib + 1024) << 20, mem
            memsw = f"/sys/fs/cgroup/memory{paths['memory']}/memory.memsw.limit_in_bytes"
            if os.path.exists(memsw):
                assert int(open(memsw).read()) <= (mem_mib + 1024) << 20
            pids = open(f"/sys/fs/cgroup/pids{paths['pids']}/pids.max").read().strip()
            assert pids != "max", pids


def test_vmm_rlimits_and_environment(vmm):
    with attempt("jail", "vmm-rlimits-env", "the VMM has file size, open files and process rlimits, and an empty environment"):
        limits = open(f"/proc/{vmm['pid']}/limits").read()

        def soft(name):
            m = re.search(rf"^{name}\s+(\S+)", limits, re.M)
            assert m, name
            return m.group(1)
        for name in ("Max file size", "Max open files", "Max processes"):
            assert soft(name) != "unlimited", (name, limits)
        assert int(soft("Max open files")) <= 4096, limits
        env = open(f"/proc/{vmm['pid']}/environ", "rb").read().split(b"\0")
        # Exactly the jailer's PATH: nothing of the daemon's environment.
        assert [e for e in env if e] == [b"PATH=/usr/sbin:/usr/bin:/sbin:/bin"], env


def _template_memfds(pid):
    """The fds of VMM pid that are its template snapshot's memory."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:airlock-template"):
                out.append(int(fd))
        except OSError:
            pass
    return out


def test_template_memory_cannot_be_changed(vmm, api):
    """Every sandbox of a template maps the same memfd (its RAM at agent
    ready) copy-on-write: a VMM that could write it would reach every
    later sandbox of that template. The memfd is sealed: not even root
    holding it can write, grow, shrink or map it shared-writable."""
    import fcntl
    import mmap
    assert api.get(vmm["sid"]).json["boot"] == "template"
    fds = _template_memfds(vmm["pid"])
    assert fds, "the attacker's VMM maps no template memory"
    with attempt("jail", "template-memory-write", "write, truncate, grow, allocate and map shared-writable the template's memory (the VMM's memfd, as root)"):
        f = os.open(f"/proc/{vmm['pid']}/fd/{fds[0]}", os.O_RDWR)
        try:
            F_GET_SEALS = 1034
            seals = fcntl.fcntl(f, F_GET_SEALS)
            assert seals & 0x0f == 0x0f, hex(seals)  # SEAL | SHRINK | GROW | WRITE
            size = os.fstat(f).st_size
            before = os.pread(f, 4096, 4096)
            for what, op in (("write", lambda: os.pwrite(f, b"\xcc" * 4096, 4096)),
                             ("truncate", lambda: os.ftruncate(f, 4096)),
                             ("grow", lambda: os.ftruncate(f, size + 4096)),
                             ("allocate", lambda: os.posix_fallocate(f, size, 4096)),
                             ("mmap-shared", lambda: mmap.mmap(f, 4096, mmap.MAP_SHARED,
                                                               mmap.PROT_READ | mmap.PROT_WRITE))):
                try:
                    op()
                except (OSError, PermissionError):
                    continue
                raise AssertionError(f"{what} of the sealed template memory succeeded")
            assert os.pread(f, 4096, 4096) == before and os.fstat(f).st_size == size
        finally:
            os.close(f)


def test_recover_does_not_follow_a_symlink_left_as_the_disk(secd, api):
    """A VMM owns its directory (its jail root): one its guest took over can
    replace its disk with a symlink naming a host file. A recover (a cold
    boot of that disk) gives the disk to the next VMM's uid, mode 0600:
    never the file the link names."""
    sid = api.create_ok(template="minimal", vcpus=1, memory_mib=256)["id"]
    fd, target = tempfile.mkstemp(prefix="airlock-sec-target-", dir="/var/tmp")
    os.close(fd)
    os.chmod(target, 0o644)
    try:
        with attempt("jail", "disk-symlink-recover", "a symlink to a host file left as the VMM's disk, then a recover without memory: the file keeps its owner and mode"):
            os.kill(su.vmm_pid(sid), signal.SIGKILL)
            su.wait_for(lambda: api.get(sid).json["state"] == "error", 60, f"{sid} in state error")
            disk = os.path.join(secd.vm_dir(sid), "disk.qcow2")
            os.unlink(disk)
            os.symlink(target, disk)
            r = api.request("POST", f"/v1/sandboxes/{sid}/recover", body={"memory": False})
            st = os.stat(target)
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o644), (r, oct(st.st_mode))
            assert r.status != 200, r
    finally:
        api.delete(sid)
        os.unlink(target)
