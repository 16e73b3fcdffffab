#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of fuzz-dockerfile and fuzz-build-context
(tests/fuzz/corpus/<target>/): Dockerfiles of the supported subset and of
what is refused, and context tars (plain, gzip, with links, hostile names).

The seeds are committed; run this again only to change them. Each seed is
also a regression test: `make fuzz-smoke` replays every one.
"""
import gzip
import io
import os
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


DOCKERFILES = {
    "basic": "FROM base\nRUN apt-get update && \\\n  apt-get install -y curl\nCMD [\"python3\", \"-m\", \"http.server\"]\n",
    "copy": "FROM minimal\nARG U=1000\nCOPY --chown=${U}:${U} --chmod=750 a b/ /app/\n"
    "COPY [\"with space\", \"/d/\"]\nADD x.txt /x\n",
    "env": "FROM b\nENV A=1 B=\"two words\" C=$A\nENV LEGACY a value\n"
    "ENV D=${A}x E=${U:-def} F=${A:+alt} G=\\$A H='$A' J=${A:-${U:-deep}}\n"
    "LABEL v=\"1.$A\"\n",
    "args": "ARG TAG=stable\nFROM base-${TAG} AS b\nARG TAG\nARG V=1 W=2\nENV X=$TAG-$V\nRUN echo $V\n",
    "workdir": "FROM b\nWORKDIR app\nWORKDIR ../lib\nUSER ${U:-1000}:1000\nEXPOSE 80 8080/tcp 9000-9010/udp\n"
    "ENTRYPOINT exec /start.sh\n",
    "escape": "# escape=`\nFROM b\nRUN dir c:\\ `\n  && echo done\nENV P=c:\\path\n",
    "comments": "# syntax=docker/dockerfile:1\n\n# c\nfrom b\n\nrun a \\\n # inside\n\n  b\nmaintainer me\n",
    "multistage": "FROM a AS x\nRUN x\nFROM b\nCOPY --from=x /a /b\n",
    "refused": "FROM a\nONBUILD RUN x\nSHELL [\"/bin/bash\"]\nVOLUME /v\n",
    "url": "FROM a\nADD https://example.com/x /x\nADD app.tar.gz /\n",
    "mount": "FROM a\nRUN --mount=type=cache,target=/x make\n",
    "badsubst": "FROM a\nENV X=${Y:?required} Z=${Q\n",
    "crlf": "FROM a\r\nRUN echo hi \\\r\n  there\r\nENV A=1\r\n",
}


def dockerfiles():
    for name, text in DOCKERFILES.items():
        write("fuzz-dockerfile", name, text)


def tar_bytes(entries, compress=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            if kind == "f":
                info.size = len(data)
                info.mode = 0o644
                t.addfile(info, io.BytesIO(data))
                continue
            if kind == "d":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            elif kind == "l":
                info.type = tarfile.SYMTYPE
                info.linkname = data
            elif kind == "h":
                info.type = tarfile.LNKTYPE
                info.linkname = data
            elif kind == "c":
                info.type = tarfile.CHRTYPE
                info.devmajor, info.devminor = 1, 3
            t.addfile(info)
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw


CONTEXTS = {
    "project": [
        ("./", "d", None),
        ("./Dockerfile", "f", b"FROM base\nCOPY . /app\n"),
        ("./.airlock-Dockerfile", "f", b"FROM x\n"),
        ("./src/a.txt", "f", b"alpha"),
        ("./src/sub/b.sh", "f", b"#!/bin/sh\n"),
        ("./src/link", "l", "a.txt"),
        ("./src/hard", "h", "src/a.txt"),
        ("a/b/c", "f", b"c"),
    ],
    "dotdot": [("ok", "f", b"x"), ("../etc/passwd", "f", b"x")],
    "device": [("dev/null", "c", None)],
    "under-file": [("f", "f", b"x"), ("f/g", "f", b"y")],
    "hardlink-missing": [("h", "h", "nowhere")],
    "hardlink-loop": [("a", "h", "b"), ("b", "h", "a")],
    "absolute": [("/abs/x", "f", b"x"), ("//double//slash", "f", b"y"), ("./././dot", "f", b"z")],
    "links": [
        ("real/conf.txt", "f", b"conf"),
        ("real/sub/x", "f", b"x"),
        ("cfg", "l", "real/conf.txt"),
        ("dirlink", "l", "real"),
        ("abs", "l", "/real/../real/conf.txt"),
        ("loop1", "l", "loop2"),
        ("loop2", "l", "loop1"),
        ("out", "l", "../../etc/passwd"),
        ("a/b/c", "l", "../../dirlink"),
    ],
    "duplicates": [("d/x", "f", b"1"), ("d", "f", b"2"), ("d/x", "f", b"3")],
}


def contexts():
    for name, entries in CONTEXTS.items():
        write("fuzz-build-context", name, tar_bytes(entries))
    write("fuzz-build-context", "project-gz", tar_bytes(CONTEXTS["project"], compress=True))
    write("fuzz-build-context", "not-a-tar", b"hello, this is no tar\n")
    # An empty archive (found by the fuzzer: nothing to sort).
    write("fuzz-build-context", "empty-gz", tar_bytes([], compress=True))


if __name__ == "__main__":
    dockerfiles()
    contexts()
