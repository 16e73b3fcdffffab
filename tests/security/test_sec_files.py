# SPDX-License-Identifier: Apache-2.0
"""Category 1: host files. From guest root (exec API) and through the file
and archive APIs and `airlock cp`: nothing of the host is read, nothing of
the host is written, the template under every sandbox stays as it was.

A host marker file with random content is the thing to find: an attempt
that could read a host file would print it."""
import hashlib
import io
import json
import os
import secrets
import subprocess
import tarfile
import time

import pytest

import secutil as su
from secutil import attempt

MARKER_DIR = "/tmp"


@pytest.fixture(scope="module")
def marker():
    name = f"airlock-sec-marker-{secrets.token_hex(6)}"
    path = os.path.join(MARKER_DIR, name)
    content = "host-only-" + secrets.token_hex(24)
    with open(path, "w") as f:
        f.write(content + "\n")
    yield {"path": path, "content": content}
    os.unlink(path)


@pytest.fixture(scope="module")
def scratch(secd):
    """A disposable minimal sandbox: its disk gets overwritten and discarded."""
    sb = secd.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    yield sb["id"]
    secd.api.delete(sb["id"])


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------ from guest root

def test_guest_root_sees_no_host_file(api, secd, attacker, marker):
    sid = attacker["id"]
    with attempt("files", "proc1-root", "read a host file through /proc/1/root, /proc/self/root and /proc/*/cwd"):
        code, out, err = su.sh(api, sid, f"for r in /proc/1/root /proc/self/root /proc/1/cwd; do "
                                         f"cat $r{marker['path']} 2>&1; done; ls /proc/1/root/ | tr '\\n' ' '")
        assert marker["content"] not in out + err
        assert "No such file" in out, out
        assert "usr" in out, out  # the guest's own root is what /proc/1/root shows

    with attempt("files", "host-processes", "see host processes (airlockd, QEMU, the gateway) in the guest's /proc"):
        out = su.sh_ok(api, sid, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo; ls /proc | wc -l")
        for needle in ("airlockd", "qemu-system", "airlock-egress", secd.state_dir):
            assert needle not in out, needle
        assert "airlock-agent" in out or "init" in out or "sh" in out, out

    with attempt("files", "mounts-host-paths", "/proc/self/mounts, mountinfo and the kernel command line name no host path"):
        out = su.sh_ok(api, sid, "cat /proc/self/mounts /proc/self/mountinfo /proc/cmdline")
        for needle in (secd.state_dir, su.IMAGES, os.path.dirname(su.HERE), "/work/", "/tmp/pytest", "9p",
                       "virtiofs", "nfs", "fuse"):
            assert needle not in out, (needle, out)
        assert "/dev/vda / ext4" in out, out

    with attempt("files", "mount-host-share", "mount a host share (9p, virtiofs) by the usual tags"):
        code, out, err = su.sh(api, sid, "mkdir -p /mnt/h; for t in hostshare host0 fs0 share root; do "
                                         "mount -t 9p -o trans=virtio $t /mnt/h 2>&1; "
                                         "mount -t virtiofs $t /mnt/h 2>&1; done; "
                                         "grep -c ' /mnt/h ' /proc/mounts; ls /mnt/h | wc -l")
        lines = out.strip().splitlines()
        assert lines[-2:] == ["0", "0"], out

    with attempt("files", "host-marker-search", "search the guest's filesystems for a host file's contents"):
        code, out, err = su.sh(api, sid, f"grep -rl {marker['content']} /tmp /run /etc /root /var /home /srv /mnt "
                                         f"/dev/shm 2>/dev/null | head; echo done", timeout=120)
        assert out.strip() == "done", out

    with attempt("files", "machine-id", "the guest's machine identity is not the host's"):
        host_id = open("/etc/machine-id").read().strip() if os.path.exists("/etc/machine-id") else "no-such-id"
        out = su.sh_ok(api, sid, "cat /etc/machine-id /var/lib/dbus/machine-id 2>/dev/null; hostname; true")
        assert host_id not in out, out

    with attempt("files", "dev-mem-host", "read physical memory (/dev/mem, /proc/kcore) for a host file's contents"):
        script = ("import sys\nneedle=sys.argv[1].encode()\nfound=False\n"
                  "for path in ('/dev/mem', '/proc/kcore'):\n"
                  "    try:\n"
                  "        with open(path, 'rb') as f:\n"
                  "            for _ in range(64):\n"
                  "                b = f.read(1<<20)\n"
                  "                if not b: break\n"
                  "                found = found or needle in b\n"
                  "    except OSError: pass\n"
                  "import json; print(json.dumps({'found': found}))\n")
        assert su.py(api, sid, script, marker["content"]) == {"found": False}


def test_disk_writes_stay_in_the_overlay(api, secd, scratch):
    template = os.path.join(su.IMAGES, "templates", "minimal", "rootfs.ext4")
    before = (sha256_file(template), os.stat(template).st_mtime_ns, os.path.getsize(template))
    pattern = "AIRLOCK-SEC-" + secrets.token_hex(8)
    pid = su.vmm_pid(scratch)

    with attempt("files", "template-opened-readonly", "the VMM holds the template read-only, the overlay is its only writable disk"):
        fds = {}
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            flags = int(open(f"/proc/{pid}/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
            fds[target] = flags
        tpl = [t for t in fds if t.endswith("templates/minimal/rootfs.ext4")]
        assert tpl, fds
        assert all(fds[t] & 3 == os.O_RDONLY for t in tpl), fds

    with attempt("files", "vda-write", "overwrite /dev/vda (1 MiB at 32 MiB) with a pattern"):
        code, out, err = su.sh(api, scratch, f"yes {pattern} | head -c 1048576 > /tmp/p; "
                                             "dd if=/tmp/p of=/dev/vda bs=65536 seek=512 conv=fsync 2>&1; sync; "
                                             "echo 3 > /proc/sys/vm/drop_caches; "
                                             "dd if=/dev/vda bs=65536 skip=512 count=1 2>/dev/null | head -c 40")
        assert pattern in out, (out, err)  # the guest's own disk took it
        with open(template, "rb") as f:
            f.seek(32 << 20)
            assert pattern.encode() not in f.read(1 << 20)
        assert (sha256_file(template), os.stat(template).st_mtime_ns, os.path.getsize(template)) == before

    overlay = os.path.join(secd.vm_dir(scratch), "disk.qcow2")

    def overlay_info():
        r = subprocess.run(["qemu-img", "info", "-U", "--output", "json", overlay], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    info_before = overlay_info()
    with attempt("files", "fake-qcow2-header", "write a qcow2 header naming a host file as backing file into the guest disk"):
        # The classic image-format probing attack: a raw disk whose first
        # sector says "qcow2, backing file /etc/shadow".
        backing = b"/etc/shadow"
        hdr = bytearray(512)
        hdr[0:4] = b"QFI\xfb"
        hdr[4:8] = (2).to_bytes(4, "big")
        hdr[8:16] = (104).to_bytes(8, "big")
        hdr[16:20] = len(backing).to_bytes(4, "big")
        hdr[104:104 + len(backing)] = backing
        su.put_file(api, scratch, "/tmp/hdr", bytes(hdr))
        su.sh_ok(api, scratch, "dd if=/tmp/hdr of=/dev/vda bs=512 count=1 conv=fsync 2>/dev/null; sync")
        info = overlay_info()
        assert info["format"] == "qcow2" and info.get("backing-filename") == info_before.get("backing-filename"), info
        assert "shadow" not in json.dumps(info)
        assert info.get("backing-filename-format", "raw") == info_before.get("backing-filename-format", "raw")

    with attempt("files", "vda-discard", "discard the whole guest disk (blkdiscard /dev/vda)"):
        code, out, err = su.sh(api, scratch, "blkdiscard /dev/vda 2>&1; echo rc=$?")
        assert "rc=" in out
        assert (sha256_file(template), os.stat(template).st_mtime_ns, os.path.getsize(template)) == before
        assert os.path.getsize(overlay) <= overlay_info()["virtual-size"] + (16 << 20)


def test_console_and_channel_abuse(api, secd, scratch):
    with attempt("files", "serial-monitor-escape", "send QEMU monitor escapes (Ctrl-A c, quit) down the serial console"):
        su.sh(api, scratch, "printf '\\001c\\nquit\\n\\001x\\ninfo status\\n' > /dev/ttyS0; "
                            "printf '\\001c\\nquit\\n' > /dev/console; sleep 1; true")
        time.sleep(1)
        assert su.vmm_pid(scratch)
        assert su.sh_ok(api, scratch, "echo alive") == "alive\n"
        assert api.get(scratch).json["state"] == "running"
        log = open(os.path.join(secd.sandbox_dir(scratch), "console.log"), "rb").read()
        assert b"(qemu)" not in log and b"QEMU" not in log

    with attempt("files", "vport-second-open", "open the agent's virtio-serial port a second time and write frames"):
        code, out, err = su.sh(api, scratch, "printf '\\001\\377\\377\\377\\377\\377\\377\\377' > /dev/vport2p1 2>&1; "
                                             "echo rc=$?; cat /dev/vport2p1 2>&1 | head -c 100 & sleep 1; kill $! "
                                             "2>/dev/null; true")
        assert "rc=0" not in out, out
        assert "busy" in out.lower(), out
        assert api.get(scratch).json["state"] == "running"
        assert su.sh_ok(api, scratch, "echo alive") == "alive\n"

    with attempt("files", "other-serial-ports", "write to the other serial ports (ttyS1-3): nothing reaches a host file"):
        token = "AIRLOCK-SEC-TTY-" + secrets.token_hex(6)
        su.sh(api, scratch, "for d in /dev/ttyS1 /dev/ttyS2 /dev/ttyS3; do "
                            f"[ -c $d ] && timeout 3 sh -c 'echo {token} > '$d 2>/dev/null; done; true")
        assert api.get(scratch).json["state"] == "running"
        assert su.sh_ok(api, scratch, "echo alive") == "alive\n"
        d = secd.sandbox_dir(scratch)
        for name in os.listdir(d):
            p = os.path.join(d, name)
            if os.path.isfile(p) and name != "disk.qcow2":
                assert token.encode() not in open(p, "rb").read(), name


# ------------------------------------------------------------------ the file API with host-looking paths

def test_file_api_with_dotdot_paths(api, attacker, marker):
    sid = attacker["id"]
    b = f"/v1/sandboxes/{sid}"
    ups = "/.." * 8
    host_put = f"/tmp/airlock-sec-put-{secrets.token_hex(4)}"

    with attempt("files", "api-get-dotdot", "GET .../files?path=/../../..<host file>"):
        r = api.request("GET", f"{b}/files?path={ups}{marker['path']}")
        assert r.status in (400, 404), r
        assert marker["content"].encode() not in r.raw

    with attempt("files", "api-get-encoded", "GET .../files with a percent-encoded ../ path"):
        r = api.request("GET", f"{b}/files?path=%2F..%2F..%2F..{marker['path'].replace('/', '%2F')}")
        assert r.status in (400, 404), r
        assert marker["content"].encode() not in r.raw

    with attempt("files", "api-archive-dotdot", "GET .../archive of /../../..<host dir>"):
        r = api.request("GET", f"{b}/archive?path={ups}{os.path.dirname(marker['path'])}")
        assert marker["content"].encode() not in r.raw, r.status

    with attempt("files", "api-put-dotdot", "PUT .../files?path=/../../..<host path>"):
        r = api.request("PUT", f"{b}/files?path={ups}{host_put}", raw=b"pwned")
        assert not os.path.exists(host_put), r
        if r.status in (200, 201):  # landed in the guest, where the path leads
            assert su.sh_ok(api, sid, f"cat {host_put}; rm -f {host_put}") == "pwned"

    with attempt("files", "api-rename-dotdot", "rename a guest file to /../../..<host path>"):
        su.sh_ok(api, sid, "echo x > /tmp/ren-src")
        r = api.request("POST", f"{b}/files/rename", body={"path": "/tmp/ren-src", "to": f"{ups}{host_put}-ren"})
        assert not os.path.exists(f"{host_put}-ren"), r
        su.sh(api, sid, f"rm -f {host_put}-ren /tmp/ren-src")

    with attempt("files", "api-mkdir-dotdot", "mkdir /../../..<host path>"):
        r = api.request("POST", f"{b}/files/mkdir", body={"path": f"{ups}{host_put}-dir", "parents": True})
        assert not os.path.exists(f"{host_put}-dir"), r
        su.sh(api, sid, f"rmdir {host_put}-dir")

    with attempt("files", "api-symlink-download", "download a guest symlink that points at a host path"):
        su.sh_ok(api, sid, f"ln -sf {marker['path']} /tmp/lnk-host; ln -sf /proc/1/root{marker['path']} /tmp/lnk2")
        for p in ("/tmp/lnk-host", "/tmp/lnk2"):
            r = api.request("GET", f"{b}/files?path={p}")
            assert r.status in (400, 404), r  # not followed, or followed inside the guest
            assert marker["content"].encode() not in r.raw

    with attempt("files", "api-put-archive-dotdot", "PUT .../archive with ../ and absolute names"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for name in (f"..{ups}{host_put}-tar", f"{host_put}-abs", f"a{ups}{host_put}-a"):
                ti = tarfile.TarInfo(name)
                ti.size = 5
                tf.addfile(ti, io.BytesIO(b"pwned"))
        su.sh_ok(api, sid, "rm -rf /tmp/ev && mkdir -p /tmp/ev")
        r = api.request("PUT", f"{b}/archive?path=/tmp/ev", raw=buf.getvalue())
        for suffix in ("-tar", "-abs", "-a"):
            assert not os.path.exists(host_put + suffix), (suffix, r)


# ------------------------------------------------------------------ `airlock cp` of a hostile archive

FAKE_TAR = "#!/bin/sh\n# a guest root replaced tar: whatever is asked, this archive comes out\ncat /tmp/evil.tar\n"


def _tar(members):
    """members: (TarInfo kwargs, data or None); format GNU unless a member
    sets pax headers."""
    buf = io.BytesIO()
    fmt = tarfile.PAX_FORMAT if any("pax_headers" in m for m, _ in members) else tarfile.GNU_FORMAT
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for kw, data in members:
            pax = kw.pop("pax_headers", None)
            ti = tarfile.TarInfo(kw.pop("name"))
            for k, v in kw.items():
                setattr(ti, k, v)
            if pax:
                ti.pax_headers = pax
            if data is not None:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                tf.addfile(ti)
    return buf.getvalue()


def test_cli_cp_of_a_hostile_archive(api, secd, attacker, tmp_path):
    sid = attacker["id"]
    outside = tmp_path / "outside"
    outside.mkdir()
    victim_file = outside / "victim.txt"
    victim_file.write_text("precious\n")
    etc_target = f"/etc/airlock-sec-pwned-{secrets.token_hex(4)}"
    abs_target = f"/tmp/airlock-sec-abs-{secrets.token_hex(4)}"
    su.sh_ok(api, sid, "mkdir -p /tmp/cpsrc && echo real > /tmp/cpsrc/f")
    su.put_file(api, sid, "/usr/local/bin/tar", FAKE_TAR, mode="0755")

    def cp(archive, name):
        dest = tmp_path / f"dest-{name}"
        dest.mkdir()
        su.put_file(api, sid, "/tmp/evil.tar", archive)
        p = subprocess.run([su.AIRLOCK, "--socket", secd.socket, "cp", f"{sid}:/tmp/cpsrc", str(dest)],
                           capture_output=True, timeout=60)
        assert p.returncode in (0, 125), (p.returncode, p.stderr)
        return dest, p

    def untouched():
        assert sorted(os.listdir(outside)) == ["victim.txt"], os.listdir(outside)
        assert victim_file.read_text() == "precious\n"
        assert not os.path.lexists(etc_target) and not os.path.lexists(abs_target)
        assert not os.path.lexists(tmp_path / "escape") and not os.path.lexists(tmp_path.parent / "escape")

    try:
        with attempt("files", "cp-dotdot", "airlock cp of an archive with a ../ name"):
            dest, p = cp(_tar([({"name": "cpsrc/../../escape"}, b"pwned")]), "dotdot")
            untouched()
            assert p.returncode == 125 and b".." in p.stderr, p.stderr

        with attempt("files", "cp-absolute", "airlock cp of an archive with an absolute name"):
            dest, p = cp(_tar([({"name": abs_target}, b"pwned")]), "abs")
            untouched()
            assert p.returncode == 125, p.stderr

        with attempt("files", "cp-symlink-through", "airlock cp: a symlink to a host dir, then a file through it"):
            dest, p = cp(_tar([({"name": "cpsrc/link", "type": tarfile.SYMTYPE, "linkname": str(outside)}, None),
                               ({"name": "cpsrc/link/pwned"}, b"pwned")]), "symlink")
            untouched()

        with attempt("files", "cp-symlink-etc", "airlock cp: a symlink to /etc, then a file through it"):
            dest, p = cp(_tar([({"name": "cpsrc/etc", "type": tarfile.SYMTYPE, "linkname": "/etc"}, None),
                               ({"name": "cpsrc/etc/" + os.path.basename(etc_target)}, b"pwned")]), "etc")
            untouched()

        with attempt("files", "cp-symlink-overwrite", "airlock cp: a symlink to a host file, then the same name as a file"):
            dest, p = cp(_tar([({"name": "cpsrc/v", "type": tarfile.SYMTYPE, "linkname": str(victim_file)}, None),
                               ({"name": "cpsrc/v"}, b"pwned")]), "overwrite")
            untouched()

        with attempt("files", "cp-hardlink", "airlock cp: a hard link to a host file, then writing it"):
            dest, p = cp(_tar([({"name": "cpsrc/hl", "type": tarfile.LNKTYPE, "linkname": str(victim_file)}, None),
                               ({"name": "cpsrc/hl"}, b"pwned")]), "hardlink")
            untouched()
            hl = dest / "cpsrc" / "hl"
            assert not hl.exists() or os.stat(hl).st_ino != os.stat(victim_file).st_ino

        with attempt("files", "cp-device-node", "airlock cp: a character device (/dev/mem's numbers) and a FIFO"):
            dest, p = cp(_tar([({"name": "cpsrc/mem", "type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 1}, None),
                               ({"name": "cpsrc/fifo", "type": tarfile.FIFOTYPE}, None)]), "dev")
            untouched()
            for n in ("mem", "fifo"):
                assert not os.path.lexists(dest / "cpsrc" / n), n

        with attempt("files", "cp-setuid", "airlock cp: a setuid root executable"):
            dest, p = cp(_tar([({"name": "cpsrc/suid", "mode": 0o4755, "uid": 0}, b"#!/bin/sh\nid\n")]), "suid")
            st = os.stat(dest / "cpsrc" / "suid")
            assert not st.st_mode & 0o6000, oct(st.st_mode)

        with attempt("files", "cp-pax-path", "airlock cp: a pax header whose path has ../"):
            dest, p = cp(_tar([({"name": "cpsrc/ok", "pax_headers": {"path": "cpsrc/../../../escape"}}, b"pwned")]),
                         "pax")
            untouched()
            assert p.returncode == 125, p.stderr

        with attempt("files", "cp-gnu-longname", "airlock cp: a GNU long name (././@LongLink) with ../"):
            dest, p = cp(_tar([({"name": "cpsrc/" + "d/" * 60 + "../" * 64 + "escape"}, b"pwned")]), "gnu")
            untouched()
            assert p.returncode == 125, p.stderr
    finally:
        su.sh(api, sid, "rm -f /usr/local/bin/tar /tmp/evil.tar")
