# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the integration tests: a real airlockd on a temporary state
dir, an HTTP client over its unix socket, the real CLI, real VMs.

Nothing is mocked. Needs `make all images` (the Makefile's `integration`
target does it). Run with Debian's pytest: `pytest-3 -v tests/integration`.
"""
import os
import shutil
import signal
import subprocess
import time
import zlib

import pytest

# HTTP to the API (apihttp.py): conftest's names too, for apiutil.py and tests/security.
from apihttp import Response, UnixHTTPConnection, exchange, request_body  # noqa: F401
from qemuutil import test_accel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
AIRLOCKD = os.path.join(BUILD, "airlockd")
JAILER = os.path.join(BUILD, "airlock-jailer")
AIRLOCK = os.path.join(BUILD, "airlock")
IMAGES = os.path.join(BUILD, "images")

# Generous: boots are ~2-3 s each under TCG on 2 cores, but several at once
# on a loaded CI machine take longer. These bound a hang, they time nothing.
STARTUP_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
REQUEST_TIMEOUT_S = 300


# ----------------------------------------------------------------- HTTP client

class Api:
    """A client of the daemon's API. One connection per request, so it can be
    used from several threads at once."""

    def __init__(self, socket_path):
        self.socket_path = socket_path

    def request(self, method, path, body=None, raw=None, headers=None, timeout=REQUEST_TIMEOUT_S):
        data, hdrs = request_body(body, raw, headers)
        conn = UnixHTTPConnection(self.socket_path, timeout=timeout)
        try:
            conn.putrequest(method, path)
            for k, v in hdrs.items():
                conn.putheader(k, v)
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders()
            if data is not None:
                try:
                    conn.send(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The server may answer (413) and close before reading an
                    # oversize body: its answer is still there to read.
                    pass
            resp = conn.getresponse()
            raw_body = resp.read()
            return Response(resp.status, dict(resp.getheaders()), raw_body, method, path)
        finally:
            conn.close()

    # Conveniences: each returns the Response; *_ok variants assert success.
    def healthz(self):
        return self.request("GET", "/healthz")

    def create(self, **fields):
        return self.request("POST", "/v1/sandboxes", body=fields)

    def create_ok(self, **fields):
        fields.setdefault("template", "minimal")
        fields.setdefault("vcpus", 1)
        fields.setdefault("memory_mib", 256)
        r = self.create(**fields)
        assert r.status == 201, r
        assert r.json["state"] == "running", r
        return r.json

    def get(self, sid):
        return self.request("GET", f"/v1/sandboxes/{sid}")

    def list(self, all=False):
        r = self.request("GET", "/v1/sandboxes" + ("?all=true" if all else ""))
        assert r.status == 200, r
        return r.json["sandboxes"]

    def delete(self, sid):
        return self.request("DELETE", f"/v1/sandboxes/{sid}")

    def delete_ok(self, sid):
        r = self.delete(sid)
        assert r.status == 200, r
        assert r.json["state"] == "deleted", r
        return r.json

    def exec(self, sid, cmd, **fields):
        fields["cmd"] = cmd
        return self.request("POST", f"/v1/sandboxes/{sid}/exec", body=fields)

    def exec_ok(self, sid, cmd, **fields):
        r = self.exec(sid, cmd, **fields)
        assert r.status == 200, r
        return r.json


def stdout_bytes(result):
    """The bytes of an exec answer's stdout, whatever its encoding."""
    return decode_stream(result["stdout"], result["stdout_encoding"])


def decode_stream(text, encoding):
    import base64
    if encoding == "base64":
        return base64.b64decode(text)
    assert encoding == "utf8", encoding
    return text.encode("utf-8")


# ----------------------------------------------------------------- processes

def _read(path, binary=False):
    try:
        with open(path, "rb") if binary else open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _parent(pid):
    stat = _read(f"/proc/{pid}/stat") or ""
    return int(stat[stat.rfind(")") + 2:].split()[1])


def vmm_dir(pid):
    """The host directory a VMM runs in: its own cwd, or for a jailed VMM
    (whose cwd is the root of its jail, "/" from here) its jailer's --root,
    the sandbox's vm/ directory, which stays in the jailer's command line
    when the directory itself is deleted or the jailer's cwd is inside the
    jail too. "" once it is gone."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
        if cwd != "/":
            return cwd
        ppid = _parent(pid)
        if ppid <= 1:
            return ""
        argv = (_read(f"/proc/{ppid}/cmdline", binary=True) or b"").split(b"\0")
        if b"--root" in argv[:-1]:
            return argv[argv.index(b"--root") + 1].decode("utf-8", "replace")
        return os.readlink(f"/proc/{ppid}/cwd")
    except (OSError, ValueError, IndexError):
        return ""


def cgroup_mounts():
    """{controller: (mount, "v1" or "v2")} for cpu, memory and pids, as the
    jailer finds them (`airlock-jailer --check`): a sandbox's cgroup is
    <mount>/<--cgroup-parent>/<id> there."""
    out = subprocess.run([JAILER, "--check"], capture_output=True, text=True).stdout
    mounts = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key in ("cgroup.cpu", "cgroup.memory", "cgroup.pids") and value.startswith("v"):
            version, _, mount = value.partition(":")
            mounts[key.split(".")[1]] = (mount, version)
    return mounts


def qemu_processes(state_dir=None, needle=None):
    """QEMU processes (pid -> cmdline) whose working directory is under
    state_dir (the daemon runs each VMM in its sandbox dir), or whose command
    line mentions needle (a sandbox id)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        raw = _read(f"/proc/{pid}/cmdline", binary=True)
        if not raw:
            continue
        argv = raw.rstrip(b"\0").split(b"\0")
        if b"qemu-system" not in os.path.basename(argv[0]):
            continue
        cmdline = " ".join(a.decode("utf-8", "replace") for a in argv)
        cwd = vmm_dir(pid)
        if (state_dir and (cwd == state_dir or cwd.startswith(state_dir.rstrip("/") + "/"))) or \
                (needle and needle in cmdline):
            found[pid] = cmdline
    return found


def zombie_children(ppid):
    """Children of ppid that have exited but were never reaped."""
    zombies = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if not stat:
            continue
        # pid (comm) state ppid ...: comm may contain spaces and parentheses.
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) >= 2 and rest[0] == "Z" and int(rest[1]) == ppid:
            zombies.append(int(entry))
    return zombies


def kill_pids(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def pid_alive(pid):
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def metrics(api):
    """GET /metrics as {series (name and labels): value}."""
    r = api.request("GET", "/metrics")
    assert r.status == 200, r
    out = {}
    for line in r.raw.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def wait_for(cond, timeout_s, what):
    """Polls cond until it is true (bounds a hang; not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


# ----------------------------------------------------------------- the daemon

def require_build():
    missing = [p for p in (AIRLOCKD, AIRLOCK, os.path.join(IMAGES, "kernels", "vmlinuz"),
                           os.path.join(IMAGES, "kernels", "initramfs.cpio"),
                           os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4"))
               if not os.path.exists(p)]
    if missing:
        pytest.fail("missing build outputs: " + ", ".join(missing) + "; run 'make all images' "
                    "(or 'make integration', which does)", pytrace=False)


JAIL_UID_COUNT = 4096
EGRESS_UID = 1_499_999_999  # the gateway's default uid (EGRESS_DEFAULT_UID, egress-supervisor.h)


class Daemon:
    """airlockd as a subprocess on its own state dir and socket."""

    def __init__(self, base_dir, image_dir=IMAGES, boot_timeout_s=None, state_dir=None, name="airlockd",
                 netns=None, extra_args=(), binary=AIRLOCKD, env=None):
        self.base_dir = str(base_dir)
        # Another build of airlockd (the crash points' build/crash/airlockd),
        # and environment variables on top of ours (start() may take new ones).
        self.binary = binary
        self.env = dict(env or {})
        # Run in that network namespace (see fakenet.py), with nsenter: `ip
        # netns exec` would also give it a fresh /sys without the cgroup
        # hierarchies the VMMs' jails need. Pass --resolver.
        self.netns = netns
        self.extra_args = list(extra_args)
        self.socket = os.path.join(self.base_dir, f"{name}.sock")
        self.state_dir = state_dir or os.path.join(self.base_dir, "state")
        self.image_dir = image_dir
        self.boot_timeout_s = boot_timeout_s
        self.log_path = os.path.join(self.base_dir, f"{name}.log")
        self.proc = None
        self.api = Api(self.socket)
        self.exit_codes = []

    def jail_uids(self):
        """A uid range of this state dir's own (a restart on the same state
        dir gets the same): daemons of a host must not share sandbox uids."""
        slot = zlib.crc32(os.path.abspath(self.state_dir).encode()) % 500000
        base = 1_000_000_000 + slot * JAIL_UID_COUNT
        if base <= EGRESS_UID < base + JAIL_UID_COUNT:  # airlockd refuses a range with the gateway's uid
            base += JAIL_UID_COUNT
        return base, JAIL_UID_COUNT

    def argv(self):
        argv = [self.binary, "--socket", self.socket, "--state-dir", self.state_dir, "--image-dir", self.image_dir]
        base, count = self.jail_uids()
        argv += ["--jail-uid-base", str(base), "--jail-uid-count", str(count)]
        if self.boot_timeout_s is not None:
            argv += ["--boot-timeout-s", str(self.boot_timeout_s)]
        # `make test-kvm` runs the suites against another backend (docs/kvm-host.md).
        if os.environ.get("AIRLOCK_TEST_BACKEND"):
            argv += ["--backend", os.environ["AIRLOCK_TEST_BACKEND"]]
        # The accelerator of QEMU's guests: TCG unless the run says otherwise
        # (`make test`'s KVM pass sets kvm, and the CPU model its probe chose),
        # so that a run is the same on hosts with and without a working KVM;
        # test_accel.py tests --accel auto itself.
        qemu = os.environ.get("AIRLOCK_TEST_BACKEND", "qemu") == "qemu" and "--backend" not in self.extra_args
        if qemu and "--accel" not in self.extra_args:
            argv += ["--accel", test_accel()]
            if test_accel() == "kvm" and os.environ.get("AIRLOCK_TEST_CPU"):
                argv += ["--cpu-model", os.environ["AIRLOCK_TEST_CPU"]]
        return argv + self.extra_args

    def start(self, wait_reattach=True):
        """Starts airlockd and waits for its API; with wait_reattach, also
        until it has re-attached every live sandbox it found (/healthz
        "reattaching" 0: until then requests about one answer 503)."""
        require_build()
        assert self.proc is None or self.proc.poll() is not None
        log = open(self.log_path, "ab")
        argv = (["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []) + self.argv()
        log.write(f"==== start: {' '.join(argv)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     close_fds=True, env={**os.environ, **self.env})
        log.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"airlockd exited with {self.proc.returncode} during start-up; "
                                     f"log:\n{self.log()}")
            if os.path.exists(self.socket):
                try:
                    r = self.api.healthz()
                    if r.status == 200 and (not wait_reattach or not r.json.get("reattaching")):
                        return self
                    last = r
                except OSError as e:
                    last = e
            time.sleep(0.05)
        self.proc.kill()
        raise AssertionError(f"airlockd did not answer GET /healthz within {STARTUP_TIMEOUT_S} s "
                             f"(last: {last!r}); log:\n{self.log()}")

    def stop(self):
        """SIGTERM, then check that it exited (returns its exit code)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"airlockd did not exit within {STOP_TIMEOUT_S} s of SIGTERM; "
                                 f"log:\n{self.log()}")
        self.exit_codes.append(rc)
        return rc

    def log(self, tail_lines=200):
        text = _read(self.log_path) or ""
        lines = text.splitlines()
        return "\n".join(lines[-tail_lines:])

    def sandbox_dir(self, sid):
        return os.path.join(self.state_dir, "sandboxes", sid)

    def vm_dir(self, sid):
        """The VMM's own directory (its jail root): disk and sockets."""
        return os.path.join(self.sandbox_dir(sid), "vm")

    def sandbox_dirs(self):
        d = os.path.join(self.state_dir, "sandboxes")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def qemus(self, needle=None):
        return qemu_processes(self.state_dir, needle)

    def cleanup(self):
        """Deletes every sandbox that is left, stops the daemon, and kills any
        QEMU still running from this state dir. Returns what had to be killed."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                for sb in self.api.list(all=False):
                    self.api.delete(sb["id"])
            except Exception:  # best effort: the daemon may be broken
                pass
            self.stop()
        leftovers = self.qemus()
        kill_pids(leftovers)
        return leftovers


def _report_on_failure(request, daemon):
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and not getattr(request.node, "airlock_log_printed", False):
        request.node.airlock_log_printed = True
        print(f"\n---- airlockd log ({daemon.log_path}), last lines ----\n{daemon.log()}")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def restart_daemon(tmp_path, request):
    """A daemon of the test's own, which it may kill and restart on the same
    state dir; its log is printed when the test fails."""
    d = Daemon(tmp_path).start()
    yield d
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n---- airlockd log ({d.log_path}) ----\n{d.log(tail_lines=400)}")
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU left running: {leftovers}"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """One daemon per test module, on the real images."""
    d = Daemon(tmp_path_factory.mktemp("airlockd")).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, (f"QEMU processes still running after every sandbox was deleted and the "
                           f"daemon stopped: {leftovers}; log:\n{d.log()}")


@pytest.fixture
def api(daemon, request):
    yield daemon.api
    _report_on_failure(request, daemon)


@pytest.fixture(scope="module")
def sandbox(daemon):
    """A running sandbox (minimal, 1 vCPU, 256 MiB) shared by a module."""
    sb = daemon.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    yield sb
    daemon.api.delete(sb["id"])


# ----------------------------------------------------------------- the CLI

class Cli:
    def __init__(self, socket_path):
        self.socket = socket_path

    def __call__(self, *args, input=None, timeout=REQUEST_TIMEOUT_S, env=None, socket_path=None):
        """Runs `airlock --socket SOCK ARGS...`; input (bytes/str) is its
        stdin, else /dev/null. Returns the CompletedProcess (bytes)."""
        argv = [AIRLOCK, "--socket", socket_path or self.socket, *args]
        if isinstance(input, str):
            input = input.encode()
        full_env = dict(os.environ)
        full_env.pop("AIRLOCK_SOCKET", None)
        full_env.update(env or {})
        return subprocess.run(argv, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=full_env)


@pytest.fixture
def cli(daemon, request):
    yield Cli(daemon.socket)
    _report_on_failure(request, daemon)


# ----------------------------------------------------------------- image dirs

def make_image_dir(base, kernels_from=None):
    """A private image dir that links to the built images: kernels/ (each
    file linked, so one can be replaced) and templates/minimal."""
    base = str(base)
    os.makedirs(os.path.join(base, "kernels"), exist_ok=True)
    os.makedirs(os.path.join(base, "templates"), exist_ok=True)
    src_kernels = kernels_from or os.path.join(IMAGES, "kernels")
    for name in os.listdir(src_kernels):
        os.symlink(os.path.join(src_kernels, name), os.path.join(base, "kernels", name))
    os.symlink(os.path.join(IMAGES, "templates", "minimal"), os.path.join(base, "templates", "minimal"))
    return base


def which(name):
    return shutil.which(name)
