#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Derives security/seccomp/qemu-x86_64.json: the syscalls QEMU (and the
children it starts: /bin/sh and cat for exec: migration) makes while it runs an
Airlock sandbox, measured with `strace -f -c` on real runs.

What is exercised (the command line of src/daemon/vmm-qemu.c, TCG or KVM as
the host has it, a tap in a network namespace):
  boot to the agent's HELLO; execs with stdin/stdout; a file written and read
  back; console socket read; stop/cont (pause/resume); migrate to
  "exec:cat > FILE" (snapshot); quit; then a restore with -incoming
  "exec:cat FILE", cont, HELLO, THAW, an exec, quit.

Usage (root, after `make all images`):
  /usr/bin/python3 security/seccomp/derive-profile.py [--out FILE] [--merge]
--merge keeps the syscalls already in FILE (a profile only grows unless a
person decides otherwise). Prints what was added.
"""
import argparse
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
# Made by the jailer itself after the filter is loaded (its execve of the VMM,
# and the message and exit if that execve fails), and the kernel's own
# restart path for interrupted syscalls.
ALWAYS = {"execve", "write", "exit", "exit_group", "rt_sigreturn", "restart_syscall"}
# Paths of QEMU that a TCG run on this kind of host does not take, added by
# hand (each with its reason; keep this list short and explained).
EXTRA = {
    "tgkill": "KVM: qemu_cpu_kick() signals vCPU threads (pthread_kill)",
    "rt_sigtimedwait": "KVM: kvm_eat_signals() and SIG_IPI handling",
    "sigaltstack": "coroutine and vCPU thread signal stacks",
    "fallocate": "discard=unmap: a guest TRIM punches holes in the qcow2 overlay",
    "ftruncate": "qcow2 growth/shrink and snapshot files",
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
    "mlock": "-overcommit mem-lock=on",
    "munlock": "same",
}
# Refused with ENOSYS instead of allowed: QEMU probes io_uring for its event
# loop and falls back to ppoll/epoll; io_uring is a large kernel surface the
# VMM does not need (and io_uring_enter never showed up in a trace, so
# allowing setup alone could kill a VMM that later tried to use its ring).
ENOSYS = ["io_uring_setup", "io_uring_enter", "io_uring_register"]
COMMENT = ("Syscalls QEMU -M microvm may make inside airlock-jailer (with /bin/sh and cat for exec: "
           "migration). Derived with strace -f -c by security/seccomp/derive-profile.py; see docs/jailer.md. "
           "Name-only allow-list: arguments are not filtered.")


def qemu_argv(incoming=None, net=True):
    """The command line of src/daemon/vmm-qemu.c (cwd = the sandbox dir)."""
    kvm = os.path.exists("/dev/kvm")
    append = "console=ttyS0 quiet panic=-1 airlock.root=/dev/vda"
    if not kvm:
        append += f" tsc_early_khz={ah.host_tsc_khz()}"
    argv = ["qemu-system-x86_64", "-name", "airlock-seccomp", "-M", "microvm", "-accel", "kvm" if kvm else "tcg",
            "-cpu", "host" if kvm else "max", "-smp", "1", "-m", "256M", "-nodefaults", "-no-user-config",
            "-nographic", "-no-reboot", "-kernel", os.path.join(IMAGES, "kernels", "vmlinuz"),
            "-initrd", os.path.join(IMAGES, "kernels", "initramfs.cpio"), "-append", append,
            "-chardev", "socket,id=con,path=con.sock,server=on,wait=off", "-serial", "chardev:con",
            "-drive", "id=root,file=disk.qcow2,format=qcow2,if=none,discard=unmap",
            "-device", "virtio-blk-device,drive=root", "-device", "virtio-rng-device",
            "-device", "virtio-serial-device",
            "-chardev", "socket,id=ctl,path=ctl.sock,server=on,wait=off",
            "-device", "virtserialport,chardev=ctl,name=org.airlock.agent.0",
            "-qmp", "unix:qmp.sock,server=on,wait=off"]
    if net:
        argv += ["-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
                 "-device", "virtio-net-device,netdev=n0,mac=52:54:00:12:34:56"]
    if incoming:
        argv += ["-incoming", incoming]
    return argv


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


def qmp(path, proc, command, **arguments):
    s = connect(path, proc)
    s.settimeout(60)
    f = s.makefile("rwb")
    try:
        json.loads(f.readline())
        for cmd in ({"execute": "qmp_capabilities"}, dict(execute=command, arguments=arguments)):
            f.write(json.dumps(cmd).encode() + b"\n")
            f.flush()
            while True:
                msg = json.loads(f.readline())
                if "event" in msg:
                    continue
                if "error" in msg:
                    raise RuntimeError(f"QMP {command}: {msg['error']}")
                break
        return msg.get("return")
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


def traced_run(work, ns, tag, incoming=None, after_boot=None):
    summary = os.path.join(work, f"strace-{tag}.txt")
    cmd = ["ip", "netns", "exec", ns, "strace", "-f", "-qq", "-c", "-o", summary, "--"] + qemu_argv(incoming)
    proc = subprocess.Popen(cmd, cwd=work, stdin=subprocess.DEVNULL)
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


def first_boot(work):
    def run(proc):
        c = ah.Client(connect(os.path.join(work, "ctl.sock"), proc))
        ftype, _, _ = c.recv(0, 120)
        assert ftype == ah.HELLO
        workload(c)
        q = os.path.join(work, "qmp.sock")
        qmp(q, proc, "stop")
        qmp(q, proc, "cont")
        qmp(q, proc, "stop")
        qmp(q, proc, "migrate", uri="exec:cat > mem.bin")
        while qmp(q, proc, "query-migrate").get("status") not in ("completed", "failed"):
            time.sleep(0.05)
        assert qmp(q, proc, "query-migrate")["status"] == "completed"
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=PROFILE)
    ap.add_argument("--merge", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="airlock-seccomp-")
    ns = f"airlock-seccomp-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "tuntap", "add", "dev", "tap0", "mode", "tap"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "tap0", "up"], check=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                        os.path.realpath(os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4")),
                        os.path.join(work, "disk.qcow2")], check=True)
        names = traced_run(work, ns, "boot", after_boot=first_boot(work))
        names |= traced_run(work, ns, "restore", incoming="exec:cat mem.bin", after_boot=restore(work))
    finally:
        subprocess.run(["ip", "netns", "del", ns])
        shutil.rmtree(work, ignore_errors=True)
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
    print(f"{args.out}: {len(final)} syscalls ({len(names - old)} seen now but not before: "
          f"{' '.join(sorted(names - old)) if old else 'all new'})")


if __name__ == "__main__":
    main()
