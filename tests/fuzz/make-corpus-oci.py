#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of fuzz-oci-layer (tests/fuzz/corpus/fuzz-oci-layer/):
layer tars, plain, gzip and zstd, each exercising a part of the applier
(whiteouts, opaque dirs, links, modes, xattrs, long names, sparse files) or a
hostile case it must refuse. The fuzz target lays a lower layer first: dir/a,
dir/sub/b, file, rootlink -> /, dir/up -> ../outside, dangling -> /nonexistent.

The seeds are committed; run this again only to change them (needs zstd).
"""
import gzip
import io
import os
import subprocess
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz-oci-layer")


def e(name, kind="file", data=b"", mode=None, uid=0, gid=0, link="", xattrs=None):
    ti = tarfile.TarInfo(name)
    ti.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
               "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE,
               "blk": tarfile.BLKTYPE}[kind]
    ti.mode = mode if mode is not None else (0o755 if kind == "dir" else 0o644)
    ti.uid, ti.gid, ti.mtime, ti.linkname, ti.size = uid, gid, 1700000000, link, len(data)
    if xattrs:
        ti.pax_headers = {"SCHILY.xattr." + k: v for k, v in xattrs.items()}
    return ti, data


def tar(entries, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for ti, data in entries:
            t.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return buf.getvalue()


SEEDS = {
    "basic": [e("./", "dir"), e("etc/", "dir"), e("etc/hosts", data=b"127.0.0.1 localhost\n"),
              e("bin/tool", data=b"#!/bin/sh\n", mode=0o4755), e("home/u/", "dir", uid=1000, gid=1000),
              e("fifo", "fifo")],
    "whiteouts": [e(".wh.file"), e("dir/.wh.a"), e("dir/c", data=b"c"), e(".wh.rootlink")],
    "opaque": [e("dir/new", data=b"n"), e("dir/.wh..wh..opq"), e("dir/sub/x", data=b"x")],
    "links": [e("t", data=b"target"), e("h", "hard", link="t"), e("dir/h2", "hard", link="/dir/a"),
              e("s", "sym", link="/etc/passwd"), e("s2", "sym", link="../../../x")],
    "replace": [e("file/", "dir"), e("file/in", data=b"i"), e("dir", data=b"now a file"),
                e("rootlink", data=b"over the link")],
    "xattrs": [e("x", data=b"x", xattrs={"user.a": "1", "trusted.b": "2", "security.selinux": "s"}),
               e("d/", "dir", xattrs={"user.dir": "yes"})],
    "through_links": [e("rootlink/etc/x", data=b"in root"), e("dir/up/y", data=b"up"),
                      e("dangling/z", data=b"z")],
    "dotdot": [e("../escape", data=b"x")],
    "abs": [e("/abs/file", data=b"x"), e("/../../outside/x", data=b"x")],
    "hard_out": [e("h", "hard", link="../outside/canary")],
    "hard_symlink": [e("h", "hard", link="rootlink")],
    "hard_dir": [e("h", "hard", link="dir")],
    "device": [e("null", "chr"), e("sda", "blk")],
    "longname": [e("d/" + "n" * 200 + "/" + "m" * 200, data=b"long")],
    "gnu": [e("g/" + "x" * 150, data=b"gnu long name"), e("gl", "sym", link="y" * 300)],
}


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, entries in SEEDS.items():
        raw = tar(entries, tarfile.GNU_FORMAT if name == "gnu" else tarfile.PAX_FORMAT)
        write(name + ".tar", raw)
    write("basic.tar.gz", gzip.compress(tar(SEEDS["basic"]), mtime=0))
    write("opaque.tar.gz", gzip.compress(tar(SEEDS["opaque"]), mtime=0))
    zst = subprocess.run(["zstd", "-q", "-c"], input=tar(SEEDS["links"]), capture_output=True, check=True)
    write("links.tar.zst", zst.stdout)
    write("bomb.tar.gz", gzip.compress(tar([e("zeros", data=b"\0" * (8 << 20))]), mtime=0))
    write("empty", b"")
    write("zeros.tar", b"\0" * 1024)


if __name__ == "__main__":
    main()
