#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Derives security/seccomp/qemu-x86_64.json: the syscalls QEMU makes while it
runs an Airlock sandbox, measured with `strace -f -c` on real runs.

QEMU is started with airlockd's command line (src/daemon/vmm/qemu/vmm-qemu.c,
qemu_spawn, as tests/integration/qemuutil.py builds it and
test_qemu_argv.py checks it; --accel tcg (the default) or --accel kvm,
a tap in a network namespace):
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
  2. A template snapshot (src/daemon/core/template-snap.c): a boot with RAM
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

--accel kvm runs the same four paths with airlockd's KVM command line
(`-accel kvm -cpu MODEL`, no tsc_* parameters for the guest), once per CPU
model (--cpu, default both of airlockd's: `host` and
`host,-arch-capabilities`, the one nested hosts need when -cpu host aborts
with "failed to set MSR 0x10a"). A host with /dev/kvm is not always a host
whose KVM boots a Linux guest (nested KVM has been seen to run the firmware
and the kernel's real-mode setup, then nothing), so the KVM paths never
wait for the agent: each run gives the guest a time budget
(--kvm-run-s) for its HELLO, and whatever the guest did by then, goes on:
query-status (running), stop, query-status (paused), cont, the save (cold
boot and template boot) or the restore (-incoming defer, migrate-incoming,
cont), quit over QMP. Where the guest does reach the agent, the run does
what the TCG run does with it (execs, file transfer, THAW after a restore).
That covers QEMU's KVM start-up (/dev/kvm, KVM_CREATE_VM, the vCPU created,
its thread in KVM_RUN, which this script checks in the trace: strace -C keeps
the calls as well as the counts), seconds of the vCPU loop and the state
saved from and loaded into KVM. A CPU model QEMU refuses at start-up (exit
1 with its error, or the MSR assertion's SIGABRT) is reported with QEMU's
stderr and skipped; what it did until then is counted (its error path must
end in its own message, not SIGSYS). KVM sees only part of what the TCG
runs see: always --merge it into the TCG-derived profile.

Usage (root, after `make all images`):
  /usr/bin/python3 security/seccomp/derive-profile.py [--out FILE] [--merge]
  /usr/bin/python3 security/seccomp/derive-profile.py --accel kvm [--cpu MODEL]... [--kvm-run-s S] --merge
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
import signal
import subprocess
import sys
import tempfile
import threading
import time

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
# hand (each with its reason; keep this list short and explained). The KVM
# entries are also measured by --accel kvm; they are listed here so that a
# TCG-only derivation without --merge (a host without KVM) keeps them.
EXTRA = {
    "uname": "KVM: kvm_arch_init() asks whether the host kernel is x86_64 (lm_capable_kernel); "
             "the first call of a KVM start-up that TCG never makes",
    "tgkill": "KVM: qemu_cpu_kick() sends SIG_IPI to a vCPU thread in KVM_RUN (pthread_kill) to make it "
              "leave the guest (stop, a device's request, I/O completion); a guest that does not run never needs it",
    "rt_sigtimedwait": "KVM: kvm_eat_signals() on kernels without KVM_CAP_IMMEDIATE_EXIT (< 4.11)",
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
# airlockd's CPU models under KVM (vmm-qemu.c): the host's CPU, or without
# IA32_ARCH_CAPABILITIES where QEMU cannot set that MSR (nested hosts).
KVM_CPUS = ("host", "host,-arch-capabilities")
# The guest's time to run in each KVM run (seconds of the vCPU loop when it
# never reaches the agent).
KVM_RUN_S = 4.0
# Proof, from the trace, that QEMU used KVM: the VM, its vCPU, the vCPU
# thread running it.
KVM_IOCTLS = ("KVM_CREATE_VM", "KVM_CREATE_VCPU", "KVM_RUN")
COMMENT = ("Syscalls QEMU -M microvm may make inside airlock-jailer, under TCG (-accel tcg,tb-size=128 "
           "-cpu max) and under KVM (-accel kvm -cpu host or host,-arch-capabilities), started as airlockd "
           "starts it (src/daemon/vmm/qemu/vmm-qemu.c: kernel, initramfs, template and snapshot as fds, -sandbox on with "
           "spawn=deny, RAM memory-backend-ram or memory-backend-file on a memfd (share=on for a "
           "template's boot, share=off for a restore from it), states saved by QMP getfd + migrate fd: "
           "and restored by -incoming defer + migrate-incoming fd:7, with x-ignore-shared). "
           "Derived with strace -f by security/seccomp/derive-profile.py (TCG, then --accel kvm --merge); "
           "see docs/jailer.md. "
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


class QemuExited(Exception):
    """QEMU ended before the run was done (under KVM: a CPU model it
    refuses on this host). names: what it made until then."""

    def __init__(self, tag, status, stderr, names):
        super().__init__(f"{tag}: QEMU exited with {status}: {stderr.strip()[-600:] or '(no stderr)'}")
        self.tag, self.status, self.stderr, self.names = tag, status, stderr, names


def kill_tree(proc):
    """strace and QEMU under it (a SIGKILLed strace detaches its tracee,
    which would run on)."""
    if proc.poll() is not None:
        return
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        kids = []
    for pid in kids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.kill()
    proc.wait()


def kvm_ioctls(trace):
    """{KVM ioctl: calls} for KVM_IOCTLS in a strace -C trace."""
    counts = dict.fromkeys(KVM_IOCTLS, 0)
    pat = re.compile(r"\bioctl\(\d+, (" + "|".join(KVM_IOCTLS) + r")\b")
    with open(trace, errors="replace") as f:
        for line in f:
            m = pat.search(line)
            if m:
                counts[m.group(1)] += 1
    return counts


def file_tag(tag):
    return re.sub(r"[^A-Za-z0-9-]+", "_", tag)


def traced_run(work, ns, tag, fds, after_boot, restore=False, mem_shared=None, kvm_cpu=None):
    """One QEMU under strace -f; after_boot(proc) drives it, then quit.
    kvm_cpu: None for TCG, else -accel kvm with that CPU model; the calls
    are then kept too (-C) to check KVM_IOCTLS, QEMU's stderr is kept, and
    a QEMU that ends early raises QemuExited."""
    kvm = kvm_cpu is not None
    summary = os.path.join(work, f"strace-{file_tag(tag)}.txt")
    # airlockd's command line (src/daemon/vmm/qemu/vmm-qemu.c, qemu_spawn; cwd = the
    # sandbox dir, the files at their fds).
    cmd = (["ip", "netns", "exec", ns, "strace", "-f", "-qq", "-C" if kvm else "-c", "-o", summary, "--"] +
           q.qemu_argv("airlock-seccomp", memory_mib=MEM_MIB, kvm=kvm, cpu=kvm_cpu, restore=restore,
                       mem_shared=mem_shared))
    errpath = os.path.join(work, f"stderr-{file_tag(tag)}.txt")
    with open(errpath, "wb") as err:
        # close_fds=False: the fds placed at their numbers must survive exec;
        # everything else Python opened is close-on-exec.
        proc = subprocess.Popen(cmd, cwd=work, stdin=subprocess.DEVNULL, stderr=err if kvm else None,
                                close_fds=False, preexec_fn=place_fds(fds))
    try:
        threading.Thread(target=drain_console, args=(os.path.join(work, "con.sock"), proc), daemon=True).start()
        try:
            after_boot(proc)
            q.qmp(os.path.join(work, "qmp.sock"), "quit", proc=proc)
        except (OSError, RuntimeError, EOFError, ValueError):
            if not kvm or proc.poll() is None:
                raise
            with open(errpath, errors="replace") as f:
                raise QemuExited(tag, proc.returncode, f.read(), summary_names(summary)) from None
        proc.wait(60)
    finally:
        kill_tree(proc)
    if kvm:
        counts = kvm_ioctls(summary)
        assert all(counts.values()), f"{tag}: QEMU did not use KVM ({counts}; trace {summary})"
        print(f"{tag}: " + ", ".join(f"{k} x{v}" for k, v in counts.items()))
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


def status(qp, proc):
    return q.qmp(qp, "query-status", proc=proc)["status"]


def kvm_steps(qp, proc):
    """query-status, then pause and resume (stop/cont) as airlockd does."""
    assert status(qp, proc) == "running", status(qp, proc)
    q.qmp(qp, "stop", proc=proc)
    assert status(qp, proc) == "paused"
    q.qmp(qp, "cont", proc=proc)
    assert status(qp, proc) == "running"


def kvm_agent(work, proc, budget_s, restored=False):
    """The guest's budget_s to reach the agent: its client, or None when it
    did not (then the vCPU loop ran all that time). A restored agent says
    HELLO only when asked."""
    c = ah.Client(q.connect_unix(os.path.join(work, "ctl.sock"), proc))
    try:
        if restored:
            c.hello(budget_s)
            return c
        ftype, _, _ = c.recv(0, budget_s)
    except TimeoutError:
        c.sock.close()
        if proc.poll() is not None:
            raise RuntimeError(f"QEMU exited with {proc.returncode}") from None
        return None
    assert ftype == ah.HELLO, ah.NAMES[ftype]
    return c


def kvm_boot(work, state, budget_s, info, template=False):
    """Paths 1 and 2 under KVM, without waiting for a guest that may never
    boot here: budget_s for the agent (the workload if it came), status,
    stop/cont, then a save as airlockd takes it. info["agent"]: whether the
    guest reached its agent (its restore then THAWs it)."""
    def run(proc):
        qp = os.path.join(work, "qmp.sock")
        c = kvm_agent(work, proc, budget_s)
        info["agent"] = c is not None
        if c and not template:
            workload(c)
        kvm_steps(qp, proc)
        q.qmp(qp, "stop", proc=proc)
        size = save(qp, proc, state)
        print(f"  KVM, guest reached its agent: {'yes' if c else 'no'}; state: {size} bytes")
        if not template:
            q.qmp(qp, "cont", proc=proc)
            if c:
                c.run(["true"])
        if c:
            c.sock.close()
    return run


def kvm_restore(work, generation, budget_s, info):
    """qemu_wait_incoming under KVM, cont, the agent (THAW, workload) when
    the saved guest had reached it, else budget_s of the vCPU loop; status,
    stop/cont."""
    def run(proc):
        qp = os.path.join(work, "qmp.sock")
        q.load(qp, FD_INCOMING, proc)
        q.qmp(qp, "cont", proc=proc)
        if info.get("agent"):
            c = kvm_agent(work, proc, max(budget_s, 60), restored=True)
            kind, _ = c.thaw(generation=generation, orphan_streams=True)
            assert kind == "OK", kind
            workload(c)
            c.sock.close()
        else:
            deadline = time.monotonic() + budget_s
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"QEMU exited with {proc.returncode}")
                time.sleep(0.1)
        kvm_steps(qp, proc)
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


def four_paths(seen, base, snapdir, ns, boot_files, template, prefix="", kvm_cpu=None, budget_s=KVM_RUN_S):
    """Paths 1 and 2 (cold boot + restore, template boot + restore) in
    their own directories under base; seen[tag] = syscalls, per run."""
    # QEMU's directory per run (its sockets and disk.qcow2 are relative).
    cold, tpl, tpl_sb = (os.path.join(base, d) for d in ("cold", "tpl", "tpl-sb"))
    for d in (cold, tpl, tpl_sb):
        os.makedirs(d)
    # States are written outside QEMU's directory, as airlockd writes them
    # into the snapshot's own (QEMU only ever sees the fd).
    state = os.path.join(snapdir, file_tag(prefix) + "memory")
    tpl_state = os.path.join(snapdir, file_tag(prefix) + "template-state")
    kvm = kvm_cpu is not None
    info, tpl_info = {}, {}
    mem_fd = -1
    try:
        for d in (cold, tpl):
            q.create_overlay(template, os.path.join(d, "disk.qcow2"))
        # 1. Cold boot + snapshot, and a restore from it.
        seen[prefix + "boot"] = traced(cold, ns, prefix + "boot", boot_files,
                                       kvm_boot(cold, state, budget_s, info) if kvm else first_boot(cold, state),
                                       kvm_cpu=kvm_cpu)
        seen[prefix + "restore"] = traced(cold, ns, prefix + "restore", {**boot_files, FD_INCOMING: state},
                                          kvm_restore(cold, 2, budget_s, info) if kvm else restore(cold, 2),
                                          restore=True, kvm_cpu=kvm_cpu)
        # 2. The template snapshot: its boot into a shared memfd, then a
        # sandbox restored from the sealed memfd (private) and the state.
        mem_fd = os.memfd_create("airlock-template", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(mem_fd, MEM_MIB << 20)
        seen[prefix + "template-boot"] = traced(
            tpl, ns, prefix + "template-boot", boot_files,
            kvm_boot(tpl, tpl_state, budget_s, tpl_info, template=True) if kvm else template_boot(tpl, tpl_state),
            mem_fd=mem_fd, mem_shared=True, kvm_cpu=kvm_cpu)
        seal(mem_fd)
        shutil.copyfile(os.path.join(tpl, "disk.qcow2"), os.path.join(tpl_sb, "disk.qcow2"))
        seen[prefix + "template-restore"] = traced(
            tpl_sb, ns, prefix + "template-restore", {**boot_files, FD_INCOMING: tpl_state},
            kvm_restore(tpl_sb, 0, budget_s, tpl_info) if kvm else restore(tpl_sb, 0),
            mem_fd=mem_fd, restore=True, mem_shared=False, kvm_cpu=kvm_cpu)
    finally:
        if mem_fd >= 0:
            os.close(mem_fd)


def derive_kvm(work, snapdir, ns, boot_files, template, cpus, budget_s):
    """The four paths under KVM for each CPU model; a model QEMU refuses at
    start-up is reported and skipped (what it made until then is kept)."""
    seen, ran = {}, []
    for i, cpu in enumerate(cpus):
        prefix = f"kvm[{cpu}] "
        try:
            four_paths(seen, os.path.join(work, f"kvm{i}"), snapdir, ns, boot_files, template, prefix,
                       kvm_cpu=cpu, budget_s=budget_s)
            ran.append(cpu)
        except QemuExited as e:
            seen[e.tag] = e.names
            if e.tag != prefix + "boot":
                raise  # it started with this model, then failed: a real failure
            print(f"-cpu {cpu}: QEMU refused it on this host, skipped: {e}")
    if not ran:
        sys.exit("derive-profile: QEMU ran with none of the CPU models under KVM here "
                 f"({', '.join(cpus)}): nothing of KVM's vCPU loop was measured")
    print(f"KVM measured with -cpu {' and '.join(ran)}")
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=PROFILE)
    ap.add_argument("--merge", action="store_true")
    ap.add_argument("--accel", choices=("tcg", "kvm"), default="tcg")
    ap.add_argument("--cpu", action="append", metavar="MODEL",
                    help=f"under --accel kvm, a CPU model to run (repeatable; default {' and '.join(KVM_CPUS)})")
    ap.add_argument("--kvm-run-s", type=float, default=KVM_RUN_S, metavar="S",
                    help="under --accel kvm, the guest's time to reach its agent in each run (default %(default)s)")
    args = ap.parse_args()
    kvm = args.accel == "kvm"
    if args.cpu and not kvm:
        ap.error("--cpu is for --accel kvm (TCG's CPU is max)")
    if kvm and not os.access("/dev/kvm", os.R_OK | os.W_OK):
        ap.error("--accel kvm: /dev/kvm does not open read-write here")
    if kvm and not args.merge:
        # The KVM runs see only what KVM's paths make, without the guest's
        # workload where the guest does not boot: alone they would make a
        # profile that kills a TCG VMM.
        ap.error("--accel kvm measures KVM's paths only: --merge it into the TCG-derived profile")
    work = tempfile.mkdtemp(prefix="airlock-seccomp-")
    snapdir = tempfile.mkdtemp(prefix="airlock-seccomp-snap-")
    ns = f"airlock-seccomp-{os.getpid()}"
    template = os.path.realpath(os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4"))
    boot_files = {FD_KERNEL: os.path.join(IMAGES, "kernels", "vmlinuz"),
                  FD_INITRD: os.path.join(IMAGES, "kernels", "initramfs.cpio"),
                  FD_ROOTFS: template}
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "tuntap", "add", "dev", "tap0", "mode", "tap"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "tap0", "up"], check=True)
        if kvm:
            seen = derive_kvm(work, snapdir, ns, boot_files, template, args.cpu or KVM_CPUS, args.kvm_run_s)
        else:
            seen = {}
            four_paths(seen, work, snapdir, ns, boot_files, template)
    finally:
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
        print(f"in the file but not seen now{' (TCG paths, or KVM paths this host did not reach)' if kvm else ''}: "
              f"{' '.join(sorted(old - names)) or 'none'}")


if __name__ == "__main__":
    main()
