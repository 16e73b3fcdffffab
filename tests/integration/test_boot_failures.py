# SPDX-License-Identifier: Apache-2.0
"""Guests that do not come up end in state `error` with a reason, leave no
VM behind, and do not disturb the other sandboxes of the daemon."""
import os
import shutil
import subprocess

import pytest

from conftest import Daemon, IMAGES, make_image_dir, qemu_processes, require_build


def _assert_boot_failed(api, r):
    """Checks a 500 boot_failed answer and returns the sandbox record it left."""
    assert r.status == 500, r
    assert r.error_code == "boot_failed", r
    msg = r.error_message
    # "the message names the sandbox id and the reason"
    ids = [s["id"] for s in api.list(all=True) if s["id"] in msg]
    assert len(ids) == 1, f"the message should name the sandbox id: {msg!r}"
    rec = api.get(ids[0])
    assert rec.status == 200, rec
    assert rec.json["state"] == "error", rec
    assert isinstance(rec.json["error"], str) and rec.json["error"], rec
    return rec.json


@pytest.fixture(scope="module")
def broken_daemon(tmp_path_factory):
    """A daemon whose image dir also has template `broken`: a root filesystem
    of 16 MiB of zeros, which the agent cannot mount, so PID 1 exits, the
    kernel panics and QEMU exits (panic=-1, -no-reboot)."""
    require_build()
    base = tmp_path_factory.mktemp("broken")
    images = make_image_dir(base / "images")
    os.makedirs(os.path.join(images, "templates", "broken"))
    with open(os.path.join(images, "templates", "broken", "rootfs.ext4"), "wb") as f:
        f.truncate(16 * 1024 * 1024)
    # A generous boot timeout: the failure must come from the panic, not the clock.
    d = Daemon(base, image_dir=images, boot_timeout_s=120).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU left running: {leftovers}"


def test_panicking_guest_ends_in_error(broken_daemon):
    d = broken_daemon
    api = d.api
    r = api.create(template="broken", vcpus=1, memory_mib=256)
    sb = _assert_boot_failed(api, r)
    # The reason carries the guest's last console lines.
    assert "Kernel panic" in sb["error"], sb["error"]
    assert sb["template"] == "broken"
    # Its VM is gone.
    assert not qemu_processes(needle=sb["id"]), qemu_processes(needle=sb["id"])
    # And it cannot be used.
    r = api.exec(sb["id"], ["true"])
    assert r.status == 409, r
    # It can be deleted, and then nothing of it is left on disk.
    r = api.delete(sb["id"])
    assert r.status == 200 and r.json["state"] == "deleted", r
    assert not os.path.exists(d.sandbox_dir(sb["id"]))


def test_other_sandboxes_still_work_after_a_panic(broken_daemon):
    api = broken_daemon.api
    good = api.create_ok(template="minimal")
    try:
        r = api.create(template="broken")
        _assert_boot_failed(api, r)
        # The healthy one is unaffected, and new ones still boot.
        assert api.exec_ok(good["id"], ["echo", "alive"])["stdout"] == "alive\n"
        other = api.create_ok(template="minimal")
        assert api.exec_ok(other["id"], ["echo", "new"])["stdout"] == "new\n"
        api.delete_ok(other["id"])
        assert broken_daemon.api.healthz().status == 200
    finally:
        api.delete(good["id"])


def _silent_initramfs(path, workdir):
    """An initramfs whose /init never opens the agent's port: it just sleeps.
    The kernel boots fine, the guest never says hello."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    root = os.path.join(workdir, "silent-root")
    os.makedirs(os.path.join(root, "bin"))
    os.makedirs(os.path.join(root, "dev"))
    shutil.copy(busybox, os.path.join(root, "bin", "busybox"))
    with open(os.path.join(root, "init"), "w") as f:
        f.write("#!/bin/busybox sh\n"
                "/bin/busybox echo 'silent init: not starting the agent'\n"
                "while :; do /bin/busybox sleep 3600; done\n")
    os.chmod(os.path.join(root, "init"), 0o755)
    files = subprocess.run(["find", ".", "-print0"], cwd=root, check=True, capture_output=True).stdout
    with open(path, "wb") as out:
        subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet"], cwd=root, input=files,
                       stdout=out, check=True)


@pytest.fixture(scope="module")
def silent_daemon(tmp_path_factory):
    """A daemon with a 3 s boot timeout whose guests never say hello."""
    require_build()
    base = tmp_path_factory.mktemp("silent")
    images = str(base / "images")
    os.makedirs(os.path.join(images, "kernels"))
    os.makedirs(os.path.join(images, "templates"))
    os.symlink(os.path.join(IMAGES, "kernels", "vmlinuz"), os.path.join(images, "kernels", "vmlinuz"))
    _silent_initramfs(os.path.join(images, "kernels", "initramfs.cpio"), str(base))
    os.symlink(os.path.join(IMAGES, "templates", "minimal"), os.path.join(images, "templates", "minimal"))
    d = Daemon(base, image_dir=images, boot_timeout_s=3).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU left running: {leftovers}"


def test_guest_that_never_says_hello_ends_in_error(silent_daemon):
    d = silent_daemon
    api = d.api
    r = api.create(template="minimal")
    sb = _assert_boot_failed(api, r)
    text = (r.error_message + " " + sb["error"]).lower()
    assert "timeout" in text or "timed out" in text or "did not say hello" in text, sb["error"]
    # The VM that never answered has been stopped, and it left nothing running.
    assert not qemu_processes(needle=sb["id"]), qemu_processes(needle=sb["id"])
    assert api.healthz().status == 200
    assert api.delete(sb["id"]).status == 200
