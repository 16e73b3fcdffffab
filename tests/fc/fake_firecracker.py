#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the `firecracker` binary, for the conformance tests of
Airlock's Firecracker backend on hosts without KVM.

    firecracker --api-sock PATH [--id ID]

It serves Firecracker's API on PATH (HTTP/1.1 over a unix socket, keep-alive,
answers shaped like Firecracker's: "HTTP/1.1 204 ", Server, Connection,
Content-Type and Content-Length with a body) and checks every request against
the spec (fcspec.py): method and path, headers, body against the schema. A
request that does not conform gets 400 with the problems as fault_message, as
Firecracker would refuse it. It also models the rules of the spec's prose that
matter to the backend: pre-boot-only resources, snapshot load only on a fresh
process, pause before snapshot create, Diff only with dirty-page tracking, the
files a boot and a load need, and the hybrid vsock device: a unix socket at
uds_path answering "CONNECT <port>\\n" with "OK <n>\\n" and relaying to the
guest (here an airlock-agent listening on $FAKE_FC_GUEST_SOCK with
--listen-unix), whose connections are reset at every snapshot.

With FAKE_FC_AGENT and FAKE_FC_GUEST_ROOT (tests/fc/test_fc_daemon.py, where
airlockd starts one fake per sandbox) each VM gets a "guest" of its own when
it starts or loads a snapshot: a copy of FAKE_FC_GUEST_ROOT (a template's
files) in ./guest with the agent in it, run chrooted there as
`airlock-agent --listen-unix /guest.sock` (so what the daemon does in the
guest, e.g. installing its CA, stays in that copy), stopped (SIGSTOP) while
the VM is paused and killed with the fake.

Environment:
  FAKE_FC_LOG          JSON lines: one record per request (and a start record)
  FAKE_FC_GUEST_SOCK   the "guest" behind vsock port 1024
  FAKE_FC_FAULT        "METHOD PATH": answer that request 400 with a fault
  FAKE_FC_AGENT        airlock-agent to run as each VM's own guest (with FAKE_FC_GUEST_ROOT)
  FAKE_FC_GUEST_ROOT   the files of that guest (copied per VM)
  AIRLOCK_FC_SPEC      the spec (default ../shared/firecracker/firecracker.yaml, else tests/fc/firecracker.yaml)
"""
import ctypes
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import fcspec  # noqa: E402

VERSION = "1.17.0-dev"
HEAD_MAX = 64 * 1024
BODY_MAX = 64 * 1024
AGENT_PORT = 1024
PRE_BOOT = {("PUT", "/machine-config"), ("PATCH", "/machine-config"), ("PUT", "/boot-source"),
            ("PUT", "/drives/{drive_id}"), ("PUT", "/network-interfaces/{iface_id}"), ("PUT", "/vsock"),
            ("PUT", "/entropy"), ("PUT", "/cpu-config"), ("PUT", "/mmds/config"), ("PUT", "/balloon"),
            ("PUT", "/pmem/{id}"), ("PUT", "/serial"), ("PUT", "/hotplug/memory")}
NOT_CONFIG = {"/logger", "/metrics"}


class Fault(Exception):
    pass


def tap_exists(dev):
    """In this process's network namespace (/sys shows the mounter's)."""
    with open("/proc/self/net/dev") as f:
        return any(line.split(":")[0].strip() == dev for line in f.readlines()[2:])


class Log:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()

    def write(self, rec):
        if not self.path:
            return
        with self.lock, open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")


class Vsock:
    """The hybrid vsock device's host side."""

    def __init__(self, uds_path, guest_sock, log):
        self.uds_path = uds_path
        self.guest_sock = guest_sock
        self.log = log
        self.pairs = []
        self.lock = threading.Lock()
        self.next_port = 1073741824
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(uds_path)  # fails if it exists, like Firecracker
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        line = b""
        while not line.endswith(b"\n") and len(line) < 32:
            c = conn.recv(1)
            if not c:
                conn.close()
                return
            line += c
        ok = line.startswith(b"CONNECT ") and line[8:-1].isdigit()
        port = int(line[8:-1]) if ok else -1
        self.log.write({"event": "vsock-connect", "line": line.decode(errors="replace"), "port": port})
        if port != AGENT_PORT or not self.guest_sock:
            conn.close()  # nothing listens there
            return
        guest = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            guest.connect(self.guest_sock)
        except OSError:
            conn.close()
            guest.close()
            return
        with self.lock:
            host_port = self.next_port
            self.next_port += 1
            self.pairs.append((conn, guest))
        conn.sendall(b"OK %d\n" % host_port)
        threading.Thread(target=self._relay, args=(conn, guest), daemon=True).start()
        threading.Thread(target=self._relay, args=(guest, conn), daemon=True).start()

    @staticmethod
    def _relay(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def reset(self):
        """VIRTIO_VSOCK_EVENT_TRANSPORT_RESET: every connection ends."""
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.log.write({"event": "vsock-reset", "connections": len(pairs)})


GUEST_DIR = "guest"


def _die_with_parent():
    """In the agent's child: SIGKILL when the fake dies (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


class OwnGuest:
    """An airlock-agent of this VM alone, chrooted in a copy of a template's files."""

    def __init__(self, agent, root, log):
        if os.path.exists(GUEST_DIR):
            shutil.rmtree(GUEST_DIR)
        shutil.copytree(root, GUEST_DIR, symlinks=True)
        shutil.copy2(agent, os.path.join(GUEST_DIR, "airlock-agent"))
        # What the guest kernel's devtmpfs would give the agent.
        os.makedirs(os.path.join(GUEST_DIR, "dev"), exist_ok=True)
        for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
            node = os.path.join(GUEST_DIR, "dev", name)
            if not os.path.exists(node):
                os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        self.sock = os.path.join(GUEST_DIR, "guest.sock")
        self.proc = subprocess.Popen(["chroot", GUEST_DIR, "/airlock-agent", "--listen-unix", "/guest.sock"],
                                     env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                          "AIRLOCK_AGENT_RUN_DIR": "/run/airlock"},
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open("guest-agent.log", "ab"), start_new_session=True,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.sock) and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.01)
        log.write({"event": "guest", "pid": self.proc.pid, "listening": os.path.exists(self.sock)})

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass


class VM:
    def __init__(self, instance_id, log):
        self.id = instance_id
        self.log = log
        self.state = "Not started"
        self.config = {"drives": {}, "network-interfaces": {}}
        self.configured = set()
        self.track_dirty = False
        self.vsock = None
        self.guest = None

    # ---- requests

    def handle(self, method, template, params, body):
        if (method, template) in PRE_BOOT and self.state != "Not started":
            raise Fault("The requested operation is not supported after starting the microVM.")
        if method == "PUT" and template not in NOT_CONFIG:
            self.configured.add(template)
        if method == "GET" and template == "/":
            return 200, {"app_name": "Firecracker", "id": self.id, "state": self.state, "vmm_version": VERSION}
        if method == "GET" and template == "/version":
            return 200, {"firecracker_version": VERSION}
        if method == "GET" and template == "/vm/config":
            return 200, self.full_config()
        if template == "/machine-config":
            self.config["machine-config"] = body
            self.track_dirty = bool(body.get("track_dirty_pages"))
        elif template == "/boot-source":
            self.config["boot-source"] = body
        elif template == "/drives/{drive_id}":
            self.config["drives"][params["drive_id"]] = body
        elif template == "/network-interfaces/{iface_id}":
            dev = body["host_dev_name"]
            if not tap_exists(dev):
                raise Fault(f"Could not create the network device: Open tap device failed: {dev} does not exist "
                            "in the VMM's network namespace")
            self.config["network-interfaces"][params["iface_id"]] = body
        elif template in ("/vsock", "/entropy"):
            self.config[template[1:]] = body
        elif template == "/actions":
            return self.action(body["action_type"])
        elif template == "/vm":
            if self.state == "Not started":
                raise Fault("The requested operation is not supported before starting the microVM.")
            self.state = "Paused" if body["state"] == "Paused" else "Running"
            if self.guest:
                self.guest.signal(signal.SIGSTOP if self.state == "Paused" else signal.SIGCONT)
        elif template == "/snapshot/create":
            self.snapshot_create(body)
        elif template == "/snapshot/load":
            self.snapshot_load(body)
        elif method != "GET":
            pass  # accepted and ignored: not used by Airlock
        return 204, None

    def action(self, kind):
        if kind == "InstanceStart":
            if self.state != "Not started":
                raise Fault("The microVM is already running.")
            self.check_boot_files()
            self.start_devices()
            self.state = "Running"
        elif kind == "SendCtrlAltDel":
            if self.state == "Not started":
                raise Fault("The requested operation is not supported before starting the microVM.")
        else:
            raise Fault(f"{kind} is not supported here.")
        return 204, None

    def check_boot_files(self):
        boot = self.config.get("boot-source")
        if not boot:
            raise Fault("Cannot start microvm without kernel configuration.")
        try:
            with open(boot["kernel_image_path"], "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise Fault(f"Cannot open the kernel image: {e}")
        if magic != b"\x7fELF":
            raise Fault("Cannot load kernel due to invalid memory configuration or invalid kernel image: "
                        "Invalid Elf magic number")
        if "initrd_path" in boot and not os.path.isfile(boot["initrd_path"]):
            raise Fault(f"Cannot load initrd: {boot['initrd_path']} does not exist")
        for d in self.config["drives"].values():
            if not os.path.isfile(d["path_on_host"]):
                raise Fault(f"Unable to open the block device backing file {d['path_on_host']}")

    def start_devices(self, paused=False):
        guest_sock = os.environ.get("FAKE_FC_GUEST_SOCK")
        if os.environ.get("FAKE_FC_AGENT") and os.environ.get("FAKE_FC_GUEST_ROOT"):
            self.guest = OwnGuest(os.environ["FAKE_FC_AGENT"], os.environ["FAKE_FC_GUEST_ROOT"], self.log)
            guest_sock = self.guest.sock
            if paused:
                self.guest.signal(signal.SIGSTOP)
        vs = self.config.get("vsock")
        if vs:
            self.vsock = Vsock(vs["uds_path"], guest_sock, self.log)

    def snapshot_create(self, body):
        if self.state == "Not started":
            raise Fault("The requested operation is not supported before starting the microVM.")
        if self.state != "Paused":
            raise Fault("Cannot create a snapshot: the microVM is not paused.")
        kind = body.get("snapshot_type", "Full")
        if kind == "Diff" and not self.track_dirty:
            raise Fault("Diff snapshots are not enabled: track_dirty_pages was not set.")
        mem_mib = self.config.get("machine-config", {}).get("mem_size_mib", 128)
        try:
            with open(body["mem_file_path"], "wb") as f:
                f.write(f"FAKE-FC-MEMORY {kind}\n".encode())
                f.truncate(mem_mib << 20)  # sparse, as big as the guest's memory
            with open(body["snapshot_path"], "w") as f:
                json.dump({"fake_firecracker_vmstate": 1, "type": kind, "config": self.full_config()}, f)
        except OSError as e:
            raise Fault(f"Cannot create the snapshot files: {e}")
        if self.vsock:
            self.vsock.reset()

    def snapshot_load(self, body):
        if self.state != "Not started" or self.configured - {"/snapshot/load"}:
            raise Fault("Loading a microVM snapshot not allowed after configuring boot-specific resources.")
        mem = body.get("mem_backend", {}).get("backend_path") or body.get("mem_file_path")
        if body.get("mem_backend", {}).get("backend_type") == "Uffd":
            raise Fault("Uffd is not modelled by the fake.")
        try:
            with open(mem, "rb") as f:
                if not f.read(16).startswith(b"FAKE-FC-MEMORY"):
                    raise Fault("The memory file is not a snapshot's")
            with open(body["snapshot_path"]) as f:
                state = json.load(f)
        except (OSError, ValueError) as e:
            raise Fault(f"Load snapshot error: {e}")
        if state.get("type") != "Full":
            raise Fault("Load snapshot error: a Diff snapshot is not resumable before it is merged onto a base")
        cfg = state["config"]
        self.config = {"drives": {d["drive_id"]: d for d in cfg.get("drives", [])},
                       "network-interfaces": {n["iface_id"]: n for n in cfg.get("network-interfaces", [])}}
        for k in ("machine-config", "boot-source", "vsock", "entropy"):
            if k in cfg:
                self.config[k] = cfg[k]
        for d in self.config["drives"].values():
            if not os.path.isfile(d["path_on_host"]):
                raise Fault(f"Load snapshot error: the drive {d['path_on_host']} is missing")
        for n in self.config["network-interfaces"].values():
            if not tap_exists(n["host_dev_name"]):
                raise Fault(f"Load snapshot error: the tap {n['host_dev_name']} is missing")
        self.track_dirty = bool(body.get("track_dirty_pages") or body.get("enable_diff_snapshots"))
        self.start_devices(paused=not body.get("resume_vm"))
        self.state = "Running" if body.get("resume_vm") else "Paused"

    def full_config(self):
        c = {k: v for k, v in self.config.items() if k not in ("drives", "network-interfaces")}
        c["drives"] = list(self.config["drives"].values())
        c["network-interfaces"] = list(self.config["network-interfaces"].values())
        return c


def read_request(conn, buf):
    """(method, path, version, headers, body, problems, rest) or None at EOF."""
    while b"\r\n\r\n" not in buf:
        if len(buf) > HEAD_MAX:
            raise ValueError("request head too long")
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    problems = []
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise ValueError(f"bad request line {lines[0]!r}")
    method, path, version = parts
    if version != "HTTP/1.1":
        problems.append(f"not HTTP/1.1: {version}")
    headers = {}
    for line in lines[1:]:
        if ":" not in line or line[0] in " \t":
            problems.append(f"bad header line {line!r}")
            continue
        k, v = line.split(":", 1)
        k = k.strip().lower()
        if k in headers:
            problems.append(f"header {k} twice")
        headers[k] = v.strip()
    if "transfer-encoding" in headers:
        problems.append("Transfer-Encoding in a request")
    if "host" not in headers:
        problems.append("no Host header")
    length = 0
    if "content-length" in headers:
        if not headers["content-length"].isdigit():
            raise ValueError("bad Content-Length")
        length = int(headers["content-length"])
        if length > BODY_MAX:
            raise ValueError("body too large")
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    return method, path, version, headers, rest[:length], problems, rest[length:]


def answer(conn, status, body=None):
    head = f"HTTP/1.1 {status} \r\nServer: Firecracker API\r\nConnection: keep-alive\r\n"
    if body is None and status == 204:
        conn.sendall((head + "\r\n").encode())
        return
    data = json.dumps(body if body is not None else {}).encode()
    head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    conn.sendall(head.encode() + data)


def serve(conn, spec, vm, log, fault):
    buf = b""
    with conn:
        while True:
            try:
                req = read_request(conn, buf)
            except ValueError as e:
                log.write({"event": "bad-http", "error": str(e)})
                answer(conn, 400, {"fault_message": str(e)})
                return
            if req is None:
                return
            method, path, _, headers, body_bytes, problems, buf = req
            template, params, body, spec_problems = spec.check_request(method, path, headers, body_bytes)
            problems += spec_problems
            rec = {"event": "request", "method": method, "path": path, "template": template, "params": params,
                   "body": body, "problems": problems}
            if problems:
                status, out = 400, {"fault_message": "; ".join(problems)}
            elif fault and fault == f"{method} {path}":
                status, out = 400, {"fault_message": f"injected fault for {fault}"}
            else:
                try:
                    status, out = vm.handle(method, template, params, body)
                except Fault as e:
                    status, out = 400, {"fault_message": str(e)}
            if status == 200:
                # The fake's own answers conform too.
                rec["response_problems"] = spec.validate(spec.response_schema(method, template, 200), out,
                                                         "response", request=False)
            rec["status"] = status
            if status >= 400:
                rec["fault"] = out["fault_message"]
            log.write(rec)
            answer(conn, status, out)


def main(argv):
    api_sock, instance_id = None, "anonymous-instance"
    args = argv[1:]
    while args:
        a = args.pop(0)
        if a == "--api-sock" and args:
            api_sock = args.pop(0)
        elif a == "--id" and args:
            instance_id = args.pop(0)
        else:
            print(f"fake firecracker: unexpected argument {a!r}", file=sys.stderr)
            return 1
    if not api_sock:
        print("fake firecracker: --api-sock is required", file=sys.stderr)
        return 1
    log = Log(os.environ.get("FAKE_FC_LOG"))
    log.write({"event": "start", "pid": os.getpid(), "argv": argv[1:], "cwd": os.getcwd(),
               "netns": os.readlink("/proc/self/ns/net"), "stdout_is_fifo": os.path.exists("/proc/self/fd/1") and
               os.stat("/proc/self/fd/1").st_mode & 0o170000 == 0o010000})
    spec = fcspec.Spec()
    vm = VM(instance_id, log)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(api_sock)
    sock.listen(16)
    fault = os.environ.get("FAKE_FC_FAULT")
    # Like Firecracker's API thread: one connection at a time.
    while True:
        conn, _ = sock.accept()
        serve(conn, spec, vm, log, fault)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
