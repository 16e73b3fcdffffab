# SPDX-License-Identifier: Apache-2.0
"""What the sandbox benchmarks share: an airlockd of their own on a temporary
state dir, a small HTTP-over-unix-socket client, percentiles, the VMM
processes of a sandbox, the machine's description, and the figures file
bench/all turns into bench/results.md.

Not a test library: nothing here asserts anything about time.
"""
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
AIRLOCKD = os.path.join(BUILD, "airlockd")
IMAGES = os.path.join(BUILD, "images")
MIB = 1 << 20

# Each airlockd a benchmark starts gets a jail uid range of its own, away from
# the default one (1500000000) and the test suite's, so that daemons running
# in parallel on this host never share a sandbox uid.
JAIL_UID_BASE = 1_800_000_000
JAIL_UID_COUNT = 4096
JAIL_UID_SLOTS = 100_000
STARTUP_TIMEOUT_S = 30
STOP_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 600

# The tests' client of the API (tests/integration/apihttp.py, standard library only).
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from apihttp import UnixHTTPConnection  # noqa: E402


def note(name, msg):
    print(f"bench/{name}: {msg}", flush=True)


# ------------------------------------------------------------ the API client

class ApiError(RuntimeError):
    pass


def call(sock, method, path, body=None, data=None, want=None, raw=False):
    """One request on a new connection (as a client does). body: JSON; data:
    raw bytes. Returns (status, JSON or None), or (status, bytes) with raw.
    want: the status expected, else ApiError."""
    conn = UnixHTTPConnection(sock, REQUEST_TIMEOUT_S)
    try:
        headers = {}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif data is not None:
            headers["Content-Type"] = "application/octet-stream"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        out = r.read()
    finally:
        conn.close()
    if want is not None and r.status != want:
        raise ApiError(f"{method} {path} answered {r.status}: {out[:500]!r}")
    if raw:
        return r.status, out
    return r.status, (json.loads(out) if out else None)


# ------------------------------------------------------------ an airlockd of our own

def jail_args(slot=0):
    """airlockd flags for a jail uid range of this process's own (slot: which
    of its daemons, 0-3)."""
    k = (os.getpid() * 4 + slot) % JAIL_UID_SLOTS
    return ["--jail-uid-base", str(JAIL_UID_BASE + k * JAIL_UID_COUNT), "--jail-uid-count", str(JAIL_UID_COUNT)]


class Daemon:
    """airlockd on a temporary state dir. slot picks its jail uid range;
    extra: more flags (--max-concurrent-starts ...)."""

    def __init__(self, name, slot=0, extra=(), keep=False):
        self.name = name
        self.base = tempfile.mkdtemp(prefix=f"airlock-bench-{name}-")
        self.sock = os.path.join(self.base, "airlockd.sock")
        self.state = os.path.join(self.base, "state")
        self.log_path = os.path.join(self.base, "airlockd.log")
        self.argv = [AIRLOCKD, "--socket", self.sock, "--state-dir", self.state, "--image-dir", IMAGES] + \
            jail_args(slot) + list(extra)
        self.keep = keep
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def start(self):
        for p in (AIRLOCKD, os.path.join(IMAGES, "kernels", "vmlinuz"),
                  os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4")):
            if not os.path.exists(p):
                sys.exit(f"bench/{self.name}: {p} is missing; run 'make all images'")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     close_fds=True)
        log.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"bench/{self.name}: airlockd exited with {self.proc.returncode}; see {self.log_path}")
            try:
                if os.path.exists(self.sock) and call(self.sock, "GET", "/healthz")[0] == 200:
                    self.health = self.accel_decided()
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.close()
        sys.exit(f"bench/{self.name}: airlockd did not answer /healthz within {STARTUP_TIMEOUT_S} s")

    def accel_decided(self):
        return wait_accel(self.sock)

    def call(self, method, path, body=None, **kw):
        return call(self.sock, method, path, body, **kw)

    def create(self, body):
        return self.call("POST", "/v1/sandboxes", body, want=201)[1]

    def exec_ok(self, sid, cmd, stdout=None):
        _, res = self.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd}, want=200)
        if res.get("exit_code") != 0 or (stdout is not None and res.get("stdout") != stdout):
            raise ApiError(f"exec {cmd} in {sid}: {res!r}")
        return res

    def delete(self, sid):
        return self.call("DELETE", f"/v1/sandboxes/{sid}")[0]

    def vmms(self):
        """{sandbox id: VMM processes} of this daemon (see vmm_pids)."""
        return vmm_pids(self.proc.pid)

    def close(self):
        """Deletes every sandbox left, stops the daemon (by its pid), then kills
        any VMM process of it that is still there (by pid). Returns the pids
        that had to be killed."""
        killed = []
        if self.proc is not None and self.proc.poll() is None:
            try:
                _, res = self.call("GET", "/v1/sandboxes")
                for sb in res["sandboxes"]:
                    self.delete(sb["id"])
            except (OSError, ApiError, TypeError, KeyError):
                pass
            left = [p for ps in self.vmms().values() for p in ps]
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for pid in left:
                if pid_alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    except ProcessLookupError:
                        pass
        killed += self.kill_strays()
        if killed:
            note(self.name, f"killed VMM processes left by airlockd: {killed}")
        if self.keep:
            note(self.name, f"kept {self.base}")
        else:
            shutil.rmtree(self.base, ignore_errors=True)
        return killed


    def kill_strays(self):
        """Once the daemon is gone: kills any process whose command line
        names this daemon's temporary dir (a VM a create started while it
        was stopping, no longer its child), then has the jailer remove the
        cgroups of those sandboxes. Returns the pids killed."""
        if self.proc is None or self.proc.poll() is None:
            return []
        ids, killed = set(), []
        for pid in all_pids():
            argv = cmdline(pid)
            if pid == os.getpid() or not any(self.base in a for a in argv) or not pid_alive(pid):
                continue
            if os.path.basename(argv[0]) == "airlock-jailer" and "--id" in argv[:-1]:
                ids.add(argv[argv.index("--id") + 1])
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        parent = self.argv[self.argv.index("--cgroup-parent") + 1] if "--cgroup-parent" in self.argv else "airlock"
        for sid in sorted(ids):
            subprocess.run([os.path.join(BUILD, "airlock-jailer"), "--cleanup", "--id", sid, "--cgroup-parent",
                            parent], stdin=subprocess.DEVNULL, capture_output=True, timeout=STOP_TIMEOUT_S)
        return killed


# ------------------------------------------------------------ processes

def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rfind(")") + 2:].split()


def pid_alive(pid):
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def children(pid):
    """The children of pid (every thread's /proc/PID/task/TID/children)."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def cpu_s(pid, reaped=False):
    """User + system CPU seconds of a process (its threads); with reaped,
    also those of the children it has waited for. 0 once it is gone."""
    st = _stat(pid)
    if st is None:
        return 0.0
    return sum(int(x) for x in st[11:15 if reaped else 13]) / os.sysconf("SC_CLK_TCK")


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().rstrip(b"\0").split(b"\0")]
    except OSError:
        return []


def vmm_pids(daemon_pid):
    """{sandbox id: [jailer pid, QEMU pid, ...]}: the descendants of airlockd
    whose command line names airlock-<sandbox id>, with their own
    descendants. Template boots (not a sandbox) are keyed by what their
    command line names."""
    out = {}

    def subtree(pid):
        acc = [pid]
        for c in children(pid):
            acc += subtree(c)
        return acc

    for child in children(daemon_pid):
        tree = subtree(child)
        key = None
        for pid in tree:
            for a in cmdline(pid):
                if a.startswith("airlock-") and not a.startswith("airlock-jailer"):
                    key = a[len("airlock-"):]
                    break
            if key:
                break
        if key is None:
            # The jailer before it execs QEMU, or some other helper: keyed by pid.
            key = f"pid-{child}"
        out.setdefault(key, []).extend(tree)
    return out


def smaps_rollup(pid):
    """{'Rss': kB, 'Pss': kB, 'Shared_Clean': kB, ...} of a process, or None."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":"):
            out[parts[0][:-1]] = int(parts[1])
    return out


# ------------------------------------------------------------ figures

def pct(xs, p):
    """The p-th percentile (0 < p < 100), linear between closest ranks."""
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[p - 1]


def spread(xs):
    if not xs:
        nan = float("nan")
        return {"p50": nan, "p95": nan, "p99": nan, "min": nan, "max": nan, "n": 0}
    return {"p50": pct(xs, 50), "p95": pct(xs, 95), "p99": pct(xs, 99), "min": min(xs), "max": max(xs),
            "n": len(xs)}


# How long a daemon's accelerator probe may take (two CPU models of 10 s and
# the jail's set-up).
ACCEL_PROBE_WAIT_S = 40
# The accelerator of the daemon the figures are being made with: "tcg",
# "kvm (-cpu host)", ...; set by wait_accel (Daemon.start calls it). Figures
# made without a daemon ran no VM.
NO_VM = "no VM"
ACCEL = NO_VM


def wait_accel(sock):
    """/healthz once the accelerator's probe has decided (airlockd --accel
    auto, the default: KVM only once a guest booted on it). Every figure made
    after it is labelled with it (Figures.add)."""
    deadline = time.monotonic() + ACCEL_PROBE_WAIT_S
    while True:
        health = call(sock, "GET", "/healthz")[1]
        if health.get("accel") != "probing" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    global ACCEL
    ACCEL = accel_label(health)
    return health


def accel_label(health):
    accel = health.get("accel", "?")
    return f"{accel} (-cpu {health['cpu']})" if accel == "kvm" and health.get("cpu") else accel


class Figures:
    """Rows for bench/results.md: each figure with its baseline, the ratio of
    the two, and where the issue names one, its target and whether it was
    met. Written as JSON when the bench is given --json FILE."""

    def __init__(self, bench):
        self.bench = bench
        self.rows = []
        self.notes = []

    def add(self, figure, value, unit, baseline=None, baseline_label="", target=None, met=None, ratio=None,
            accel=None):
        if ratio is None and baseline not in (None, 0) and value is not None:
            ratio = value / baseline
        self.rows.append({"bench": self.bench, "figure": figure, "value": value, "unit": unit,
                          "baseline": baseline, "baseline_label": baseline_label, "ratio": ratio,
                          "target": target, "met": met, "accel": accel or ACCEL})

    def note(self, text):
        self.notes.append(text)

    def write(self, path):
        if not path:
            return
        with open(path, "w") as f:
            json.dump({"bench": self.bench, "rows": self.rows, "notes": self.notes}, f, indent=1)


def host_accel():
    """What airlockd's own probe finds here (airlockd --check): /dev/kvm's
    presence is no proof that KVM runs a guest."""
    if not os.path.exists("/dev/kvm"):
        return "TCG (no /dev/kvm)"
    base = tempfile.mkdtemp(prefix="airlock-bench-check-")
    try:
        p = subprocess.run([AIRLOCKD, "--check", "--socket", os.path.join(base, "s.sock"), "--state-dir",
                            os.path.join(base, "state"), "--image-dir", IMAGES], capture_output=True, text=True,
                           timeout=120)
        kv = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
        return f"{kv.get('accel', '?').upper()}: {kv.get('accel.reason', p.stderr.strip()[-300:])}"
    except (OSError, subprocess.SubprocessError) as e:
        return f"? (airlockd --check: {e})"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def machine():
    """{name: value} describing this machine, for the figures' heading."""
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    try:
        qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True,
                              timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        qemu = "?"
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "ram": f"{mem_kb / 2**20:.1f} GiB",
        "kernel": f"Linux {platform.release()}",
        "qemu": qemu,
        "accel": host_accel(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": load,
    }
