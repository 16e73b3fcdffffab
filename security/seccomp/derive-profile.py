#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Derives security/seccomp/qemu-x86_64.json: the syscalls QEMU makes while it
runs an Airlock sandbox, measured with `strace -f -c` on real runs.

QEMU is started with airlockd's command line (src/daemon/vmm-qemu.c,
qemu_spawn; TCG or KVM as the host has it, a tap in a network namespace):
the kernel, initramfs and template are fds this script opened, at the
numbers the jailer's --keep-fd hands over (-kernel /proc/self/fd/4, -initrd
/proc/self/fd/5, -add-fd fd=6 under the overlay's backing node), TCG's
translation cache is bounded (tb-size), and QEMU's own -sandbox is on with
spawn=deny: QEMU runs no other program, so everything traced is QEMU's.

What is exercised:
  boot to the agent's HELLO; execs with stdin/stdout; a file written and read
  back; console socket read; stop/cont (pause/resume); a snapshot as airlockd
  takes it: `getfd` "snapshot" with the fd of a file this script created
  (SCM_RIGHTS), then `migrate` "fd:snapshot" on the same QMP connection;
  quit; then a restore with -incoming fd:7 (the snapshot opened read-only),
  cont, HELLO, THAW, the same execs and file transfer, quit.

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
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import agent_harness as ah  # noqa: E402

IMAGES = os.path.join(os.environ.get("BUILD", os.path.join(ROOT, "build")), "images")
PROFILE = os.path.join(HERE, "qemu-x86_64.json")
# The fds QEMU starts with (vmm-qemu.c; 3 is the network namespace, which the
# jailer joins and closes: here `ip netns exec` joins it).
FD_KERNEL, FD_INITRD, FD_ROOTFS, FD_INCOMING = 4, 5, 6, 7
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
           "spawn=deny, snapshots by QMP getfd + migrate fd:). Derived with strace -f -c by "
           "security/seccomp/derive-profile.py; see docs/jailer.md. "
           "Name-only allow-list: arguments are not filtered.")


def qemu_argv(restore=False, net=True):
    """The command line of src/daemon/vmm-qemu.c (cwd = the sandbox dir,
    fds FD_* open)."""
    kvm = os.path.exists("/dev/kvm")
    append = "console=ttyS0 quiet panic=-1 airlock.root=/dev/vda"
    if not kvm:
        append += f" tsc_early_khz={ah.host_tsc_khz()}"
    argv = [shutil.which("qemu-system-x86_64"), "-name", "airlock-seccomp", "-M", "microvm",
            "-accel", "kvm" if kvm else "tcg,tb-size=128", "-cpu", "host" if kvm else "max", "-smp", "1",
            "-m", "256M", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
            "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            "-kernel", f"/proc/self/fd/{FD_KERNEL}", "-initrd", f"/proc/self/fd/{FD_INITRD}", "-append", append,
            "-chardev", "socket,id=con,path=con.sock,server=on,wait=off", "-serial", "chardev:con",
            "-add-fd", f"fd={FD_ROOTFS},set=1,opaque=rootfs",
            "-blockdev", "driver=file,node-name=base-file,filename=/dev/fdset/1,read-only=on",
            "-blockdev", "driver=raw,node-name=base,file=base-file,read-only=on",
            "-blockdev", "driver=file,node-name=disk-file,filename=disk.qcow2,discard=unmap",
            "-blockdev", "driver=qcow2,node-name=root,file=disk-file,backing=base,discard=unmap",
            "-device", "virtio-blk-device,drive=root", "-device", "virtio-rng-device",
            "-device", "virtio-serial-device",
            "-chardev", "socket,id=ctl,path=ctl.sock,server=on,wait=off",
            "-device", "virtserialport,chardev=ctl,name=org.airlock.agent.0",
            "-qmp", "unix:qmp.sock,server=on,wait=off"]
    if net:
        argv += ["-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
                 "-device", "virtio-net-device,netdev=n0,mac=52:54:00:12:34:56"]
    if restore:
        argv += ["-incoming", f"fd:{FD_INCOMING}"]
    return argv


def open_at_numbers(paths):
    """{number: path} → {number: fd} of each path opened read-only, at a
    high number (close-on-exec) until the child puts it in place."""
    fds = {}
    try:
        for num, path in paths.items():
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            fds[num] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64)
            os.close(fd)
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


def connect(path, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except (FileNotFoundError, ConnectionRefusedError):
            s.close()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"cannot connect to {path} (QEMU exit {proc.poll()})")
            time.sleep(0.02)


def qmp(path, proc, command, send_fd=None, **arguments):
    """One command on its own connection, as airlockd's QMP client does
    (src/daemon/vmm-qmp.c): greeting, qmp_capabilities, then with send_fd a
    `getfd` "snapshot" carrying that fd (SCM_RIGHTS), then the command."""
    s = connect(path, proc)
    s.settimeout(60)
    f = s.makefile("rb")

    def exchange(cmd, fd=None):
        data = json.dumps(cmd).encode() + b"\n"
        if fd is None:
            s.sendall(data)
        else:
            assert socket.send_fds(s, [data], [fd]) == len(data)
        while True:
            msg = json.loads(f.readline())
            if "event" in msg:
                continue
            if "error" in msg:
                raise RuntimeError(f"QMP {cmd['execute']}: {msg['error']}")
            return msg.get("return")
    try:
        json.loads(f.readline())
        exchange({"execute": "qmp_capabilities"})
        if send_fd is not None:
            exchange({"execute": "getfd", "arguments": {"fdname": "snapshot"}}, send_fd)
        return exchange(dict(execute=command, arguments=arguments))
    finally:
        f.close()
        s.close()


def drain_console(path, proc):
    """Reads the console socket as airlockd does (the chardev's read path)."""
    try:
        s = connect(path, proc)
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


def traced_run(work, ns, tag, fds, restore=False, after_boot=None):
    summary = os.path.join(work, f"strace-{tag}.txt")
    cmd = ["ip", "netns", "exec", ns, "strace", "-f", "-qq", "-c", "-o", summary, "--"] + qemu_argv(restore)
    # close_fds=False: the fds placed at their numbers must survive exec;
    # everything else Python opened is close-on-exec.
    proc = subprocess.Popen(cmd, cwd=work, stdin=subprocess.DEVNULL, close_fds=False, preexec_fn=place_fds(fds))
    try:
        threading.Thread(target=drain_console, args=(os.path.join(work, "con.sock"), proc), daemon=True).start()
        after_boot(proc)
        qmp(os.path.join(work, "qmp.sock"), proc, "quit")
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return summary_names(summary)


def first_boot(work, mem):
    def run(proc):
        c = ah.Client(connect(os.path.join(work, "ctl.sock"), proc))
        ftype, _, _ = c.recv(0, 120)
        assert ftype == ah.HELLO
        workload(c)
        q = os.path.join(work, "qmp.sock")
        qmp(q, proc, "stop")
        qmp(q, proc, "cont")
        qmp(q, proc, "stop")
        # As snapshot_write: a new file opened here, handed over QMP.
        fd = os.open(mem, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            qmp(q, proc, "migrate", send_fd=fd, uri="fd:snapshot")
        finally:
            os.close(fd)
        while qmp(q, proc, "query-migrate").get("status") not in ("completed", "failed"):
            time.sleep(0.05)
        assert qmp(q, proc, "query-migrate")["status"] == "completed"
        assert os.path.getsize(mem) > 1 << 20
        qmp(q, proc, "cont")
        c.run(["true"])
    return run


def restore(work):
    def run(proc):
        q = os.path.join(work, "qmp.sock")
        while True:
            try:
                if qmp(q, proc, "query-status")["status"] != "inmigrate":
                    break
            except RuntimeError:
                pass
            time.sleep(0.05)
        qmp(q, proc, "cont")
        c = ah.Client(connect(os.path.join(work, "ctl.sock"), proc))
        c.hello(60)
        kind, _ = c.thaw(generation=2, orphan_streams=True)
        assert kind == "OK", kind
        workload(c)
    return run


def close_all(fds):
    for fd in fds.values():
        os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=PROFILE)
    ap.add_argument("--merge", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="airlock-seccomp-")
    # The snapshot is written outside QEMU's directory, as airlockd writes
    # it into the snapshot's own (QEMU only ever sees the fd).
    snapdir = tempfile.mkdtemp(prefix="airlock-seccomp-snap-")
    mem = os.path.join(snapdir, "memory")
    ns = f"airlock-seccomp-{os.getpid()}"
    template = os.path.realpath(os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4"))
    boot_files = {FD_KERNEL: os.path.join(IMAGES, "kernels", "vmlinuz"),
                  FD_INITRD: os.path.join(IMAGES, "kernels", "initramfs.cpio"),
                  FD_ROOTFS: template}
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "tuntap", "add", "dev", "tap0", "mode", "tap"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "tap0", "up"], check=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", template,
                        os.path.join(work, "disk.qcow2")], check=True)
        fds = open_at_numbers(boot_files)
        try:
            names = traced_run(work, ns, "boot", fds, after_boot=first_boot(work, mem))
        finally:
            close_all(fds)
        fds = open_at_numbers({**boot_files, FD_INCOMING: mem})
        try:
            names |= traced_run(work, ns, "restore", fds, restore=True, after_boot=restore(work))
        finally:
            close_all(fds)
    finally:
        subprocess.run(["ip", "netns", "del", ns])
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(snapdir, ignore_errors=True)
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
