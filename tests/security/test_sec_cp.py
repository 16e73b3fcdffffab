# SPDX-License-Identifier: Apache-2.0
"""Issue 17, part 4: what a hostile guest sends back to the host through
`airlock cp` (cp/size), what it makes the CLI print on a person's terminal,
and what one tenant's token reads of the others (/metrics).

The archive of `cp ID:/dir DEST` is made by running `tar` in the guest: a
guest with root replaces that `tar` (here with a wrapper that serves a
hand-made archive while /tmp/evil-mode exists, the real tar otherwise), so
every shape of archive is the guest's to choose. Containment is read on the
host: the destination's parent, the files the archive aims at."""
import os
import shutil
import subprocess
import tempfile

import pytest

import secutil as su
from secutil import attempt

# The hostile tar: the mode file says which archive it writes to stdout.
EVIL_TAR = r'''
import io, sys, tarfile

mode = open("/tmp/evil-mode").read().split()
out = sys.stdout.buffer

def reg(t, name, data=b"evil\n"):
    i = tarfile.TarInfo(name)
    i.size = len(data)
    t.addfile(i, io.BytesIO(data))

def special(t, name, kind, link):
    i = tarfile.TarInfo(name)
    i.type = kind
    i.linkname = link
    t.addfile(i)

if mode[0] == "big":
    # One header announcing 2 GiB, and no data: a reader must stop at the header.
    i = tarfile.TarInfo("copy/huge")
    i.size = 2 << 30
    out.write(i.tobuf(format=tarfile.PAX_FORMAT))
    out.flush()
    sys.exit(0)
t = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)
reg(t, "copy/ok.txt", b"fine\n")
if mode[0] == "dotdot":
    reg(t, "../escape-dotdot\x1b]0;pwned\x07")
    reg(t, "copy/../escape-dotdot")
elif mode[0] == "absolute":
    reg(t, mode[1] + "/escape-absolute")
elif mode[0] == "symlink":
    special(t, "copy/up", tarfile.SYMTYPE, mode[1])
    reg(t, "copy/up/escape-symlink")
elif mode[0] == "hardlink":
    special(t, "copy/hl", tarfile.LNKTYPE, mode[1])
    reg(t, "copy/after-link")
elif mode[0] == "count":
    for n in range(int(mode[1])):
        reg(t, "copy/f%06d" % n, b"")
t.close()
'''

WRAPPER = """#!/bin/sh
if [ -f /tmp/evil-mode ]; then exec python3 -S /tmp/evil-tar.py "$@"; fi
exec {real} "$@"
"""


def cli(secd, *args, timeout=120):
    return subprocess.run([su.AIRLOCK, "--socket", secd.socket, *args], capture_output=True, timeout=timeout)


@pytest.fixture(scope="module")
def evil(secd, attacker):
    """Installs the hostile tar in the attacker's guest for this module; the
    real one is put back after it."""
    api = secd.api
    sid = attacker["id"]
    tar = su.sh_ok(api, sid, "command -v tar").strip()
    real = tar + ".real"
    su.put_file(api, sid, "/tmp/evil-tar.py", EVIL_TAR)
    su.sh_ok(api, sid, f"rm -f /tmp/evil-mode; mv {tar} {real} && mkdir -p /tmp/cpsrc && echo hi > /tmp/cpsrc/a")
    su.put_file(api, sid, tar, WRAPPER.format(real=real), mode="755")
    try:
        yield {"sid": sid, "set": lambda *mode: su.put_file(api, sid, "/tmp/evil-mode", " ".join(mode))}
    finally:
        su.sh_ok(api, sid, f"rm -f /tmp/evil-mode; mv {real} {tar}")


@pytest.fixture
def host():
    """A host directory with dest/ (where copies go) beside files they must not touch."""
    base = tempfile.mkdtemp(prefix="airlock-sec-cp-")
    dest = os.path.join(base, "dest")
    os.mkdir(dest)
    try:
        yield {"base": base, "dest": dest}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def only_dest(h):
    """Nothing beside dest/ in its parent."""
    assert sorted(os.listdir(h["base"])) == ["dest"], os.listdir(h["base"])


def test_source_ending_in_dotdot(secd, api, evil, host):
    sid = evil["sid"]
    with attempt("cp", "cp-dotdot-source", "airlock cp ID:/tmp/cpsrc/.. DEST (and /. ): the copy would land beside DEST"):
        for src in ("/tmp/cpsrc/..", "/tmp/cpsrc/.", "/tmp/cpsrc/../"):
            p = cli(secd, "cp", f"{sid}:{src}", host["dest"])
            assert p.returncode != 0, (src, p.stdout, p.stderr)
            assert b"name the directory itself" in p.stderr, p.stderr
            only_dest(host)
            assert os.listdir(host["dest"]) == [], os.listdir(host["dest"])
        # Other clients of the API are not handed such an archive either.
        r = api.request("GET", f"/v1/sandboxes/{sid}/archive?path=/tmp/cpsrc/..")
        assert r.status == 400 and b"name the directory itself" in r.raw, r


@pytest.mark.parametrize("mode", ["dotdot", "absolute", "symlink", "hardlink"])
def test_hostile_archive(secd, api, evil, host, mode):
    sid = evil["sid"]
    target = os.path.join(host["base"], "victim.txt")
    with open(target, "w") as f:
        f.write("untouched\n")
    aim = {"absolute": host["base"], "symlink": host["base"], "hardlink": target}.get(mode, "")
    what = {"dotdot": "entries named ../x and copy/../x (one with terminal escapes in its name)",
            "absolute": "an entry with an absolute host path",
            "symlink": "a symlink to the destination's parent, then a file through it",
            "hardlink": "a hard link to a host file beside the destination"}[mode]
    with attempt("cp", f"cp-archive-{mode}", f"cp from a guest whose tar writes {what}"):
        evil["set"](mode, aim)
        p = cli(secd, "cp", f"{sid}:/tmp/cpsrc", os.path.join(host["dest"], "copy"))
        for name in os.listdir(host["base"]):
            assert name in ("dest", "victim.txt"), name
        with open(target) as f:
            assert f.read() == "untouched\n"
        assert b"\x1b" not in p.stderr and b"\x07" not in p.stderr, p.stderr  # escaped, if printed
        if mode == "hardlink":
            # Skipped with a note, never linked: the rest arrives.
            assert p.returncode == 0, p.stderr
            assert b"skipped 1 entries" in p.stderr, p.stderr
            assert not os.path.lexists(os.path.join(host["dest"], "copy", "hl"))
            assert os.path.exists(os.path.join(host["dest"], "copy", "after-link"))
        else:
            assert p.returncode != 0, (p.stdout, p.stderr)
            assert b"refusing to extract" in p.stderr, p.stderr
            if mode == "dotdot":
                assert b"\\x1b]0;pwned\\x07" in p.stderr, p.stderr


def test_archive_size_and_entry_bombs(secd, api, evil, host):
    sid = evil["sid"]
    with attempt("cp", "cp-archive-size-bomb", "an archive entry announcing 2 GiB: refused at its header (default --max-bytes 1 GiB)"):
        evil["set"]("big")
        p = cli(secd, "cp", f"{sid}:/tmp/cpsrc", os.path.join(host["dest"], "copy"))
        assert p.returncode != 0 and b"--max-bytes" in p.stderr, p.stderr
        assert not os.path.exists(os.path.join(host["dest"], "copy", "huge"))
        only_dest(host)
    with attempt("cp", "cp-archive-entry-bomb", "an archive of 3000 entries against --max-entries 1000"):
        evil["set"]("count", "3000")
        p = cli(secd, "cp", "--max-entries", "1000", f"{sid}:/tmp/cpsrc", os.path.join(host["dest"], "copy2"))
        assert p.returncode != 0 and b"--max-entries" in p.stderr, p.stderr
        made = os.listdir(os.path.join(host["dest"], "copy2"))
        assert len(made) <= 1000, len(made)
        # The same archive within a raised limit arrives whole.
        p = cli(secd, "cp", "--max-entries", "5000", f"{sid}:/tmp/cpsrc", os.path.join(host["dest"], "copy3"))
        assert p.returncode == 0, p.stderr
        assert len(os.listdir(os.path.join(host["dest"], "copy3"))) == 3001
        only_dest(host)


def test_file_longer_than_its_reported_size(secd, api, evil, host):
    sid = evil["sid"]
    with attempt("cp", "cp-file-past-its-size", "cp of a guest file that sends more than its stat said (/proc: size 0) "
                 "and of one over --max-bytes"):
        out = os.path.join(host["dest"], "status")
        p = cli(secd, "cp", f"{sid}:/proc/self/status", out)
        assert p.returncode != 0 and b"more than the 0 bytes its size said" in p.stderr, p.stderr
        assert os.listdir(host["dest"]) == [], os.listdir(host["dest"])  # nothing kept, no temporary left
        su.sh_ok(api, sid, "head -c 5000 /dev/zero > /tmp/cpsrc/five-k")
        p = cli(secd, "cp", "--max-bytes", "4096", f"{sid}:/tmp/cpsrc/five-k", out)
        assert p.returncode != 0 and b"--max-bytes" in p.stderr, p.stderr
        assert os.listdir(host["dest"]) == []
        p = cli(secd, "cp", f"{sid}:/tmp/cpsrc/five-k", out)
        assert p.returncode == 0 and os.path.getsize(out) == 5000, p.stderr
        only_dest(host)


ESC_NAMES = [b"\x1b]0;pwned\x07title", b"\x1b[2J\x1b[Hclear", b"csi\xc2\x9b31mred", b"raw\x9bbyte\xff",
             b"rtl\xe2\x80\xaegpj.exe", b"osc52\x1b]52;c;cHduZWQ=\x07"]
BAD = (b"\x1b", b"\x07", b"\xc2\x9b", b"\x9b", b"\xe2\x80\xae")


def test_terminal_escapes_from_the_guest(secd, api, attacker):
    sid = attacker["id"]
    with attempt("cp", "cli-escape-file-names", "file names with terminal escapes (OSC, CSI, C1, bidi, invalid UTF-8) in airlock fs ls"):
        script = ("import os\nos.makedirs('/tmp/escdir', exist_ok=True)\n"
                  + "".join(f"open(b'/tmp/escdir/' + {n!r}, 'w').close()\n" for n in ESC_NAMES)
                  + f"os.symlink({ESC_NAMES[0]!r}, b'/tmp/escdir/link')\nprint('{{}}')\n")
        su.py(api, sid, script)
        p = cli(secd, "fs", "ls", sid, "/tmp/escdir")
        assert p.returncode == 0, p.stderr
        for bad in BAD:
            assert bad not in p.stdout, (bad, p.stdout)
        assert b"\\x1b]0;pwned\\x07title" in p.stdout and b"\\u202egpj.exe" in p.stdout, p.stdout
        p = cli(secd, "fs", "stat", sid, "/tmp/escdir/link")
        assert p.returncode == 0 and not any(bad in p.stdout for bad in BAD), p.stdout
    with attempt("cp", "cli-escape-process-and-errors", "a process command and a relayed guest error with escapes in airlock ps / exec"):
        r = api.request("POST", f"/v1/sandboxes/{sid}/processes",
                        body={"cmd": ["sh", "-c", "sleep 30", "\x1b]0;evil\x07\x1b[2J"], "tag": "esc"})
        assert r.status == 201, r
        pid = r.json["id"]
        try:
            p = cli(secd, "ps", sid)
            assert p.returncode == 0, p.stderr
            assert b"\x1b" not in p.stdout and b"\x07" not in p.stdout, p.stdout
            assert b"\\x1b]0;evil\\x07" in p.stdout, p.stdout
        finally:
            api.request("POST", f"/v1/sandboxes/{sid}/processes/{pid}/signal", body={"signal": "KILL"})
        # An error the agent relays names the guest's path: escaped on stderr.
        p = cli(secd, "exec", "--cwd", "/tmp/escdir/\x1b[2Jnope", sid, "true")
        assert p.returncode != 0 and b"\x1b" not in p.stderr, p.stderr
        assert b"[2Jnope" in p.stderr, p.stderr  # the message arrived, without its ESC


def test_tenant_reads_no_host_metrics(tcp):
    with attempt("api", "tenant-metrics-host", "a tenant's token reads /metrics (every tenant's numbers) by its path and variants"):
        mal = tcp["mallory"]
        for path in ("/metrics", "/metrics?x=1", "/metrics/", "//metrics", "/v1/../metrics", "/METRICS"):
            r = mal.request("GET", path)
            assert r.status in (403, 404), (path, r)
            assert b"airlock_" not in r.raw, (path, r.raw[:200])
        r = mal.request("GET", "/metrics")
        assert r.status == 403 and r.json["error"]["code"] == "forbidden", r
