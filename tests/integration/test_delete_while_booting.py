# SPDX-License-Identifier: Apache-2.0
"""A DELETE while a create still boots (docs/api.md, "DELETE /v1/sandboxes/{id}"):
the boot is cut short whatever its stage, the create answers `500 boot_failed`
("deleted while it booted"), the DELETE answers `200 deleted` within seconds
(not the template's build, not the boot or restore timeout), nothing of the
sandbox is left (VMM, jail uid, cgroup, network namespace, directory, start
slot), and the next create works. A create that waits for its template's
build stops waiting; the build goes on for the other creates.

The stages are reached without guessing times: a template or guest that
never says hello (an initramfs whose /init only sleeps) holds a build or a
cold boot as long as the test needs; a restore is held by stopping its QEMU
(SIGSTOP) as soon as it exists; the daemon's log says when a create has its
id and when the template's build started. Real daemon, real QEMU, nothing
simulated."""
import glob
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import (Daemon, _report_on_failure, cgroup_mounts, make_image_dir, metrics, qemu_processes,
                      require_build, wait_for)

WORDS = "deleted while it booted"
# A DELETE takes well under a second here; the bound is ~10x a loaded CI
# machine's and far below what it guards against (a build or a boot that
# waits out SILENT_BOOT_TIMEOUT_S, a restore's 120 s).
DELETE_BOUND_S = 15
SILENT_BOOT_TIMEOUT_S = 45
CREATING = re.compile(r"sandbox (sb-[0-9a-f]{16}): creating")


# ---------------------------------------------------------------- helpers

class Log:
    """The daemon's log from a point on."""

    def __init__(self, d):
        self.path = d.log_path
        self.offset = os.path.getsize(self.path)

    def text(self):
        with open(self.path, errors="replace") as f:
            f.seek(self.offset)
            return f.read()

    def wait(self, pattern, what, timeout_s=60):
        return wait_for(lambda: re.search(pattern, self.text()), timeout_s, what)

    def new_id(self, known=(), timeout_s=60):
        """The id of a create that logged "creating" and is not in known."""
        def find():
            ids = [i for i in CREATING.findall(self.text()) if i not in known]
            return ids[0] if ids else None
        return wait_for(find, timeout_s, "a create to log its sandbox id")


class Call:
    """One API request on a thread of its own."""

    def __init__(self, fn, *args, **kw):
        self.r = None
        self.exc = None
        self.t = threading.Thread(target=self._run, args=(fn, args, kw))
        self.t.start()

    def _run(self, fn, args, kw):
        try:
            self.r = fn(*args, **kw)
        except Exception as e:  # reported by result()
            self.exc = e

    def result(self, timeout_s=300):
        self.t.join(timeout_s)
        assert not self.t.is_alive(), "the request did not answer"
        if self.exc:
            raise self.exc
        return self.r


def create_call(api, **fields):
    fields.setdefault("template", "minimal")
    fields.setdefault("vcpus", 1)
    fields.setdefault("memory_mib", 256)
    return Call(api.create, **fields)


def timed_delete(api, sid):
    t0 = time.monotonic()
    r = api.delete(sid)
    took = time.monotonic() - t0
    assert r.status == 200 and r.json["state"] == "deleted", r
    assert took < DELETE_BOUND_S, f"the DELETE took {took:.1f} s: it waited for the boot instead of cutting it short"
    return took


def assert_deleted_while_booting(r, sid):
    """The documented answer, the same at every stage."""
    assert r.status == 500, r
    assert r.error_code == "boot_failed", r
    assert WORDS in r.error_message, r
    assert sid in r.error_message, r


def jail_processes(d):
    """Processes that run as one of the daemon's jail uids (a VMM, its jailer)."""
    base, count = d.jail_uids()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        if base <= uid < base + count:
            found.append(int(entry))
    return found


def daemon_netns(d):
    """The network namespaces the daemon and its children (the egress
    gateway) hold as fds: the pool's and one per live sandbox."""
    pids = [d.proc.pid] + [int(p) for p in subprocess.run(
        ["pgrep", "-P", str(d.proc.pid)], capture_output=True, text=True).stdout.split()]
    held = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("net:["):
                held.add(link)
    return held


def pool_ready(d):
    return metrics(d.api).get("airlock_netns_pool_ready", 0)


def netns_baseline(d):
    """The daemon's namespaces with no sandbox alive, once its pool is full."""
    wait_for(lambda: pool_ready(d) == pool_full(d), 30, "the netns pool to fill")
    return len(daemon_netns(d))


def pool_full(d):
    return d.pool_size


def assert_nothing_left(d, sid, netns_count, running=0):
    """Nothing of sid is left: its record says deleted (and it is not listed),
    no VMM, no process as a jail uid (unless `running` other sandboxes run),
    no cgroup, no directory, no start slot held, no network namespace beyond
    the pool's (netns_count, None: not checked) and the running ones'."""
    api = d.api
    r = api.get(sid)
    assert r.status == 200 and r.json["state"] == "deleted", r
    assert sid not in [s["id"] for s in api.list()]
    wait_for(lambda: not qemu_processes(needle=sid), 15, f"the VMM of {sid} to be gone")
    if not running:
        wait_for(lambda: not jail_processes(d), 15, "no process to run as a jail uid")
    for controller, (mount, _) in cgroup_mounts().items():
        left = glob.glob(os.path.join(mount, "*", sid)) + glob.glob(os.path.join(mount, "*", "*", sid))
        assert not left, f"the {controller} cgroup of {sid} is left: {left}"
    assert not os.path.exists(d.sandbox_dir(sid)), os.listdir(d.sandbox_dir(sid))
    m = metrics(api)
    assert m["airlock_starts_active"] == 0 and m["airlock_starts_waiting"] == 0, m
    if netns_count is not None:
        wait_for(lambda: len(daemon_netns(d)) <= netns_count + running, 30,
                 f"the network namespace of {sid} to be released")


def silent_initramfs(path, workdir):
    """An initramfs whose /init never starts the agent: a template build or a
    cold boot that waits for hello until the boot timeout."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    root = os.path.join(workdir, "silent-root")
    os.makedirs(os.path.join(root, "bin"))
    os.makedirs(os.path.join(root, "dev"))
    shutil.copy(busybox, os.path.join(root, "bin", "busybox"))
    with open(os.path.join(root, "init"), "w") as f:
        f.write("#!/bin/busybox sh\necho silent-init-started > /dev/console\n"
                "while :; do /bin/busybox sleep 3600; done\n")
    os.chmod(os.path.join(root, "init"), 0o755)
    files = subprocess.run(["find", ".", "-print0"], cwd=root, check=True, capture_output=True).stdout
    with open(path, "wb") as out:
        subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet"], cwd=root, input=files, stdout=out,
                       check=True)


POOL_SIZE = 2


def start_daemon(base, **kw):
    d = Daemon(base, extra_args=["--netns-pool", str(POOL_SIZE)] + kw.pop("extra_args", []), **kw)
    d.pool_size = POOL_SIZE
    return d.start()


# ---------------------------------------------------------------- a template that never says hello

def silent_images(base):
    images = make_image_dir(base / "images")
    os.unlink(os.path.join(images, "kernels", "initramfs.cpio"))
    silent_initramfs(os.path.join(images, "kernels", "initramfs.cpio"), str(base))
    return images


@pytest.fixture(scope="module")
def silent(tmp_path_factory):
    """A daemon whose template's guest never says hello: its template build
    and its cold boots wait SILENT_BOOT_TIMEOUT_S for it."""
    require_build()
    base = tmp_path_factory.mktemp("silent")
    d = start_daemon(base, image_dir=silent_images(base), boot_timeout_s=SILENT_BOOT_TIMEOUT_S)
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def silent_api(silent, request):
    yield silent.api
    _report_on_failure(request, silent)


def test_delete_during_the_template_build_does_not_wait_for_it(silent, silent_api):
    """The first create of a fresh daemon waits for its template's build (here
    one that would last SILENT_BOOT_TIMEOUT_S); so does a second create. Each
    DELETE answers at once, each create the documented answer, while the
    build itself goes on."""
    api = silent_api
    netns = netns_baseline(silent)
    log = Log(silent)
    first = create_call(api)
    sid1 = log.new_id()
    log.wait(r"template snapshot minimal/1/256: booting the template once", "the template's build to start")
    second = create_call(api)
    sid2 = log.new_id(known=(sid1,))
    # The waiter first, then the create that started the build.
    for call, sid in ((second, sid2), (first, sid1)):
        timed_delete(api, sid)
        assert_deleted_while_booting(call.result(), sid)
    assert not re.search(r"template snapshot minimal/1/256: (ready|.*creates boot cold)", log.text()), \
        "the build ended before the DELETEs answered: they did not cut the wait short"
    # The build went on without them; it ends at its own timeout, then leaves nothing.
    log.wait(r"template snapshot minimal/1/256: .*creates boot cold", "the template's build to give up",
             timeout_s=SILENT_BOOT_TIMEOUT_S + 60)
    for sid in (sid1, sid2):
        assert_nothing_left(silent, sid, netns)


def test_delete_during_a_cold_boot_waiting_for_hello(silent, silent_api):
    """`"boot": "cold"`, DELETE while the guest runs but its agent has not said
    hello (the console shows /init started): the hello stage."""
    api = silent_api
    netns = netns_baseline(silent)
    log = Log(silent)
    call = create_call(api, boot="cold")
    sid = log.new_id()
    console = os.path.join(silent.sandbox_dir(sid), "console.log")
    wait_for(lambda: "silent-init-started" in (open(console, errors="replace").read()
                                                if os.path.exists(console) else ""),
             120, "the guest's /init to start")
    timed_delete(api, sid)
    assert_deleted_while_booting(call.result(), sid)
    assert_nothing_left(silent, sid, netns)


def test_delete_right_after_the_create_got_its_id(silent, silent_api):
    """A DELETE as soon as the record exists (the disk, network or spawn stage,
    whichever the boot is in): the same answer."""
    api = silent_api
    netns = netns_baseline(silent)
    log = Log(silent)
    call = create_call(api, boot="cold")
    sid = log.new_id()
    timed_delete(api, sid)
    assert_deleted_while_booting(call.result(), sid)
    assert_nothing_left(silent, sid, netns)


def test_delete_gives_the_start_slot_to_the_next_create(tmp_path_factory):
    """--max-concurrent-starts 1: create A boots (a guest that never says
    hello), create B waits for a start slot. B has no record yet (it is not
    listed: nothing to delete, and a 503 would have created nothing). DELETE A:
    A answers the documented error and its slot goes to B at once, which B's
    own DELETE then cuts short in turn."""
    require_build()
    base = tmp_path_factory.mktemp("slots")
    d = start_daemon(base, image_dir=silent_images(base), boot_timeout_s=SILENT_BOOT_TIMEOUT_S,
                     extra_args=["--max-concurrent-starts", "1", "--start-queue-timeout-s", "120"])
    try:
        api = d.api
        netns = netns_baseline(d)
        log = Log(d)
        a = create_call(api, boot="cold")
        sid_a = log.new_id()
        b = create_call(api, boot="cold")
        wait_for(lambda: metrics(api)["airlock_starts_waiting"] == 1, 60, "create B to wait for a start slot")
        assert [s["id"] for s in api.list(all=True)] == [sid_a], "a create waiting for a slot has no record yet"
        timed_delete(api, sid_a)
        assert_deleted_while_booting(a.result(), sid_a)
        sid_b = log.new_id(known=(sid_a,), timeout_s=DELETE_BOUND_S)  # B started without waiting out A's boot
        timed_delete(api, sid_b)
        assert_deleted_while_booting(b.result(), sid_b)
        for sid in (sid_a, sid_b):
            assert_nothing_left(d, sid, netns)
    finally:
        leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}"


# ---------------------------------------------------------------- real templates

@pytest.fixture(scope="module")
def real(tmp_path_factory):
    require_build()
    d = start_daemon(tmp_path_factory.mktemp("delboot"), extra_args=["--max-concurrent-starts", "3"])
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def real_api(real, request):
    yield real.api
    _report_on_failure(request, real)


def test_deleted_builder_leaves_the_build_to_the_others(real, real_api):
    """Fresh daemon: create A starts the template's build, B waits for it.
    DELETE A during the build: A answers the documented error, and B still
    gets a sandbox restored from the template's snapshot."""
    api = real_api
    netns = netns_baseline(real)
    log = Log(real)
    a = create_call(api)
    sid_a = log.new_id()
    log.wait(r"template snapshot minimal/1/256: booting the template once", "the template's build to start")
    b = create_call(api)
    sid_b = log.new_id(known=(sid_a,))
    timed_delete(api, sid_a)
    assert_deleted_while_booting(a.result(), sid_a)
    rb = b.result()
    assert rb.status == 201, rb
    assert rb.json["boot"] == "template", rb
    assert rb.json["id"] == sid_b
    assert_nothing_left(real, sid_a, netns, running=1)
    api.delete_ok(sid_b)
    assert_nothing_left(real, sid_b, netns)
    # The next create works, from the snapshot the build kept.
    sb = api.create_ok()
    assert sb["boot"] == "template", sb
    api.delete_ok(sb["id"])


def stop_vmm_when_it_appears(sid, timeout_s=60):
    """SIGSTOPs the QEMU of sid as soon as it exists; its pid."""
    pid = wait_for(lambda: next(iter(qemu_processes(needle=sid)), None), timeout_s, f"the QEMU of {sid}")
    os.kill(pid, signal.SIGSTOP)
    return pid


@pytest.mark.parametrize("boot", ["auto", "cold"])
def test_delete_while_the_vmm_is_held(real, real_api, boot):
    """A restore from the template's snapshot (auto; the template is built by
    the test before) or a cold boot whose QEMU is stopped as soon as it runs:
    its load, resume, hello or THAW cannot finish before the DELETE, which
    must end it (it kills the VMM) rather than wait for the restore's 120 s or
    the boot timeout."""
    api = real_api
    warm = api.create_ok()  # the template's snapshot exists from here on
    api.delete_ok(warm["id"])
    netns = netns_baseline(real)
    for attempt in range(5):
        log = Log(real)
        call = create_call(api, boot=boot)
        sid = log.new_id()
        pid = stop_vmm_when_it_appears(sid)
        try:
            r = None
            # The create may have finished before its QEMU was stopped (a
            # fast restore): then it is a plain delete, and we try again.
            time.sleep(0.5)
            if call.t.is_alive():
                timed_delete(api, sid)
                r = call.result()
                assert_deleted_while_booting(r, sid)
                assert_nothing_left(real, sid, netns)
                print(f"{boot}: the DELETE cut the boot short at attempt {attempt + 1}")
                break
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        r = call.result()
        assert r.status == 201, r
        api.delete_ok(sid)
    else:
        pytest.fail("every create finished before its QEMU could be stopped")
    sb = api.create_ok(boot=boot)
    assert sb["boot"] == ("template" if boot == "auto" else "cold"), sb
    api.delete_ok(sb["id"])


def test_delete_during_a_recover(real, real_api):
    """A recover boots again (state creating): a DELETE cuts it short the same
    way, and the recover answers the documented error."""
    api = real_api
    sb = api.create_ok()
    sid = sb["id"]
    os.kill(next(iter(qemu_processes(needle=sid))), signal.SIGKILL)
    wait_for(lambda: api.get(sid).json["state"] == "error", 60, "the sandbox to be in error")
    netns = netns_baseline(real)
    log = Log(real)
    call = Call(api.request, "POST", f"/v1/sandboxes/{sid}/recover", body={"memory": False})
    log.wait(rf"sandbox {sid}: recovering", "the recover to start")
    pid = stop_vmm_when_it_appears(sid)
    try:
        timed_delete(api, sid)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert_deleted_while_booting(call.result(), sid)
    assert_nothing_left(real, sid, netns)
