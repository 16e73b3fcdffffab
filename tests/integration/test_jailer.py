# SPDX-License-Identifier: Apache-2.0
"""airlock-jailer, driven as airlockd will drive it, with every step checked
from /proc of the jailed process (never from the jailer's own word).

Most tests jail a small payload (/usr/bin/sleep with --bind-ro /usr); one
boots real QEMU (TCG) with airlockd's command line under the shipped seccomp
profile, talks to the guest agent through the jail's channel socket, and takes
and restores a snapshot as airlockd does (x-ignore-shared, QMP getfd +
migrate fd:, then -incoming defer + migrate-incoming fd:): nothing but QEMU
runs in the jail.
Root only. Run: pytest-3 -v tests/integration/test_jailer.py
"""
import json
import os
import pathlib
import random
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from conftest import IMAGES, JAILER, ROOT, cgroup_mounts, wait_for

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_harness as ah  # noqa: E402
import qemuutil as q  # noqa: E402

PROFILE = os.path.join(ROOT, "security", "seccomp", "qemu-x86_64.json")
CG_PARENT = "airlock-test"
SLEEP = "/usr/bin/sleep"
ENV_PATH = b"PATH=/usr/sbin:/usr/bin:/sbin:/bin\0"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the jailer needs root"),
    pytest.mark.skipif(not os.path.exists(JAILER), reason="build/airlock-jailer missing (make all)"),
]


# ----------------------------------------------------------------- helpers

def cgroup_dirs(sid):
    return {c: os.path.join(m, CG_PARENT, sid) for c, (m, _v) in cgroup_mounts().items()}


def no_cgroup_left(sid):
    return not any(os.path.exists(d) for d in cgroup_dirs(sid).values())


def status_fields(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.split()
    return fields


def ns_ino(pid, ns):
    return os.stat(f"/proc/{pid}/ns/{ns}").st_ino


def only_child(pid, timeout_s=10):
    """The VMM under --new-pid-ns: the supervising jailer's one child."""
    path = f"/proc/{pid}/task/{pid}/children"
    wait_for(lambda: open(path).read().split(), timeout_s, "the jailer's child")
    kids = open(path).read().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def wait_exec(pid, exe, timeout_s=10):
    def done():
        try:
            return os.readlink(f"/proc/{pid}/exe") == exe
        except OSError:
            return False
    wait_for(done, timeout_s, f"{pid} to exec {exe}")


def host_merged_links():
    return {n for n in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
            if os.path.islink("/" + n) and os.readlink("/" + n) == "usr/" + n}


class Netns:
    def __init__(self, name, tap_user=None):
        self.name = name
        subprocess.run(["ip", "netns", "add", name], check=True)
        if tap_user is not None:
            subprocess.run(["ip", "-n", name, "tuntap", "add", "dev", "tap0", "mode", "tap", "user", str(tap_user)],
                           check=True)
            subprocess.run(["ip", "-n", name, "link", "set", "tap0", "up"], check=True)
        self.fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
        self.ino = os.fstat(self.fd).st_ino

    def close(self):
        os.close(self.fd)
        subprocess.run(["ip", "netns", "del", self.name])


class Jail:
    """One jail root (owned by the jail's uid, as airlockd will chown it) and
    the id, uid and gid that go with it."""

    def __init__(self, base, tag):
        self.id = f"jt-{tag}-{os.getpid()}-{random.randrange(1 << 20):x}"
        self.uid = self.gid = random.randrange(62000, 64000)
        self.dir = os.path.join(base, self.id)
        self.root = os.path.join(self.dir, "root")
        os.makedirs(self.root)
        os.chmod(self.dir, 0o755)
        os.chown(self.root, self.uid, self.gid)
        os.chmod(self.root, 0o755)
        self.procs = []

    def argv(self, *extra, payload=(SLEEP, "30")):
        return [JAILER, "--id", self.id, "--root", self.root, "--uid", str(self.uid), "--gid", str(self.gid),
                "--cgroup-parent", CG_PARENT, *extra, "--", *payload]

    def start(self, *extra, payload=(SLEEP, "30"), pass_fds=(), stderr=subprocess.PIPE):
        p = subprocess.Popen(self.argv(*extra, payload=payload), pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        self.procs.append(p)
        return p

    def run(self, *extra, payload=(SLEEP, "30"), pass_fds=(), timeout=30):
        return subprocess.run(self.argv(*extra, payload=payload), pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)

    def cleanup_cmd(self):
        return subprocess.run([JAILER, "--cleanup", "--id", self.id, "--cgroup-parent", CG_PARENT],
                              capture_output=True, text=True, timeout=30)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        # The VMM may outlive a killed jailer by a moment (pdeathsig).
        wait_for(lambda: self.cleanup_cmd().returncode == 0, 10, f"--cleanup of {self.id}")


@pytest.fixture
def jail_base(tmp_path):
    # tmp_path is under /tmp: sticky and root-owned on the way, like the
    # state dir's root-owned parents.
    base = tmp_path / "jails"
    base.mkdir(mode=0o755)
    return str(base)


@pytest.fixture
def bind_tree():
    """A scratch dir for things to bind: not under /tmp, which is the jail's
    own and cannot be bound from."""
    import tempfile
    d = tempfile.mkdtemp(prefix="airlock-test-jailer-", dir="/var/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def jail(jail_base):
    j = Jail(jail_base, "p")
    yield j
    j.close()


@pytest.fixture
def netns():
    n = Netns(f"airlock-jt-{os.getpid()}-{random.randrange(1 << 20):x}")
    yield n
    n.close()


def assert_refused(result, needle, sid):
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("airlock-jailer: "), lines
    assert needle in lines[0], lines[0]
    assert no_cgroup_left(sid), cgroup_dirs(sid)


# ----------------------------------------------------------------- --check

def test_check_reports_host_support():
    r = subprocess.run([JAILER, "--check"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr
    kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
    for c in ("cpu", "memory", "pids"):
        assert kv[f"cgroup.{c}"].startswith(("v1:", "v2:")), kv
    assert kv["cgroup"] in ("v1", "v2", "hybrid")
    assert kv["seccomp"] == "filter" and "kill_process" in kv["seccomp.actions"]
    assert set(kv["namespaces"].split(",")) >= {"mnt", "ipc", "uts", "pid", "net"}
    assert kv["ok"] == "yes"


# ----------------------------------------------------------------- every step, from /proc

def check_jailed(pid, j, netns, *, new_pid_ns):
    st = status_fields(pid)
    # Step 7: uid/gid, capabilities, no_new_privs.
    assert st["Uid"] == [str(j.uid)] * 4 and st["Gid"] == [str(j.gid)] * 4, (st["Uid"], st["Gid"])
    assert st["Groups"] == [], st["Groups"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[cap][0], 16) == 0, (cap, st[cap])
    assert st["NoNewPrivs"] == ["1"]
    # Step 8: a seccomp filter (mode 2).
    assert st["Seccomp"] == ["2"], st["Seccomp"]
    # Step 5 and 6: namespaces.
    me = os.getpid()
    assert ns_ino(pid, "net") == netns.ino
    for ns in ("mnt", "ipc", "uts"):
        assert ns_ino(pid, ns) != ns_ino(me, ns), ns
    if new_pid_ns:
        assert ns_ino(pid, "pid") != ns_ino(me, "pid")
        assert st["NSpid"][-1] == "1", st["NSpid"]  # pid 1 inside
    else:
        assert ns_ino(pid, "pid") == ns_ino(me, "pid")
    # Step 6: / holds only what was given.
    root = f"/proc/{pid}/root"
    assert set(os.listdir(root)) == {"dev", "proc", "tmp", "usr"} | host_merged_links(), os.listdir(root)
    assert os.stat(root).st_ino == os.stat(j.root).st_ino
    assert sorted(os.listdir(root + "/dev")) == ["fd", "net", "null", "stderr", "stdin", "stdout"]
    assert os.listdir(root + "/dev/net") == ["tun"]
    for node, host in (("null", "/dev/null"), ("net/tun", "/dev/net/tun")):
        s, h = os.stat(f"{root}/dev/{node}"), os.stat(host)
        assert stat.S_ISCHR(s.st_mode) and s.st_rdev == h.st_rdev
        assert (s.st_uid, s.st_gid) == (j.uid, j.gid) and stat.S_IMODE(s.st_mode) == stat.S_IMODE(h.st_mode) & 0o666
    mounts = {}
    with open(f"/proc/{pid}/mountinfo") as f:
        for line in f:
            parts = line.split()
            mounts[parts[4]] = set(parts[5].split(","))
    assert set(mounts) == {"/", "/dev", "/proc", "/tmp", "/usr"}, mounts
    assert {"nosuid", "nodev", "noexec"} <= mounts["/"]
    assert {"ro", "nosuid", "nodev"} <= mounts["/usr"]
    assert {"ro", "nosuid", "noexec"} <= mounts["/dev"]
    # Step 3: the cgroup and its limits.
    with open(f"/proc/{pid}/cgroup") as f:
        groups = {}
        for line in f:
            _, ctrls, path = line.strip().split(":", 2)
            for c in ctrls.split(","):
                groups[c or "v2"] = path
    want = f"/{CG_PARENT}/{j.id}"
    dirs = cgroup_dirs(j.id)
    for c, d in dirs.items():
        assert os.path.isdir(d)
        key = c if c in groups else "v2"
        assert groups[key] == want, (c, groups)
        assert str(pid) in open(os.path.join(d, "cgroup.procs")).read().split()
    mem = 64 * 1024 * 1024
    if os.path.exists(os.path.join(dirs["cpu"], "cpu.max")):
        assert open(os.path.join(dirs["cpu"], "cpu.max")).read().split() == ["50000", "100000"]
    else:
        assert open(os.path.join(dirs["cpu"], "cpu.cfs_quota_us")).read().strip() == "50000"
        assert open(os.path.join(dirs["cpu"], "cpu.cfs_period_us")).read().strip() == "100000"
    if os.path.exists(os.path.join(dirs["memory"], "memory.max")):
        assert int(open(os.path.join(dirs["memory"], "memory.max")).read()) == mem
        swap = os.path.join(dirs["memory"], "memory.swap.max")
        assert not os.path.exists(swap) or open(swap).read().strip() == "0"
    else:
        assert int(open(os.path.join(dirs["memory"], "memory.limit_in_bytes")).read()) == mem
        memsw = os.path.join(dirs["memory"], "memory.memsw.limit_in_bytes")
        assert not os.path.exists(memsw) or int(open(memsw).read()) == mem
    assert open(os.path.join(dirs["pids"], "pids.max")).read().strip() == "32"
    # Step 4: rlimits.
    limits = {}
    with open(f"/proc/{pid}/limits") as f:
        for line in f.readlines()[1:]:
            name, soft, hard = line[:26].strip(), line[26:47].strip(), line[47:68].strip()
            limits[name] = (soft, hard)
    assert limits["Max file size"] == ("1048576", "1048576")
    assert limits["Max open files"] == ("64", "64")
    assert limits["Max processes"] == ("50", "50")
    assert limits["Max core file size"] == ("0", "0")
    # Step 2: environment and fds.
    assert open(f"/proc/{pid}/environ", "rb").read() == ENV_PATH
    return sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))


LIMITS = ("--cpu-quota-pct", "50", "--memory-mib", "64", "--pids-max", "32", "--rlimit-fsize", "1048576",
          "--rlimit-nofile", "64", "--rlimit-nproc", "50")


def start_payload(j, netns, *extra):
    leak = os.open("/etc/hostname", os.O_RDONLY)  # inherited, not kept: must be closed
    keep = os.open("/dev/null", os.O_RDONLY)
    try:
        p = j.start("--netns-fd", str(netns.fd), *LIMITS, "--bind-ro", "/usr", "--dev", "/dev/null",
                    "--dev", "/dev/net/tun", "--keep-fd", str(keep), "--seccomp", PROFILE, *extra,
                    pass_fds=(netns.fd, leak, keep))
    finally:
        os.close(leak)
    return p, keep


def test_payload_in_a_new_pid_namespace(jail, netns):
    p, keep = start_payload(jail, netns, "--new-pid-ns")
    try:
        vmm = only_child(p.pid)
        wait_exec(vmm, SLEEP)
        fds = check_jailed(vmm, jail, netns, new_pid_ns=True)
        assert fds == [0, 1, 2, keep], fds
        # The supervising parent stays outside, in the same cgroup.
        assert ns_ino(p.pid, "pid") == ns_ino(os.getpid(), "pid")
        # --cleanup refuses while processes are in the cgroup.
        r = jail.cleanup_cmd()
        assert r.returncode == 1 and "still has processes" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1
        # SIGKILL of the jailer takes the VMM with it (parent-death signal).
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        wait_for(lambda: not os.path.exists(f"/proc/{vmm}"), 10, "the VMM to die with its jailer")
    finally:
        os.close(keep)
    r = jail.cleanup_cmd()
    assert r.returncode == 0, r.stderr
    assert no_cgroup_left(jail.id)
    # Idempotent: nothing left is fine.
    assert jail.cleanup_cmd().returncode == 0


def test_payload_in_the_callers_pid_namespace(jail, netns):
    p, keep = start_payload(jail, netns)
    try:
        wait_exec(p.pid, SLEEP)
        # Without --new-pid-ns the jailer becomes the VMM: same pid.
        fds = check_jailed(p.pid, jail, netns, new_pid_ns=False)
        assert fds == [0, 1, 2, keep], fds
        # A second jail with the same id is refused and leaves the first's
        # cgroup alone.
        r = jail.run("--bind-ro", "/usr")
        assert r.returncode == 1 and "already exists" in r.stderr, r.stderr
        assert str(p.pid) in open(os.path.join(cgroup_dirs(jail.id)["pids"], "cgroup.procs")).read().split()
    finally:
        os.close(keep)
    p.terminate()
    assert p.wait(10) == -signal.SIGTERM


def test_signals_are_forwarded_and_the_exit_status_kept(jail):
    # sh as pid 1 of the namespace, with a handler: SIGTERM to the jailer
    # reaches it, and the jailer exits with the VMM's status.
    p = jail.start("--bind-ro", "/usr", "--new-pid-ns",
                   payload=("/usr/bin/dash", "-c", "trap 'exit 7' TERM; while :; do sleep 0.05; done"))
    vmm = only_child(p.pid)
    wait_exec(vmm, "/usr/bin/dash")
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait(10) == 7
    # The cgroup stays for the caller (as after every VMM exit) until --cleanup.
    assert not no_cgroup_left(jail.id)
    assert jail.cleanup_cmd().returncode == 0
    r = jail.run("--bind-ro", "/usr", "--new-pid-ns", payload=("/usr/bin/dash", "-c", "exit 3"))
    assert r.returncode == 3, r.stderr
    assert jail.cleanup_cmd().returncode == 0
    # A VMM killed by a signal: the jailer dies of the same signal.
    p = jail.start("--bind-ro", "/usr", "--new-pid-ns")
    vmm = only_child(p.pid)
    wait_exec(vmm, SLEEP)
    os.kill(vmm, signal.SIGKILL)
    assert p.wait(10) == -signal.SIGKILL


def test_seccomp_kills_a_syscall_outside_the_profile(jail, tmp_path):
    # A profile without "uname" (coreutils' uname needs it): the payload
    # is killed by SIGSYS, not allowed through.
    with open(PROFILE) as f:
        prof = json.load(f)
    prof["syscalls"] = [s for s in prof["syscalls"] if s != "uname"]
    path = str(tmp_path / "no-uname.json")
    with open(path, "w") as f:
        json.dump(prof, f)
    os.chmod(path, 0o644)
    r = jail.run("--bind-ro", "/usr", "--seccomp", path, payload=("/usr/bin/uname",))
    assert r.returncode == -signal.SIGSYS, r
    assert jail.cleanup_cmd().returncode == 0
    prof["default_action"] = "errno"
    with open(path, "w") as f:
        json.dump(prof, f)
    r = jail.run("--bind-ro", "/usr", "--seccomp", path, payload=("/usr/bin/uname",))
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r


def test_jail_root_sees_nothing_of_the_host(jail):
    # From inside: the host's files are not there, /proc shows only the
    # jail's pid namespace, and the read-only bind cannot be written.
    script = ("ls /; echo --; ls /proc | grep -c '^[0-9]'; echo --; "
              "touch /usr/x 2>&1; echo --; id -u; cat /etc/passwd 2>&1; hostname 2>/dev/null || cat /proc/sys/kernel/hostname")
    r = jail.run("--bind-ro", "/usr", "--new-pid-ns", payload=("/usr/bin/dash", "-c", script))
    assert r.returncode == 0, r.stderr
    parts = r.stdout.split("--\n")
    assert set(parts[0].split()) == {"dev", "proc", "tmp", "usr"} | host_merged_links()
    assert int(parts[1]) <= 3  # sh, ls|grep
    assert "Read-only file system" in parts[2]
    out = parts[3].split("\n")
    assert out[0] == str(jail.uid)
    assert "No such file" in out[1]
    assert out[2] == jail.id  # its own UTS namespace


# ----------------------------------------------------------------- refusals

def test_refusals(jail_base, bind_tree):
    j = Jail(jail_base, "r")
    # A tree with the traps the path checks look for, under a root-owned dir.
    t = pathlib.Path(bind_tree)
    (t / "real").mkdir(mode=0o755)
    (t / "real" / "f").write_text("x")
    os.symlink("real", t / "link")
    (t / "wdir").mkdir()
    os.chmod(t / "wdir", 0o777)
    (t / "wfile").write_text("x")
    os.chmod(t / "wfile", 0o666)
    (t / "h1").write_text("x")
    os.link(t / "h1", t / "h2")
    (t / "bad.json").write_text('{"default_action": "kill_process", "syscalls": ["read", "no_such_call"]}')
    os.chmod(t / "bad.json", 0o644)
    other = Jail(jail_base, "o")
    os.chown(other.root, 61999, 61999)
    cases = [
        (["--id", "Bad_ID"], "--id"),
        (["--uid", "0"], "--uid 0"),
        (["--gid", "65534"], "--gid 65534"),
        (["--uid", "999"], "--uid 999"),
        (["--bind-ro", str(t / "link" / "f")], "is a symlink"),
        (["--bind-ro", str(t / "wdir")], "writable by group or others"),
        (["--bind-ro", str(t / "wfile")], "writable by group or others"),
        (["--bind-ro", str(t / "h1")], "hard links"),
        (["--dev", "/dev/sda"], "not an allowed device"),
        (["--dev", "/dev/mem"], "not an allowed device"),
        (["--seccomp", str(t / "bad.json")], "no_such_call is not a syscall"),
        (["--netns-fd", "900"], "not an open file descriptor"),
        (["--root", other.root], "must be owned by root or by uid"),
    ]
    for extra, needle in cases:
        assert_refused(subprocess.run(refusal_argv(j, extra), capture_output=True, text=True, timeout=30), needle,
                       j.id)
    # The VMM path: a symlink on the way (/bin on merged-/usr hosts), not
    # executable, relative.
    if os.path.islink("/bin"):
        assert_refused(j.run("--bind-ro", "/usr", payload=("/bin/sleep", "1")), "/bin is a symlink", j.id)
    (t / "notexec").write_text("#!/bin/sh\n")
    os.chmod(t / "notexec", 0o744)
    assert_refused(j.run("--bind-ro", "/usr", payload=(str(t / "notexec"),)), "not executable", j.id)
    assert_refused(j.run("--bind-ro", "/usr", payload=("sleep", "1")), "not an absolute path", j.id)


def refusal_argv(j, extra):
    """The jail's usual command line with the case's options; --id, --root,
    --uid and --gid replace the jail's own."""
    base = {"--id": j.id, "--root": j.root, "--uid": str(j.uid), "--gid": str(j.gid)}
    opts = []
    for i in range(0, len(extra), 2):
        if extra[i] in base:
            base[extra[i]] = extra[i + 1]
        else:
            opts += extra[i:i + 2]
    argv = [JAILER]
    for k, v in base.items():
        argv += [k, v]
    return argv + ["--cgroup-parent", CG_PARENT, "--bind-ro", "/usr", *opts, "--", SLEEP, "1"]


def test_failures_after_the_cgroup_leave_none(jail_base):
    # A symlink left in the jail root where /dev goes (a previous VMM could
    # have made it): refused at the mount step, after the cgroup was made;
    # the cgroup is removed again, with and without the pid namespace.
    for extra in ((), ("--new-pid-ns",)):
        j = Jail(jail_base, "m")
        os.symlink("/etc", os.path.join(j.root, "dev"))
        r = j.run("--bind-ro", "/usr", *extra, payload=(SLEEP, "1"))
        assert_refused(r, "mount: ", j.id)
        assert "/dev in the jail root exists and is not a directory" in r.stderr
        assert os.path.islink(os.path.join(j.root, "dev")) and os.listdir("/etc")
    # A network namespace fd that is not one: refused when joining.
    j = Jail(jail_base, "n")
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        r = j.run("--netns-fd", str(fd), "--bind-ro", "/usr", pass_fds=(fd,), payload=(SLEEP, "1"))
    finally:
        os.close(fd)
    assert_refused(r, "netns: ", j.id)


def jail_boot_files(j):
    """What airlockd gives a booting QEMU in jail j: the disk overlay in the
    jail root, owned by the jail's uid (the backing name written in it is
    never opened: the template is an fd and the overlay's explicit backing
    node), and the kernel, initramfs and template as fds. Returns (the fds,
    qemuutil.Fds, the jailer's --keep-fd arguments)."""
    rootfs = os.path.realpath(os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4"))
    q.create_overlay(rootfs, os.path.join(j.root, "disk.qcow2"))
    os.chown(os.path.join(j.root, "disk.qcow2"), j.uid, j.gid)
    boot_fds = [os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                for path in (os.path.join(IMAGES, "kernels", "vmlinuz"),
                             os.path.join(IMAGES, "kernels", "initramfs.cpio"), rootfs)]
    return boot_fds, q.Fds(*boot_fds, incoming=None, mem=None), [a for fd in boot_fds for a in ("--keep-fd", str(fd))]


# ----------------------------------------------------------------- a real VMM

def qemu_payload(boot_fds, restore=False):
    """airlockd's command line (qemuutil.qemu_argv: vmm-qemu.c's, with the
    console in a file the test reads, under TCG: the jail has no /dev/kvm).
    The kernel, initramfs and template are fds the test opened, kept with
    --keep-fd at whatever numbers they have; QEMU's cwd is the jail root, so
    its relative socket names stay."""
    return tuple(q.qemu_argv("airlock-jailtest", kvm=False, restore=restore, fds=boot_fds, console="console.log"))


def test_qemu_boots_in_the_jail_under_the_profile(jail_base):
    for p in ("vmlinuz", "initramfs.cpio"):
        if not os.path.exists(os.path.join(IMAGES, "kernels", p)):
            pytest.skip("build/images missing (make images)")
    with open(PROFILE) as f:
        assert json.load(f)["default_action"] == "kill_process"
    j = Jail(jail_base, "q")
    # What airlockd gives QEMU (jail_boot_files); the tap belongs to the
    # jail's uid too. Nothing of the images is in the jail.
    boot_fds, fds, keep = jail_boot_files(j)
    ns = Netns(f"airlock-jq-{os.getpid()}-{random.randrange(1 << 20):x}", tap_user=j.uid)
    common = ("--netns-fd", str(ns.fd), "--new-pid-ns", "--memory-mib", "768", "--pids-max", "128",
              "--rlimit-nofile", "1024", "--bind-ro", "/usr",
              "--dev", "/dev/net/tun", "--dev", "/dev/null", "--seccomp", PROFILE, *keep)
    console = os.path.join(j.root, "console.log")
    # The snapshot's memory goes outside the jail root, as airlockd writes
    # it into the snapshot's directory: QEMU only ever has the fd.
    mem = os.path.join(j.dir, "memory")
    try:
        payload = qemu_payload(fds)
        p = j.start(*common, payload=payload, pass_fds=(ns.fd, *boot_fds), stderr=None)
        vmm = only_child(p.pid)
        wait_exec(vmm, payload[0])
        st = status_fields(vmm)
        assert st["Seccomp"] == ["2"] and st["Uid"][0] == str(j.uid) and int(st["CapEff"][0], 16) == 0
        # The guest boots: its agent says HELLO over the jail's channel
        # socket, and runs a command.
        c = ah.Client(q.connect_unix(os.path.join(j.root, "ctl.sock"), p))
        ftype, _, _ = c.recv(0, 120)
        assert ftype == ah.HELLO, ah.NAMES[ftype]
        wait_for(lambda: os.path.getsize(console) > 0, 10, "the guest's first console lines")
        e = c.run(["sh", "-c", "echo hello from the jail; cat /proc/sys/kernel/random/boot_id"])
        assert e.exit == {"exit_code": 0} and e.stdout.startswith(b"hello from the jail\n"), vars(e)
        # Pause, resume, and a snapshot as airlockd takes it: x-ignore-shared,
        # a file opened here, handed over QMP (getfd), migrate fd: on the
        # same connection.
        qp = os.path.join(j.root, "qmp.sock")
        q.qmp(qp, "stop", proc=p)
        q.qmp(qp, "cont", proc=p)
        q.qmp(qp, "stop", proc=p)
        fd = os.open(mem, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            q.save(qp, fd, p, timeout_s=120)
        finally:
            os.close(fd)
        assert os.path.getsize(mem) > 1 << 20
        q.qmp(qp, "quit", proc=p)
        assert p.wait(30) == 0  # not SIGSYS: every syscall it made was allowed
        c.sock.close()
        assert j.cleanup_cmd().returncode == 0

        # A restore from that snapshot, again in the jail, as airlockd's:
        # no kernel or initramfs, -incoming defer, x-ignore-shared, then
        # migrate-incoming fd:.
        mem_fd = os.open(mem, os.O_RDONLY | os.O_CLOEXEC)
        try:
            p = j.start(*common, "--keep-fd", str(mem_fd), payload=qemu_payload(fds, restore=True),
                        pass_fds=(ns.fd, *boot_fds, mem_fd), stderr=None)
            q.load(qp, mem_fd, p)
        finally:
            os.close(mem_fd)
        q.qmp(qp, "cont", proc=p)
        c = ah.Client(q.connect_unix(os.path.join(j.root, "ctl.sock"), p))
        c.hello(60)
        kind, _ = c.thaw(generation=2, orphan_streams=True, sandbox_id=j.id, hostname=j.id)
        assert kind == "OK"
        e = c.run(["echo", "restored"])
        assert e.exit == {"exit_code": 0} and e.stdout == b"restored\n", vars(e)
        q.qmp(qp, "quit", proc=p)
        assert p.wait(30) == 0
        c.sock.close()
    finally:
        for fd in boot_fds:
            os.close(fd)
        j.close()
        ns.close()
