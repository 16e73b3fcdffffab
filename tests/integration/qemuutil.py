# SPDX-License-Identifier: Apache-2.0
"""QEMU as airlockd starts and drives it, for the tests and tools that start
QEMU themselves (agent_harness.py, test_jailer.py,
security/seccomp/derive-profile.py): the command line of qemu_spawn in
src/daemon/vmm/qemu/vmm-qemu.c, the guest's kernel command line (docs/guest.md, Boot
contract), and a QMP client that saves and loads states as airlockd does
(src/daemon/vmm/qemu/vmm-qmp.c, qemu_save, qemu_wait_incoming).

test_qemu_argv.py checks qemu_argv() against the command lines of the QEMUs
a real airlockd starts: change both together.
"""
import collections
import json
import os
import shutil
import socket
import subprocess
import time

# The fds QEMU reads its files from: fd numbers in its process (vmm-qemu.c
# puts them at these; 3 is the network namespace, joined and closed by the
# jailer). A caller that keeps them at other numbers passes its own Fds.
Fds = collections.namedtuple("Fds", "kernel initrd rootfs incoming mem")
DAEMON_FDS = Fds(kernel=4, initrd=5, rootfs=6, incoming=7, mem=8)
# include/airlock/proto.h
PORT_NAME = "org.airlock.agent.0"
NET_TAP = "tap0"
# The guest MAC of sandboxes from before per-VM MACs; airlockd gives every
# VM's NIC one of its own (drawn with its namespace; GET .../network).
NET_GUEST_MAC = "02:a1:0c:00:02:0f"
# vmm-qemu.c: TCG's translation cache, MiB.
TCG_TB_MIB = 128
SANDBOX_FLAGS = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"


def test_accel():
    """The accelerator the tests mirror: AIRLOCK_TEST_ACCEL, "kvm" or "tcg"
    (default). airlockd no longer picks KVM because /dev/kvm exists (a nested
    host can have a /dev/kvm that opens and still never boot a guest): it
    takes the accelerator a boot probe proved, so the tests cannot guess it
    from the host either and are told."""
    accel = os.environ.get("AIRLOCK_TEST_ACCEL", "tcg")
    if accel not in ("kvm", "tcg"):
        raise RuntimeError(f"AIRLOCK_TEST_ACCEL={accel!r}: must be kvm or tcg")
    return accel


def test_cpu():
    """The CPU model under KVM: AIRLOCK_TEST_CPU, default "host" (nested
    hosts where -cpu host aborts with "failed to set MSR 0x10a" need
    "host,-arch-capabilities"). Under TCG it is always "max"."""
    return os.environ.get("AIRLOCK_TEST_CPU", "host")


# Not a test for pytest to collect (these modules sit beside test_*.py).
test_accel.__test__ = test_cpu.__test__ = False


def host_tsc_khz():
    """Under TCG the guest's TSC is the host's (vmm-qemu.c, host_tsc_khz)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    raise RuntimeError("no cpu MHz in /proc/cpuinfo")


def guest_cmdline(kvm, root="/dev/vda"):
    """The guest kernel's command line. panic=-1 with -no-reboot: a guest
    that panics ends its QEMU. Under TCG, tsc=reliable (else the clocksource
    watchdog marks the TSC unstable and the guest never idles) and
    tsc_early_khz (else a third of boots hang calibrating). root None: no
    airlock.root, the agent stays in the initramfs."""
    append = "console=ttyS0 quiet panic=-1"
    if root:
        append += f" airlock.root={root}"
    if not kvm:
        append += f" tsc=reliable tsc_early_khz={host_tsc_khz()}"
    return append


def qemu_binary():
    """The first qemu-system-x86_64 on PATH, canonical (qemu_binary_path)."""
    path = shutil.which("qemu-system-x86_64")
    if not path:
        raise RuntimeError("qemu-system-x86_64 is not on PATH")
    return os.path.realpath(path)


def qemu_argv(name, *, vcpus=1, memory_mib=256, kvm=None, cpu=None, restore=False, mem_shared=None, net=True,
              fds=DAEMON_FDS, console=None, root="/dev/vda", mac=None):
    """qemu_spawn's command line. QEMU's cwd is its directory (disk.qcow2 and
    the sockets are relative names there); the kernel, initramfs and the
    template (backing of the qcow2 overlay) are open at fds.kernel,
    fds.initrd and fds.rootfs.
    kvm: None as test_accel() says; True: `-accel kvm -cpu CPU` (no
    translation cache, no tsc_* parameters for the guest), False: `-accel
    tcg,tb-size=... -cpu max`. cpu: the KVM CPU model, None as test_cpu()
    says (ignored under TCG). restore: no kernel, initramfs or cmdline
    (a restore runs from the saved RAM), -incoming defer (load() reads the
    state). mem_shared None: anonymous RAM; True/False: RAM mapped from the
    file at fds.mem, shared (a template's boot) or private (a restore from
    the template's snapshot). net: virtio-net on tap0 (QEMU runs in the
    namespace that has it), its MAC mac (None: NET_GUEST_MAC). console None: the console socket con.sock, as
    airlockd has it; else a file QEMU writes the console to."""
    if kvm is None:
        kvm = test_accel() == "kvm"
    if not kvm:
        cpu = "max"
    elif cpu is None:
        cpu = test_cpu()
    if mem_shared is None:
        ram = f"memory-backend-ram,id=mem,size={memory_mib}M"
    else:
        ram = (f"memory-backend-file,id=mem,size={memory_mib}M,mem-path=/proc/self/fd/{fds.mem},"
               f"share={'on' if mem_shared else 'off'}")
    argv = [qemu_binary(), "-name", name, "-M", "microvm,memory-backend=mem", "-object", ram,
            "-accel", "kvm" if kvm else f"tcg,tb-size={TCG_TB_MIB}", "-cpu", cpu,
            "-smp", str(vcpus), "-m", f"{memory_mib}M", "-nodefaults", "-no-user-config", "-nographic",
            "-no-reboot", "-sandbox", SANDBOX_FLAGS]
    if not restore:
        argv += ["-kernel", f"/proc/self/fd/{fds.kernel}", "-initrd", f"/proc/self/fd/{fds.initrd}",
                 "-append", guest_cmdline(kvm, root)]
    if console is None:
        argv += ["-chardev", "socket,id=con,path=con.sock,server=on,wait=off", "-serial", "chardev:con"]
    else:
        argv += ["-serial", f"file:{console}"]
    argv += ["-add-fd", f"fd={fds.rootfs},set=1,opaque=rootfs",
             "-blockdev", "driver=file,node-name=base-file,filename=/dev/fdset/1,read-only=on",
             "-blockdev", "driver=raw,node-name=base,file=base-file,read-only=on",
             "-blockdev", "driver=file,node-name=disk-file,filename=disk.qcow2,discard=unmap",
             "-blockdev", "driver=qcow2,node-name=root,file=disk-file,backing=base,discard=unmap",
             "-device", "virtio-blk-device,drive=root", "-device", "virtio-rng-device",
             "-device", "virtio-serial-device",
             "-chardev", "socket,id=ctl,path=ctl.sock,server=on,wait=off",
             "-device", f"virtserialport,chardev=ctl,name={PORT_NAME}",
             "-qmp", "unix:qmp.sock,server=on,wait=off"]
    if net:
        argv += ["-netdev", f"tap,id=n0,ifname={NET_TAP},script=no,downscript=no",
                 "-device", f"virtio-net-device,netdev=n0,mac={mac or NET_GUEST_MAC}"]
    if restore:
        argv += ["-incoming", "defer"]
    return argv


def create_overlay(rootfs, path):
    """The sandbox's disk: a qcow2 overlay over the template (qemu_prepare_disk;
    the backing name in it is never opened, the template is fds.rootfs)."""
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", os.path.realpath(rootfs), path],
                   check=True)


# ----------------------------------------------------------------- sockets and QMP

def connect_unix(path, proc=None, timeout_s=60):
    """A connection to QEMU's socket at path, retried while it is not there
    yet; fails at once when proc (QEMU, or its jailer) has exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except (FileNotFoundError, ConnectionRefusedError):
            s.close()
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"cannot connect to {path}: QEMU exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot connect to {path} within {timeout_s} s")
            time.sleep(0.02)


def qmp(path, command, send_fd=None, proc=None, **arguments):
    """One command on its own connection, as airlockd's QMP client does
    (src/daemon/vmm/qemu/vmm-qmp.c): greeting, qmp_capabilities, then with send_fd a
    `getfd` "snapshot" carrying that fd (SCM_RIGHTS), then the command, on
    the same connection (a named fd belongs to the connection). Returns its
    "return"."""
    s = connect_unix(path, proc)
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
        json.loads(f.readline())  # the greeting
        exchange({"execute": "qmp_capabilities"})
        if send_fd is not None:
            exchange({"execute": "getfd", "arguments": {"fdname": "snapshot"}}, send_fd)
        return exchange(dict(execute=command, arguments=arguments))
    finally:
        f.close()
        s.close()


def set_caps(path, proc=None):
    """set_migration_caps: every state is saved and read with x-ignore-shared
    (the RAM of a shared file-backed memory is left out); both sides must set
    it, it changes the stream's format."""
    qmp(path, "migrate-set-capabilities", proc=proc,
        capabilities=[{"capability": "x-ignore-shared", "state": True}])


def save(path, fd, proc=None, timeout_s=600):
    """qemu_save, the guest stopped: the capability, then the open file fd
    handed over (getfd) and `migrate` "fd:snapshot"; polled to the end."""
    set_caps(path, proc)
    qmp(path, "migrate", send_fd=fd, proc=proc, uri="fd:snapshot")
    deadline = time.monotonic() + timeout_s
    while True:
        st = qmp(path, "query-migrate", proc=proc)
        if st.get("status") == "completed":
            return
        if st.get("status") in ("failed", "cancelled"):
            raise RuntimeError(f"saving the VM failed: {st}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"saving the VM took more than {timeout_s} s: {st}")
        time.sleep(0.02)


def load(path, fd_num, proc=None, timeout_s=60):
    """qemu_wait_incoming, after a start with restore=True: the capability,
    `migrate-incoming` "fd:N" (N: the state's fd number in QEMU), until the
    state is loaded (the guest is then paused: `cont` runs it)."""
    set_caps(path, proc)
    qmp(path, "migrate-incoming", proc=proc, uri=f"fd:{fd_num}")
    deadline = time.monotonic() + timeout_s
    while True:
        status = qmp(path, "query-status", proc=proc)["status"]
        if status in ("internal-error", "shutdown"):
            raise RuntimeError(f"QEMU could not load the state: {status}")
        if status != "inmigrate":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"loading the state took more than {timeout_s} s")
        time.sleep(0.01)
