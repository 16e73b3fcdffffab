#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Derives security/seccomp/qemu-x86_64.json: the syscalls QEMU makes while it
runs an Airlock sandbox, measured with `strace -f -c` on real runs.

QEMU is started with airlockd's command line (src/daemon/vmm-qemu.c,
qemu_spawn, as tests/integration/qemuutil.py builds it and
test_qemu_argv.py checks it; TCG or KVM as the host has it, a tap in a
network namespace):
the kernel, initramfs and template are fds this script opened, at the
numbers the jailer's --keep-fd hands over (-kernel /proc/self/fd/4, -initrd
/proc/self/fd/5, -add-fd fd=6 under the overlay's backing node), guest RAM
is the memory backend "mem" (-M microvm,memory-backend=mem), TCG's
translation cache is bounded (tb-size), and QEMU's own -sandbox is on with
spawn=deny: QEMU runs no other program, so everything traced is QEMU's.

What is exercised (each saved state is written and read with the migration
capability x-ignore-shared, set by `migrate-set-capabilities` on its own QMP
connection first, as airlockd does for every save and restore):
  1. A cold boot, RAM `-object memory-backend-ram,id=mem,size=256M`: boot to
     the agent's HELLO; execs with stdin/stdout; a file written and read
     back; console socket read; stop/cont (pause/resume); a snapshot as
     airlockd takes it (qemu_save): the capability, then `getfd` "snapshot"
     with the fd of a file this script created (SCM_RIGHTS) and `migrate`
     "fd:snapshot" on one QMP connection; cont, an exec; quit. Then a
     restore (qemu_wait_incoming): `-incoming defer`, the capability,
     `migrate-incoming` "fd:7" (the snapshot opened read-only), cont, HELLO,
     THAW, the same execs and file transfer, quit.
  2. A template snapshot (src/daemon/template-snap.c): a boot with RAM
     `-object memory-backend-file,id=mem,size=256M,mem-path=/proc/self/fd/8,
     share=on` on a memfd this script made (MFD_ALLOW_SEALING, ftruncated to
     the RAM size), HELLO, stop, a save as above (x-ignore-shared: the
     shared RAM stays in the memfd, out of the state), quit;
     the memfd sealed (F_SEAL_SEAL|SHRINK|GROW|WRITE) once QEMU is gone and
     the disk copied, as airlockd keeps them; then a sandbox restored from
     it: the same RAM object with share=off (a private copy-on-write mapping
     of the sealed memfd at fd 8), `-incoming defer`, the capability,
     `migrate-incoming` "fd:7" (the state), cont, HELLO, THAW, the execs and
     file transfer, quit.
The script prints the syscalls only some runs made. Path 2 alone makes
`fstatfs`: memory-backend-file's qemu_fd_getpagesize() asks whether the file
is on hugetlbfs.

Usage (root, after `make all images`):
  /usr/bin/python3 security/seccomp/derive-profile.py [--out FILE] [--merge]
--merge keeps the syscalls already in FILE (a profile only grows unless a
person decides otherwise). Prints what was added, and what the file has that
this run did not see.
"""
import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import agent_harness as ah  # noqa: E402
import qemuutil as q  # noqa: E402

IMAGES = os.path.join(os.environ.get("BUILD", os.path.join(ROOT, "build")), "images")
PROFILE = os.path.join(HERE, "qemu-x86_64.json")
# The fds QEMU starts with, at airlockd's numbers (qemuutil.DAEMON_FDS; 3 is
# the network namespace, which the jailer joins and closes: here `ip netns
# exec` joins it).
FD_KERNEL, FD_INITRD, FD_ROOTFS, FD_INCOMING, FD_MEM = q.DAEMON_FDS
MEM_MIB = 256
# Made by the jailer itself after the filter is loaded (its execve of the VMM,
# and the message and exit if that execve fails), and the kernel's own
# restart path for interrupted syscalls.
ALWAYS = {"execve", "write", "exit", "exit_group", "rt_sigreturn", "restart_syscall"}
# Paths of QEMU that a TCG run on this kind of host does not take, added by
# hand (each with its reason; keep this list short and explained).
EXTRA = {
    "tgkill": "KVM: qemu_cpu_kick() signals vCPU threads (pthread_kill)",
    "rt_sigtimedwait": "KVM: kvm_eat_signals() and SIG_IPI handling",
    "getpid": "KVM: glibc's pthread_kill() is tgkill(getpid(), tid); abort() too (raise)",
    "sigaltstack": "coroutine and vCPU thread signal stacks",
    "fallocate": "discard=unmap: a guest TRIM punches holes in the qcow2 overlay",
    "ftruncate": "qcow2 growth/shrink of the overlay",
    "fsync": "flushes on some block paths (fdatasync is the usual one)",
    "shutdown": "chardev sockets closing a client (console, channel, QMP)",
    "epoll_create1": "the event loop's epoll backend (used when io_uring is refused, many fds)",
    "epoll_ctl": "same",
    "epoll_pwait": "same",
    "epoll_wait": "same",
    "sched_yield": "glibc/QEMU spin-then-yield paths",
    "nanosleep": "g_usleep in some paths",
    "mremap": "glibc realloc of large blocks",
    "timerfd_create": "glib timers",
    "timerfd_settime": "same",
    "sendto": "socket chardev writes without ancillary data",
    "recvfrom": "socket chardev reads",
    "mlock": "-overcommit mem-lock=on (not on airlockd's command line today)",
    "munlock": "same",
}
# Refused with ENOSYS instead of allowed: QEMU probes io_uring for its event
# loop and falls back to ppoll/epoll; io_uring is a large kernel surface the
# VMM does not need (and io_uring_enter never showed up in a trace, so
# allowing setup alone could kill a VMM that later tried to use its ring).
ENOSYS = ["io_uring_setup", "io_uring_enter", "io_uring_register"]
COMMENT = ("Syscalls QEMU -M microvm may make inside airlock-jailer, started as airlockd starts it "
           "(src/daemon/vmm-qemu.c: kernel, initramfs, template and snapshot as fds, -sandbox on with "
           "spawn=deny, RAM memory-backend-ram or memory-backend-file on a memfd (share=on for a "
           "template's boot, share=off for a restore from it), states saved by QMP getfd + migrate fd: "
           "and restored by -incoming defer + migrate-incoming fd:7, with x-ignore-shared). "
           "Derived with strace -f -c by "
           "security/seccomp/derive-profile.py; see docs/jailer.md. "
           "Name-only allow-list: arguments are not filtered.")


def open_at_numbers(paths, mem_fd=None):
    """{number: path} → {number: fd} of each path opened read-only, at a
    high number (close-on-exec) until the child puts it in place; mem_fd,
    when given, is duplicated the same way for FD_MEM."""
    fds = {}
    try:
        for num, path in paths.items():
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            fds[num] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64)
            os.close(fd)
        if mem_fd is not None:
            fds[FD_MEM] = fcntl.fcntl(mem_fd, fcntl.F_DUPFD_CLOEXEC, 64)
    except OSError:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


def place_fds(fds):
    """In the child before exec: each fd at its number, without CLOEXEC (the
    sources are all >= 64, so no dup2 overwrites another source)."""
    def place():
        for num, fd in fds.items():
            os.dup2(fd, num)
    return place


def drain_console(path, proc):
    """Reads the console socket as airlockd does (the chardev's read path)."""
    try:
        s = q.connect_unix(path, proc)
        while s.recv(65536):
            pass
    except (OSError, RuntimeError):
        pass


def workload(c):
    e = c.run(["sh", "-c", "echo hi; echo err >&2; uname -a"])
    assert e.exit == {"exit_code": 0}, vars(e)
    data = os.urandom(300 * 1024)
    e = c.run(["cat"], input=data)
    assert bytes(e.stdout) == data
    c.write_file("/tmp/seccomp-probe", data)
    c.read_file("/tmp/seccomp-probe")
    c.run(["sh", "-c", "ip addr 2>/dev/null; ping -c1 -W1 10.0.2.2 >/dev/null 2>&1; true"])


def summary_names(path):
    names = set()
    with open(path) as f:
        for line in f:
            m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+(?:\d+\s+)?([a-z0-9_]+)\s*$", line)
            if m and m.group(1) != "total":
                names.add(m.group(1))
    return names


def traced_run(work, ns, tag, fds, after_boot, restore=False, mem_shared=None):
    summary = os.path.join(work, f"strace-{tag}.txt")
    # airlockd's command line (src/daemon/vmm-qemu.c, qemu_spawn; cwd = the
    # sandbox dir, the files at their fds).
    cmd = (["ip", "netns", "exec", ns, "strace", "-f", "-qq", "-c", "-o", summary, "--"] +
           q.qemu_argv("airlock-seccomp", memory_mib=MEM_MIB, restore=restore, mem_shared=mem_shared))
    # close_fds=False: the fds placed at their numbers must survive exec;
    # everything else Python opened is close-on-exec.
    proc = subprocess.Popen(cmd, cwd=work, stdin=subprocess.DEVNULL, close_fds=False, preexec_fn=place_fds(fds))
    try:
        threading.Thread(target=drain_console, args=(os.path.join(work, "con.sock"), proc), daemon=True).start()
        after_boot(proc)
        q.qmp(os.path.join(work, "qmp.sock"), "quit", proc=proc)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return summary_names(summary)


def save(qmp_path, proc, path):
    """qemu_save into a new file opened here (QEMU only gets the fd)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        q.save(qmp_path, fd, proc)
        os.fsync(fd)
    finally:
        os.close(fd)
    return os.path.getsize(path)


def hello(work, proc):
    c = ah.Client(q.connect_unix(os.path.join(work, "ctl.sock"), proc))
    ftype, _, _ = c.recv(0, 120)
    assert ftype == ah.HELLO
    return c


def first_boot(work, state):
    """Path 1: a cold boot (anonymous RAM), its workload and a snapshot."""
    def run(proc):
        c = hello(work, proc)
        workload(c)
        qp = os.path.join(work, "qmp.sock")
        q.qmp(qp, "stop", proc=proc)
        q.qmp(qp, "cont", proc=proc)
        q.qmp(qp, "stop", proc=proc)
        # Anonymous RAM is not shared: all of it is in the state.
        size = save(qp, proc, state)
        assert size > 1 << 20, f"snapshot of {size} bytes: where is the RAM?"
        print(f"cold boot snapshot: {size} bytes")
        q.qmp(qp, "cont", proc=proc)
        c.run(["true"])
    return run


def template_boot(work, state):
    """Path 2, the template's boot (tsnap build): RAM shared into the memfd,
    HELLO, stop, a save that leaves that RAM out (devices only)."""
    def run(proc):
        c = hello(work, proc)  # connected while saved, as the daemon's channel is
        qp = os.path.join(work, "qmp.sock")
        q.qmp(qp, "stop", proc=proc)
        size = save(qp, proc, state)
        # The guest's RAM (kernel, initramfs, agent: many MiB) is not in it.
        assert size < 4 << 20, f"template state of {size} bytes: was the shared RAM written?"
        print(f"template state: {size} bytes (RAM left in the memfd)")
        c.sock.close()
    return run


def restore(work, generation):
    """qemu_wait_incoming, then resume and THAW as restore_finish does."""
    def run(proc):
        qp = os.path.join(work, "qmp.sock")
        q.load(qp, FD_INCOMING, proc)  # waits for the socket, as the daemon does
        q.qmp(qp, "cont", proc=proc)
        c = ah.Client(q.connect_unix(os.path.join(work, "ctl.sock"), proc))
        c.hello(60)
        kind, _ = c.thaw(generation=generation, orphan_streams=True)
        assert kind == "OK", kind
        workload(c)
    return run


def seal(fd):
    """template-snap.c's seal(): the memory can never change again (EBUSY
    while a shared writable mapping is left: QEMU is gone, so none)."""
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)


def close_all(fds):
    for fd in fds.values():
        os.close(fd)


def traced(work, ns, tag, files, after_boot, mem_fd=None, **kw):
    fds = open_at_numbers(files, mem_fd)
    try:
        return traced_run(work, ns, tag, fds, after_boot, **kw)
    finally:
        close_all(fds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=PROFILE)
    ap.add_argument("--merge", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="airlock-seccomp-")
    # QEMU's directory per run (its sockets and disk.qcow2 are relative).
    cold, tpl, tpl_sb = (os.path.join(work, d) for d in ("cold", "tpl", "tpl-sb"))
    for d in (cold, tpl, tpl_sb):
        os.mkdir(d)
    # States are written outside QEMU's directory, as airlockd writes them
    # into the snapshot's own (QEMU only ever sees the fd).
    snapdir = tempfile.mkdtemp(prefix="airlock-seccomp-snap-")
    state, tpl_state = os.path.join(snapdir, "memory"), os.path.join(snapdir, "template-state")
    ns = f"airlock-seccomp-{os.getpid()}"
    template = os.path.realpath(os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4"))
    boot_files = {FD_KERNEL: os.path.join(IMAGES, "kernels", "vmlinuz"),
                  FD_INITRD: os.path.join(IMAGES, "kernels", "initramfs.cpio"),
                  FD_ROOTFS: template}
    seen = {}
    mem_fd = -1
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "tuntap", "add", "dev", "tap0", "mode", "tap"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "tap0", "up"], check=True)
        for d in (cold, tpl):
            q.create_overlay(template, os.path.join(d, "disk.qcow2"))
        # 1. Cold boot + snapshot, and a restore from it.
        seen["boot"] = traced(cold, ns, "boot", boot_files, first_boot(cold, state))
        seen["restore"] = traced(cold, ns, "restore", {**boot_files, FD_INCOMING: state}, restore(cold, 2),
                                 restore=True)
        # 2. The template snapshot: its boot into a shared memfd, then a
        # sandbox restored from the sealed memfd (private) and the state.
        mem_fd = os.memfd_create("airlock-template", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(mem_fd, MEM_MIB << 20)
        seen["template-boot"] = traced(tpl, ns, "template-boot", boot_files, template_boot(tpl, tpl_state),
                                       mem_fd=mem_fd, mem_shared=True)
        seal(mem_fd)
        shutil.copyfile(os.path.join(tpl, "disk.qcow2"), os.path.join(tpl_sb, "disk.qcow2"))
        seen["template-restore"] = traced(tpl_sb, ns, "template-restore", {**boot_files, FD_INCOMING: tpl_state},
                                          restore(tpl_sb, 0), mem_fd=mem_fd, restore=True, mem_shared=False)
    finally:
        if mem_fd >= 0:
            os.close(mem_fd)
        subprocess.run(["ip", "netns", "del", ns])
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snapdir, ignore_errors=True)
    names = set().union(*seen.values())
    print("seen per run: " + ", ".join(f"{tag} {len(got)}" for tag, got in seen.items()))
    # Which path needs what (for the review of a change).
    for name in sorted(n for n in names if any(n not in got for got in seen.values())):
        print(f"  {name}: only in {' '.join(tag for tag, got in seen.items() if name in got)}")
    names |= ALWAYS | set(EXTRA)
    names -= set(ENOSYS)
    old = set()
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            old = set(json.load(f)["syscalls"])
    final = sorted(names | old)
    with open(args.out, "w") as f:
        json.dump({"comment": COMMENT, "default_action": "kill_process", "syscalls": final,
                   "errno_syscalls": ENOSYS}, f, indent=1)
        f.write("\n")
    added = " ".join(sorted(names - old)) or "none"
    print(f"{args.out}: {len(final)} syscalls ({len(names - old)} seen now but not before: "
          f"{added if old else 'all new'})")
    if old:
        # Kept by --merge: each is a person's decision (remove it by hand,
        # or rerun without --merge, when no path of QEMU needs it any more).
        print(f"in the file but not seen now: {' '.join(sorted(old - names)) or 'none'}")


if __name__ == "__main__":
    main()
