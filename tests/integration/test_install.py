# SPDX-License-Identifier: Apache-2.0
"""`make install` and `make uninstall` into a DESTDIR (docs/kvm-host.md,
"Install"): the files and their modes, the systemd unit (checked by
`systemd-analyze verify`), the config file (its paths substituted for PREFIX,
never overwritten once edited), and an uninstall that removes what install put
there but an edited config file. Nothing is started and nothing outside the
DESTDIR is written. Needs `make all` (install depends on it; nothing is
rebuilt when it is up to date); installs the images that are built.
"""
import os
import re
import shutil
import stat
import subprocess

import pytest

from conftest import BUILD, ROOT

PREFIX = "/usr/local"
BINS = ("airlockd", "airlock", "airlock-jailer", "airlock-egress", "airlock-oci", "airlock-api")
KERNEL_FILES = ("vmlinuz", "vmlinux", "initramfs.cpio")
SECCOMP_SRC = os.path.join(ROOT, "security", "seccomp", "qemu-x86_64.json")
IMAGES = os.path.join(BUILD, "images")
PLACEHOLDER = re.compile(r"@[A-Za-z_]+@")
MAKE_TIMEOUT_S = 600  # only when `all` has something to build


def make(target, destdir, prefix=PREFIX, *extra):
    argv = ["make", "-C", ROOT, "--no-print-directory", target, f"DESTDIR={destdir}", f"PREFIX={prefix}", *extra]
    if "BUILD" in os.environ:
        argv.append(f"BUILD={BUILD}")
    # The directories install makes without -m (DESTDIR/usr, ...) follow the umask.
    r = subprocess.run(argv, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S, preexec_fn=lambda: os.umask(0o022))
    assert r.returncode == 0, f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


@pytest.fixture
def destdir(tmp_path_factory):
    # The images are hundreds of MB (sparse): removed at once, not left to pytest.
    d = tmp_path_factory.mktemp("destdir")
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)


def inside(destdir, path):
    return os.path.join(destdir, path.lstrip("/"))


def mode(path):
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode), f"{path} is not a regular file"
    return stat.S_IMODE(st.st_mode)


def files_under(destdir):
    out = set()
    for top, _dirs, names in os.walk(destdir):
        for n in names:
            out.add("/" + os.path.relpath(os.path.join(top, n), destdir))
    return out


def built_images():
    """{installed path below the image dir: source path} of what is built."""
    out = {}
    for f in KERNEL_FILES:
        src = os.path.join(IMAGES, "kernels", f)
        if os.path.isfile(src):
            out[f"kernels/{f}"] = src
    tdir = os.path.join(IMAGES, "templates")
    for name in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
        if os.path.isfile(os.path.join(tdir, name, "rootfs.ext4")):
            for f in ("rootfs.ext4", "template.json"):
                if os.path.isfile(os.path.join(tdir, name, f)):
                    out[f"templates/{name}/{f}"] = os.path.join(tdir, name, f)
    return out


def config_options(text):
    """name -> value of the config file's active lines (its simple syntax)."""
    opts = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition(" ")
        opts[name] = value.strip().strip('"')
    return opts


def expected_files(prefix=PREFIX, unit_dir=None):
    unit_dir = unit_dir or f"{prefix}/lib/systemd/system"
    files = {f"{prefix}/bin/{b}" for b in BINS}
    files |= {f"{prefix}/share/airlock/seccomp/qemu-x86_64.json", f"{unit_dir}/airlockd.service",
              "/etc/airlock/airlockd.conf"}
    files |= {f"{prefix}/share/airlock/images/{p}" for p in built_images()}
    files |= {f"{prefix}/share/airlock/ui/{f}" for f in built_console()}
    return files


def built_console():
    """The web console's files under $(BUILD)/ui, when `make ui` built it
    (install puts them where airlockd in $(PREFIX)/bin looks: docs/console.md)."""
    d = os.path.join(BUILD, "ui")
    if not os.path.isfile(os.path.join(d, "index.html")):
        return []
    return sorted(f for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))


def test_install_files_and_modes(destdir):
    up_to_date = subprocess.run(["make", "-C", ROOT, "-q", "all"] + ([f"BUILD={BUILD}"] if "BUILD" in os.environ
                                                                    else []),
                                capture_output=True).returncode == 0
    out = make("install", destdir)
    if up_to_date:
        # Not rebuilt, and the images are not remade (images-always would).
        assert not re.search(r"(^|\s)(cc|gcc|clang) .* -c ", out), out
        assert "build-kernel.sh" not in out, out
    assert files_under(destdir) == expected_files()
    for b in BINS:
        p = inside(destdir, f"{PREFIX}/bin/{b}")
        assert mode(p) == 0o755
        with open(p, "rb") as f, open(os.path.join(BUILD, b), "rb") as g:
            assert f.read() == g.read(), f"{p} is not {BUILD}/{b}"
    profile = inside(destdir, f"{PREFIX}/share/airlock/seccomp/qemu-x86_64.json")
    assert mode(profile) == 0o644
    with open(profile) as f, open(SECCOMP_SRC) as g:
        assert f.read() == g.read()
    for p in (f"{PREFIX}/lib/systemd/system/airlockd.service", "/etc/airlock/airlockd.conf"):
        assert mode(inside(destdir, p)) == 0o644
    for rel, src in built_images().items():
        p = inside(destdir, f"{PREFIX}/share/airlock/images/{rel}")
        assert mode(p) == 0o644
        assert os.path.getsize(p) == os.path.getsize(src)
    # Every directory made is 0755 (the jailer refuses a seccomp profile under a
    # directory that group or others can write).
    for top, dirs, _names in os.walk(destdir):
        for d in dirs:
            m = stat.S_IMODE(os.lstat(os.path.join(top, d)).st_mode)
            assert m == 0o755, f"{os.path.join(top, d)} is {m:o}"
    # The state is airlockd's (systemd's StateDirectory=), never install's.
    assert not os.path.exists(inside(destdir, "/var/lib/airlock"))
    if not built_images():
        assert "WARNING: no guest kernel or no template" in out


def check_substituted(destdir, prefix, unit_dir):
    unit_path = inside(destdir, f"{unit_dir}/airlockd.service")
    conf_path = inside(destdir, "/etc/airlock/airlockd.conf")
    for p in (unit_path, conf_path):
        with open(p) as f:
            text = f.read()
        assert not PLACEHOLDER.search(text), f"{p}: {PLACEHOLDER.search(text).group(0)} was not substituted"
    with open(conf_path) as f:
        opts = config_options(f.read())
    # The installed paths, whatever PREFIX is (airlockd's built-in default for
    # the profile is /usr/share/airlock/...).
    assert opts["seccomp-profile"] == f"{prefix}/share/airlock/seccomp/qemu-x86_64.json"
    assert opts["image-dir"] == f"{prefix}/share/airlock/images"
    assert opts["socket"] == "/run/airlock/airlockd.sock"
    assert opts["state-dir"] == "/var/lib/airlock"
    assert {"accel", "backend"} <= opts.keys()
    # Listed but off by default.
    assert "listen" not in opts and "network-policy" not in opts
    with open(unit_path) as f:
        unit = f.read()
    lines = {line.partition("=")[0]: line.partition("=")[2] for line in unit.splitlines()
             if line and not line.startswith("#") and "=" in line}
    assert lines["ExecStart"] == f"{prefix}/bin/airlockd --config /etc/airlock/airlockd.conf"
    assert lines["KillMode"] == "process"
    assert lines["RuntimeDirectory"] == "airlock" and lines["RuntimeDirectoryPreserve"] == "yes"
    assert lines["StateDirectory"] == "airlock"
    assert lines["Restart"] == "on-failure"


def test_paths_substituted(destdir):
    make("install", destdir)
    check_substituted(destdir, PREFIX, f"{PREFIX}/lib/systemd/system")


def test_other_prefix(destdir):
    prefix, unit_dir = "/opt/airlock", "/etc/systemd/system"
    make("install", destdir, prefix, f"SYSTEMD_UNIT_DIR={unit_dir}")
    assert files_under(destdir) == expected_files(prefix, unit_dir)
    check_substituted(destdir, prefix, unit_dir)
    make("uninstall", destdir, prefix, f"SYSTEMD_UNIT_DIR={unit_dir}")
    assert files_under(destdir) == set()


def test_bad_prefix_refused(destdir):
    for bad in ("usr/local", "/usr/lo cal", "/usr/l|x"):
        argv = ["make", "-C", ROOT, "--no-print-directory", "install", f"DESTDIR={destdir}", f"PREFIX={bad}"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S)
        assert r.returncode != 0, bad
        assert "install: PREFIX" in r.stderr, r.stderr
    assert files_under(destdir) == set()


def test_unit_verifies(destdir):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed")
    make("install", destdir)
    unit = inside(destdir, f"{PREFIX}/lib/systemd/system/airlockd.service")
    # As installed: verify checks that ExecStart's binary exists, and in a
    # DESTDIR it exists only under the DESTDIR. That must be its only complaint.
    r = subprocess.run([analyze, "verify", unit], capture_output=True, text=True, timeout=60)
    complaints = [line for line in (r.stdout + r.stderr).splitlines()
                  if line and f"Command {PREFIX}/bin/airlockd is not executable" not in line]
    assert complaints == [], r.stdout + r.stderr
    # The same unit with ExecStart in the DESTDIR: no complaint at all (verify
    # also prints unknown keys and bad values, with status 0: the output is checked).
    copy_dir = os.path.join(destdir, "verify")
    os.mkdir(copy_dir)
    with open(unit) as f:
        text = f.read().replace(f"ExecStart={PREFIX}/bin/", f"ExecStart={inside(destdir, PREFIX)}/bin/")
    with open(os.path.join(copy_dir, "airlockd.service"), "w") as f:
        f.write(text)
    r = subprocess.run([analyze, "verify", os.path.join(copy_dir, "airlockd.service")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_installed_daemon_reads_config(destdir):
    make("install", destdir)
    airlockd = inside(destdir, f"{PREFIX}/bin/airlockd")
    conf = inside(destdir, "/etc/airlock/airlockd.conf")
    # Every option of the installed config file is one airlockd knows, with a
    # value it takes (--print-backend acts after every flag is parsed).
    r = subprocess.run([airlockd, "--config", conf, "--print-backend"], capture_output=True, text=True, timeout=60)
    if "unrecognized option '--config'" in r.stderr:
        pytest.skip("airlockd does not read --config yet")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "backend=" in r.stdout


def test_reinstall_keeps_edited_config(destdir):
    make("install", destdir)
    conf = inside(destdir, "/etc/airlock/airlockd.conf")
    with open(conf) as f:
        default = f.read()
    # Unchanged: a second install leaves it as it is, with no .new.
    out = make("install", destdir)
    assert "already the default" in out
    assert not os.path.exists(conf + ".new")
    edited = default + "listen 127.0.0.1:7070\n"
    with open(conf, "w") as f:
        f.write(edited)
    os.chmod(conf, 0o600)
    out = make("install", destdir)
    with open(conf) as f:
        assert f.read() == edited
    assert mode(conf) == 0o600
    assert "kept your" in out
    with open(conf + ".new") as f:
        assert f.read() == default
    assert mode(conf + ".new") == 0o644

    # uninstall: everything but the edited config file (and its .new) goes.
    make("uninstall", destdir)
    assert files_under(destdir) == {"/etc/airlock/airlockd.conf"}
    with open(conf) as f:
        assert f.read() == edited


def test_uninstall_removes_everything(destdir):
    make("install", destdir)
    # A file of the operator's in the image dir is kept (and its directory).
    mine = inside(destdir, f"{PREFIX}/share/airlock/images/README.local")
    with open(mine, "w") as f:
        f.write("mine\n")
    out = make("uninstall", destdir)
    assert files_under(destdir) == {f"{PREFIX}/share/airlock/images/README.local"}, out
    os.unlink(mine)
    # Twice is fine.
    make("uninstall", destdir)
    assert files_under(destdir) == set()
    assert not os.path.exists(inside(destdir, "/etc/airlock"))
    assert not os.path.exists(inside(destdir, f"{PREFIX}/share/airlock"))
