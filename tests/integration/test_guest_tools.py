# SPDX-License-Identifier: Apache-2.0
"""The guest side of issue 23: the `minimal` template's tools, the root
filesystem grown to the disk at create, and an image with nothing but one
static binary in it (no /bin/sh, no /etc).

- busybox `wget -T N` in `minimal`: Debian's busybox-static (1.35) is built
  without FEATURE_WGET_TIMEOUT, yet its wget still parses -T as a number
  option whose destination pointer is NULL, so `wget -T 2 URL` died of
  SIGSEGV (exit 139) before any network I/O, in the guest as on the host.
  The image's /usr/bin/wget is now a wrapper (images/minimal-wget.sh) that
  turns -T into `timeout N`.
- disk_mib above the template's size: the agent grows the ext4 filesystem
  online at boot (EXT4_IOC_RESIZE_FS), so `df` in the guest shows the disk.
- a template of one static binary: boot and exec need nothing from the image.
"""
import os
import shutil
import subprocess

import pytest

import fakenet as fn
from conftest import IMAGES, Daemon, require_build, stdout_bytes
from fakenet import fakenet  # noqa: F401  (the session fixture)
from test_network import netd  # noqa: F401  (the module's daemon in the fake internet)

SEGV_EXIT = 128 + 11


def text(r, stream):
    return (stdout_bytes(r) if stream == "stdout" else r[stream].encode()).decode(errors="replace")


def assert_no_segfault(r):
    assert r["exit_code"] != SEGV_EXIT and r.get("signal") != 11, r
    assert "Segmentation fault" not in r["stderr"], r


# ----------------------------------------------------------------- wget -T

def test_wget_timeout_option_does_not_segfault(api, sandbox):
    """Without a network the fetch fails, but as a failed fetch (exit 1 and
    a message), not as a crash in option parsing."""
    for argv in (["wget", "-T", "2", "-O-", "http://nothing.invalid/"],
                 ["wget", "-q", "-T2", "-O-", "http://10.0.2.2:1/"],
                 ["wget", "--timeout=2", "-O-", "http://nothing.invalid/"]):
        r = api.exec_ok(sandbox["id"], argv, timeout_s=30)
        assert_no_segfault(r)
        assert r["exit_code"] == 1, r


def test_wget_timeout_in_a_shell_does_not_segfault(api, sandbox):
    """busybox sh runs its wget applet, not /usr/bin/wget: the image's
    patched busybox ignores -T there instead of crashing."""
    for cmd in ("wget -T 2 -O- http://nothing.invalid/", "busybox wget -q -T2 -O- http://10.0.2.2:1/"):
        r = api.exec_ok(sandbox["id"], ["/bin/sh", "-c", cmd], timeout_s=30)
        assert_no_segfault(r)
        assert r["exit_code"] == 1, r


def test_wget_timeout_rejects_a_bad_number(api, sandbox):
    r = api.exec_ok(sandbox["id"], ["wget", "-T", "soon", "http://nothing.invalid/"])
    assert r["exit_code"] == 1 and "invalid number" in r["stderr"], r


def test_wget_timeout_fetches_through_the_gateway(netd, fakenet):  # noqa: F811
    """With a policy that allows the host, `wget -T 5` fetches it."""
    sb = netd.api.create_ok(template="minimal", vcpus=1, memory_mib=256, network={"allow": [fn.WWW_ALLOWED]})
    try:
        r = netd.api.exec_ok(sb["id"], ["wget", "-q", "-T", "5", "-O-", f"http://{fn.WWW_ALLOWED}/"],
                             timeout_s=60)
        assert_no_segfault(r)
        assert r["exit_code"] == 0, r
        assert f"hello from {fn.WWW_ALLOWED}" in text(r, "stdout"), r
        # -T bounds a server that does not answer in time.
        r = netd.api.exec_ok(sb["id"], ["wget", "-q", "-T", "2", "-O-", f"http://{fn.WWW_ALLOWED}/delay/30"],
                             timeout_s=60)
        assert_no_segfault(r)
        assert r["exit_code"] == 1 and "timed out after 2 s" in r["stderr"], r
        assert r["duration_ms"] < 20000, r
    finally:
        netd.api.delete(sb["id"])


# ----------------------------------------------------------------- root grown to the disk

def df_root_mib(api, sid):
    """Total size of / in MiB as the guest's df sees it."""
    r = api.exec_ok(sid, ["df", "-m", "/"])
    assert r["exit_code"] == 0, r
    return int(text(r, "stdout").splitlines()[-1].split()[1])


def test_root_filesystem_grows_to_disk_mib(api):
    template_mib = os.path.getsize(os.path.join(IMAGES, "templates", "minimal", "rootfs.ext4")) >> 20
    plain = api.create_ok(template="minimal")
    bigger = api.create_ok(template="minimal", disk_mib=template_mib + 200)
    try:
        plain_mib = df_root_mib(api, plain["id"])
        big_mib = df_root_mib(api, bigger["id"])
        assert plain_mib <= template_mib, (plain_mib, template_mib)
        # df leaves out the filesystem's own metadata (inode tables: ~10% at
        # minimal's 1 KiB blocks and 4 KiB per inode).
        assert big_mib >= (template_mib + 200) * 0.85, (big_mib, template_mib)
        assert big_mib > plain_mib + 150, (big_mib, plain_mib)
        r = api.exec_ok(bigger["id"], ["sh", "-c", "dd if=/dev/zero of=/root/fill bs=1M count=120 && sync"])
        assert r["exit_code"] == 0, r
    finally:
        api.delete(plain["id"])
        api.delete(bigger["id"])


# ----------------------------------------------------------------- an image without /bin/sh

@pytest.fixture(scope="module")
def nosh_daemon(tmp_path_factory):
    """A daemon whose image dir has the built kernels and one template,
    `nosh`: an ext4 image holding only /tool/busybox (a static busybox)."""
    require_build()
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(busybox) or subprocess.run(["ldd", busybox], capture_output=True).returncode == 0:
        pytest.skip("needs a static busybox on the host (busybox-static)")
    base = tmp_path_factory.mktemp("nosh")
    images = base / "images"
    (images / "kernels").mkdir(parents=True)
    src = os.path.join(IMAGES, "kernels")
    for name in os.listdir(src):
        os.symlink(os.path.join(src, name), images / "kernels" / name)
    tree = base / "tree"
    (tree / "tool").mkdir(parents=True)
    shutil.copy(busybox, tree / "tool" / "busybox")
    os.chmod(tree / "tool" / "busybox", 0o755)
    tpl = images / "templates" / "nosh"
    tpl.mkdir(parents=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), "-L", "nosh", str(tpl / "rootfs.ext4"), "16M"],
                   check=True)
    (base / "d").mkdir()
    d = Daemon(base / "d", image_dir=str(images)).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU left running: {leftovers}"


@pytest.fixture(scope="module")
def nosh(nosh_daemon):
    # With a network, so the agent writes /etc/resolv.conf in an image without /etc.
    sb = nosh_daemon.api.create_ok(template="nosh", network={"allow": ["example.test"]})
    yield nosh_daemon.api, sb["id"]
    nosh_daemon.api.delete(sb["id"])


def test_nosh_image_runs_exec_with_argv(nosh):
    api, sid = nosh
    r = api.exec_ok(sid, ["/tool/busybox", "echo", "hi"])
    assert r["exit_code"] == 0 and text(r, "stdout") == "hi\n", r
    # What the agent made (mount points) and what it did not need.
    r = api.exec_ok(sid, ["/tool/busybox", "ls", "/"])
    assert r["exit_code"] == 0, r
    names = text(r, "stdout").split()
    assert "tool" in names and "bin" not in names, names
    r = api.exec_ok(sid, ["/tool/busybox", "cat", "/etc/resolv.conf"])
    assert r["exit_code"] == 0 and "nameserver" in text(r, "stdout"), r


def test_nosh_image_missing_shell_is_a_clear_error(nosh):
    api, sid = nosh
    r = api.exec(sid, ["sh", "-c", "x"], timeout_s=30)
    assert r.status == 400, r
    msg = r.error_message
    assert "sh" in msg and "No such file" in msg, msg


def test_nosh_image_files_and_cwd(nosh):
    """Files land and a cwd that exists works, in an image with no /tmp."""
    api, sid = nosh
    r = api.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tool/hello.txt", raw=b"hello\n")
    assert r.status in (200, 201, 204), r
    r = api.exec_ok(sid, ["/tool/busybox", "cat", "hello.txt"], cwd="/tool")
    assert r["exit_code"] == 0 and text(r, "stdout") == "hello\n", r
