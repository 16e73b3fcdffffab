# SPDX-License-Identifier: Apache-2.0
"""client.templates: templates built from a Dockerfile or imported from an
image (docs/api.md, "Templates"). Build and import upload a stream (a build
context as a tar, an image archive) and read the daemon's progress lines."""
import json
import os
import re
import stat
import tarfile
import threading
import urllib.parse

from .errors import AirlockError, ProtocolError, error_from

CHUNK = 256 * 1024
AIRLOCK_DOCKERFILE = ".airlock-Dockerfile"


def _seg(s):
    return urllib.parse.quote(str(s), safe="")


# ---- .dockerignore (the subset src/cli/cli-ignore.h lists)

def _component_regex(pat):
    """One path component's glob as a regex: * ? [...] ([^...] or [!...]) and \\ escapes."""
    out, i = [], 0
    while i < len(pat):
        c = pat[i]
        end = -1
        if c == "[":
            j = i + 1 + (pat[i + 1:i + 2] in ("!", "^"))
            end = pat.find("]", j + 1) if j < len(pat) else -1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "\\" and i + 1 < len(pat):
            i += 1
            out.append(re.escape(pat[i]))
        elif end > 0:
            body = pat[i + 1:end]
            neg = body[:1] in ("!", "^")
            out.append("[" + ("^" if neg else "") + (body[1:] if neg else body).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z", re.S)


def _clean(path):
    comps = []
    for c in path.split("/"):
        if c in ("", "."):
            continue
        if c == "..":
            if not comps:
                return None
            comps.pop()
            continue
        comps.append(c)
    return comps


class DockerIgnore:
    """Docker's .dockerignore: '!' exceptions, '**' components, the last match decides, a
    pattern that matches a directory matches all under it."""

    def __init__(self, text=""):
        self.patterns = []
        for line in text.splitlines():
            p = line.strip()
            if not p or p.startswith("#"):
                continue
            exception = p.startswith("!")
            comps = _clean(p[1:].strip() if exception else p)
            if comps:
                self.patterns.append((exception, [c if c == "**" else _component_regex(c) for c in comps]))
        self.has_exceptions = any(e for e, _ in self.patterns)

    @classmethod
    def load(cls, directory):
        try:
            with open(os.path.join(directory, ".dockerignore"), encoding="utf-8") as f:
                return cls(f.read(1 << 20))
        except FileNotFoundError:
            return cls()

    @staticmethod
    def _match(pat, comps):
        if not pat:
            return not comps
        if pat[0] == "**":
            return any(DockerIgnore._match(pat[1:], comps[k:]) for k in range(len(comps) + 1))
        return bool(comps) and pat[0].match(comps[0]) is not None and DockerIgnore._match(pat[1:], comps[1:])

    def excludes(self, path):
        comps = _clean(path) or []
        excluded = False
        for exception, pat in self.patterns:
            if exception == excluded and any(self._match(pat, comps[:k]) for k in range(1, len(comps) + 1)):
                excluded = not exception
        return excluded


# ---- the build context as a tar stream

def _root_owned(info):
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


class _ContextTar:
    """Writes a directory as a tar into a pipe from a thread; iterate for its chunks."""

    def __init__(self, directory, ignore=None, keep=None, extra=None):
        self.directory, self.ignore, self.keep, self.extra = directory, ignore, keep, extra
        self.skipped = []
        self.error = None
        rfd, wfd = os.pipe()
        self._r = os.fdopen(rfd, "rb")
        self._w = os.fdopen(wfd, "wb")
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    @staticmethod
    def _ensure(tar, chain):
        """Writes the directories of chain not written yet (one left out may hold an exception)."""
        for d in chain:
            if not d[2]:
                tar.add(d[0], arcname=d[1], recursive=False, filter=_root_owned)
                d[2] = True

    def _walk(self, tar, src, name, parents):
        for leaf in sorted(os.listdir(src)):
            csrc, cname = os.path.join(src, leaf), f"{name}/{leaf}" if name else leaf
            if self.extra and cname == AIRLOCK_DOCKERFILE:
                continue
            st = os.lstat(csrc)
            out = self.ignore is not None and cname != self.keep and self.ignore.excludes(cname)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                if not out:
                    self.skipped.append(cname)
                continue
            if not stat.S_ISDIR(st.st_mode):
                if not out:
                    self._ensure(tar, parents)
                    tar.add(csrc, arcname=cname, recursive=False, filter=_root_owned)
                continue
            if out and not (self.ignore.has_exceptions or (self.keep or "").startswith(cname + "/")):
                continue
            chain = parents + [[csrc, cname, False]]
            if not out:
                self._ensure(tar, chain)
            self._walk(tar, csrc, cname, chain)

    def _write(self):
        try:
            with tarfile.open(fileobj=self._w, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                self._walk(tar, self.directory, "", [])
                if self.extra:
                    tar.add(self.extra, arcname=AIRLOCK_DOCKERFILE, filter=_root_owned)
        except BaseException as e:  # noqa: BLE001 (handed to the reader)
            self.error = e
        finally:
            try:
                self._w.close()
            except OSError:
                pass

    def __iter__(self):
        try:
            while True:
                chunk = self._r.read(CHUNK)
                if not chunk:
                    break
                yield chunk
        finally:
            self._r.close()
            self._thread.join()
        if self.error is not None:
            raise self.error


def _file_chunks(path):
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                return
            yield chunk


def _dockerfile_place(context, dockerfile):
    """(dockerfile= parameter, keep, extra): its path in the context, or a file added as .airlock-Dockerfile."""
    rctx = os.path.realpath(context)
    rdf = os.path.realpath(dockerfile if dockerfile is not None else os.path.join(context, "Dockerfile"))
    if not os.path.isfile(rdf):
        raise FileNotFoundError(f"no Dockerfile at {rdf} (name one with dockerfile=)")
    if rdf.startswith(rctx.rstrip("/") + "/"):
        rel = rdf[len(rctx.rstrip("/")) + 1:]
        return rel, rel, None
    return AIRLOCK_DOCKERFILE, None, rdf


class Templates:
    """client.templates: list(), get(name), delete(name), build(...), import_(...)."""

    def __init__(self, client):
        self._c = client

    def list(self):
        """GET /v1/templates: [{"name","tenant","source","parent","size_mib","created_ms",
        "description","config","in_use","steps"}, ...]."""
        return self._c.transport.request("GET", "/v1/templates").json()["templates"]

    def get(self, name):
        """GET /v1/templates/{name}"""
        return self._c.transport.request("GET", f"/v1/templates/{_seg(name)}").json()

    def delete(self, name):
        """DELETE /v1/templates/{name}: Conflict while in use, Forbidden for a built-in one."""
        self._c.transport.request("DELETE", f"/v1/templates/{_seg(name)}")

    def _stream(self, what, path, query, body, content_type, on_progress):
        """POSTs body; hands each step/output/progress event to on_progress; returns the template."""
        lines = self._c.transport.lines("POST", path, query=query, data=body,
                                        headers={"Content-Type": content_type})
        with lines:
            for ev in lines:
                kind = ev.get("type")
                if kind == "done":
                    return ev.get("template")
                if kind == "error":
                    e = ev.get("error") or {}
                    raise error_from(e.get("code"), f"template {what}: {e.get('message')}", body=ev)
                if on_progress is not None:
                    on_progress(ev)
        raise ProtocolError(f"template {what}: the connection closed before the {what} finished")

    def build(self, name, context=".", dockerfile=None, build_args=None, network=None, no_cache=False,
              snapshot=False, disk_mib=None, tenant=None, on_progress=None):
        """POST /v1/templates: builds a template from a Dockerfile and returns it.
        context: a directory (sent as a tar while it is read, minus its .dockerignore;
        symlinks as symlinks, special files left out) or bytes (a tar you made, sent as is).
        dockerfile: a path on this machine (default context/Dockerfile) for a directory,
        its path in the tar (default "Dockerfile") for bytes. build_args: {K: V};
        network: the RUN steps' policy (a dict); on_progress(event) gets each step,
        output and progress event. An error line raises its typed error (AirlockError)."""
        query = {"name": name, "build_arg": [f"{k}={v}" for k, v in (build_args or {}).items()] or None,
                 "no_cache": "1" if no_cache else None, "snapshot": "1" if snapshot else None,
                 "disk_mib": disk_mib, "tenant": tenant}
        if network is not None:
            query["network"] = json.dumps(network, separators=(",", ":"))
        if isinstance(context, (bytes, bytearray)):
            query["dockerfile"] = dockerfile or "Dockerfile"
            return self._stream("build", "/v1/templates", query, bytes(context), "application/x-tar", on_progress)
        query["dockerfile"], keep, extra = _dockerfile_place(context, dockerfile)
        tar = _ContextTar(context, DockerIgnore.load(context), keep, extra)
        try:
            return self._stream("build", "/v1/templates", query, iter(tar), "application/x-tar", on_progress)
        except AirlockError:
            if tar.error is not None:
                raise tar.error from None
            raise

    def import_(self, name, source, tenant=None, on_progress=None):
        """POST /v1/templates/import: a template from an image and returns it. source:
        a docker save or OCI archive file (maybe gzip; sent as it is), an OCI layout
        directory (sent as a tar of it), or the archive's bytes. (`import` is a keyword:
        the method is import_.)"""
        query = {"name": name, "tenant": tenant}
        if isinstance(source, (bytes, bytearray)):
            body = bytes(source)
            gz = body[:2] == b"\x1f\x8b"
        elif os.path.isdir(source):
            body, gz = iter(_ContextTar(source)), False
        else:
            with open(source, "rb") as f:
                gz = f.read(2) == b"\x1f\x8b"
            body = _file_chunks(source)
        ctype = "application/gzip" if gz else "application/x-tar"
        return self._stream("import", "/v1/templates/import", query, body, ctype, on_progress)
