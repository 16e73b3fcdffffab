# SPDX-License-Identifier: Apache-2.0
"""images/extract-vmlinux: the uncompressed ELF kernel Firecracker boots,
from the bzImage Debian ships. Synthetic bzImages in every compression the
kernel build offers (and refusals), then the real one of build/images."""
import bz2
import gzip
import lzma
import os
import shutil
import struct
import subprocess

import pytest

from conftest import BUILD, ROOT

EXTRACT = os.path.join(ROOT, "images", "extract-vmlinux")
KERNELS = os.path.join(BUILD, "images", "kernels")
VERSION = b"6.1.0-77-test (builder@example.org) #3 SMP PREEMPT_DYNAMIC Debian 6.1.999-1 (2026-01-02)"
BANNER = (b"Linux version 6.1.0-77-test (builder@example.org) (gcc-12 (Debian 12.2.0) 12.2.0, GNU ld 2.40) "
          b"#3 SMP PREEMPT_DYNAMIC Debian 6.1.999-1 (2026-01-02)\n")


def fake_elf(banner=BANNER, machine=62, etype=2):
    head = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8 + struct.pack("<HH", etype, machine)
    return head + b"\0" * (64 - len(head)) + b"\x90" * 4000 + banner + b"\0" * 3000


def bzimage(payload, version=VERSION, magic=b"HdrS", proto=0x20f):
    setup_sects = 3
    img = bytearray((setup_sects + 1) * 512 + 0x100)
    img[0x1f1] = setup_sects
    img[0x202:0x206] = magic
    struct.pack_into("<H", img, 0x206, proto)
    struct.pack_into("<H", img, 0x20e, 0x100)  # kernel_version at 0x300
    img[0x300:0x300 + len(version) + 1] = version + b"\0"
    struct.pack_into("<II", img, 0x248, 0x100, len(payload))
    return bytes(img) + payload


def compress(fmt, data):
    if fmt == "gzip":
        return gzip.compress(data)
    if fmt == "xz":
        return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)
    if fmt == "lzma":
        return lzma.compress(data, format=lzma.FORMAT_ALONE)
    if fmt == "bzip2":
        return bz2.compress(data)
    tool = {"zstd": ["zstd", "-qc"], "lz4": ["lz4", "-lqc"]}[fmt]  # lz4 -l: the legacy frames the kernel uses
    if not shutil.which(tool[0]):
        pytest.skip(f"{tool[0]} is not installed")
    return subprocess.run(tool, input=data, stdout=subprocess.PIPE, check=True).stdout


def run(tmp_path, image):
    d = tmp_path / "k"
    d.mkdir(exist_ok=True)
    src, dst = d / "vmlinuz", d / "vmlinux"
    src.write_bytes(image)
    p = subprocess.run([EXTRACT, str(src), str(dst)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stderr.decode(), dst


@pytest.mark.parametrize("fmt", ["gzip", "xz", "lzma", "bzip2", "zstd", "lz4"])
def test_every_compression(tmp_path, fmt):
    elf = fake_elf()
    rc, err, dst = run(tmp_path, bzimage(compress(fmt, elf) + struct.pack("<I", len(elf))))
    assert rc == 0, err
    assert dst.read_bytes() == elf
    assert f"({fmt}, " in err and "Linux version 6.1.0-77-test" in err
    assert oct(os.stat(dst).st_mode & 0o777) == "0o644"


REFUSALS = [
    ("not-a-bzimage", lambda elf: bzimage(gzip.compress(elf) + struct.pack("<I", len(elf)), magic=b"Nope"),
     "not a bzImage"),
    ("old-protocol", lambda elf: bzimage(gzip.compress(elf) + struct.pack("<I", len(elf)), proto=0x206),
     "needs 2.08"),
    ("unknown-compression", lambda elf: bzimage(b"\x12\x34\x56\x78" * 10 + struct.pack("<I", len(elf))),
     "unknown compression"),
    ("wrong-size", lambda elf: bzimage(gzip.compress(elf) + struct.pack("<I", len(elf) + 1)), "the payload says"),
    ("not-elf", lambda elf: bzimage(gzip.compress(b"MZ" + elf[2:]) + struct.pack("<I", len(elf))), "not an ELF"),
    ("other-release", lambda elf: bzimage(gzip.compress(elf) + struct.pack("<I", len(elf)),
                                          version=VERSION.replace(b"6.1.0-77", b"6.1.0-78")), "the bzImage says"),
    ("other-build", lambda elf: bzimage(gzip.compress(elf) + struct.pack("<I", len(elf)),
                                        version=VERSION.replace(b"#3", b"#4")), "is not the build of"),
]


@pytest.mark.parametrize("make,needle", [(m, n) for _, m, n in REFUSALS], ids=[i for i, _, _ in REFUSALS])
def test_refusals_write_nothing(tmp_path, make, needle):
    rc, err, dst = run(tmp_path, make(fake_elf()))
    assert rc == 1 and needle in err, err
    assert not dst.exists()
    assert [p.name for p in dst.parent.iterdir()] == ["vmlinuz"]  # no temporary file left either


def test_not_x86_64(tmp_path):
    elf = fake_elf(machine=183)  # aarch64
    rc, err, _ = run(tmp_path, bzimage(gzip.compress(elf) + struct.pack("<I", len(elf))))
    assert rc == 1 and "not an x86-64 executable" in err


def test_the_real_kernel(tmp_path):
    vmlinuz, vmlinux = os.path.join(KERNELS, "vmlinuz"), os.path.join(KERNELS, "vmlinux")
    if not os.path.exists(vmlinux):
        pytest.fail(f"{vmlinux} is missing: run 'make images-kernel' (make test-fc does)", pytrace=False)
    with open(vmlinuz, "rb") as f:
        bz = f.read()
    with open(vmlinux, "rb") as f:
        elf = f.read()
    with open(os.path.join(KERNELS, "kernel-abi")) as f:
        abi = f.read().strip()
    # An x86-64 ELF executable, as Firecracker wants.
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and struct.unpack_from("<HH", elf, 16) == (2, 62)
    # The same kernel: the bzImage's version string names the release of the package, and the
    # vmlinux's boot banner has that release and that build.
    kv = bz[struct.unpack_from("<H", bz, 0x20e)[0] + 0x200:][:512].split(b"\0")[0]
    release = kv.split(b" ")[0].decode()
    assert release == abi
    uts = kv.partition(b") ")[2]
    assert b"Linux version " + release.encode() + b" (" in elf
    assert b") " + uts + b"\n" in elf
    # Extraction is reproducible.
    rc, err, dst = run(tmp_path, bz)
    assert rc == 0, err
    assert dst.read_bytes() == elf
