# SPDX-License-Identifier: Apache-2.0
"""A sandbox's files: single files as bytes or text, trees as tar archives
(the archive endpoints, like `docker cp`), list, stat, mkdir, remove, rename."""
import io
import os
import posixpath
import shutil
import tarfile
import tempfile

from .errors import Conflict, NotFound, ProtocolError

# Trees are packed into a temporary file that spills to disk past this.
_SPOOL_MAX = 16 << 20


def _guest_path(path):
    path = str(path)
    if not path.startswith("/"):
        raise ValueError(f"guest paths are absolute, got {path!r}")
    return path


class Files:
    """sandbox.files: every method takes absolute guest paths."""

    def __init__(self, sandbox):
        self.sandbox = sandbox

    @property
    def _t(self):
        return self.sandbox.client.transport

    def _q(self, path, **more):
        q = {"path": _guest_path(path)}
        q.update(more)
        q.update(self.sandbox._resume_q())
        return q

    def _route(self, tail=""):
        return f"{self.sandbox._path()}/files{tail}"

    # ---- single files

    def read(self, path):
        """GET .../files?path=: the file's bytes."""
        with self.open_read(path) as s:
            return s.read()

    def read_text(self, path, encoding="utf-8", errors="strict"):
        return self.read(path).decode(encoding, errors)

    def open_read(self, path):
        """GET .../files?path= as a stream: read(n) or iterate chunks; close it."""
        return self._t.bytes_stream("GET", self._route(), query=self._q(path))

    def write(self, path, data, mode=0o644):
        """PUT .../files?path=&mode=: bytes, text (UTF-8) or a binary file
        object (streamed). The parent directory must exist. Returns
        {"path", "size"}."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data)
        else:
            try:
                size = os.fstat(data.fileno()).st_size - data.tell()
                headers["Content-Length"] = str(size)
            except (AttributeError, OSError, io.UnsupportedOperation):
                pass  # sent chunked
        return self._t.request("PUT", self._route(), query=self._q(path, mode=f"{mode:o}"), data=data,
                               headers=headers).json()

    def write_text(self, path, text, encoding="utf-8", mode=0o644):
        return self.write(path, text.encode(encoding), mode=mode)

    # ---- metadata and directories

    def stat(self, path):
        """GET .../files/stat: {"name","type","size","mode","uid","gid","mtime_ms","target"}
        (symlinks are not followed)."""
        return self._t.request("GET", self._route("/stat"), query=self._q(path)).json()

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def list(self, path):
        """GET .../files/list: the directory's entries (stat objects)."""
        return self._t.request("GET", self._route("/list"), query=self._q(path)).json()["entries"]

    def mkdir(self, path, parents=True, mode=0o755):
        """POST .../files/mkdir. With parents, an existing directory is fine."""
        try:
            self._t.request("POST", self._route("/mkdir"), query=self.sandbox._resume_q(),
                            json={"path": _guest_path(path), "parents": bool(parents), "mode": int(mode)})
        except Conflict:
            if not parents or self.stat(path).get("type") != "dir":
                raise

    def remove(self, path, recursive=False):
        """POST .../files/remove."""
        self._t.request("POST", self._route("/remove"), query=self.sandbox._resume_q(),
                        json={"path": _guest_path(path), "recursive": bool(recursive)})

    def rename(self, path, to):
        """POST .../files/rename."""
        self._t.request("POST", self._route("/rename"), query=self.sandbox._resume_q(),
                        json={"path": _guest_path(path), "to": _guest_path(to)})

    # ---- trees (tar archives)

    def upload(self, local_path, guest_dir, name=None):
        """PUT .../archive: copies a local file or directory tree into
        guest_dir (made if missing) as guest_dir/<name or its basename>.
        Returns that guest path."""
        local_path = os.fspath(local_path)
        name = name or os.path.basename(os.path.normpath(local_path))
        if not name or name in (".", "..") or "/" in name:
            raise ValueError(f"cannot name the uploaded tree {name!r}")
        self.mkdir(guest_dir, parents=True)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_MAX) as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.GNU_FORMAT) as tar:
                tar.add(local_path, arcname=name)
            size = spool.tell()
            spool.seek(0)
            self.upload_archive(guest_dir, spool, size)
        return posixpath.join(guest_dir, name)

    def upload_archive(self, guest_dir, archive, size=None):
        """PUT .../archive?path=: a tar stream (bytes or a file object)
        extracted into guest_dir."""
        headers = {"Content-Type": "application/x-tar"}
        if size is not None:
            headers["Content-Length"] = str(size)
        if isinstance(archive, (bytes, bytearray)):
            archive = bytes(archive)
            headers["Content-Length"] = str(len(archive))
        elif size is None:
            # http.client sends a file object chunked; read it whole instead
            archive = archive.read()
            headers["Content-Length"] = str(len(archive))
        self._t.request("PUT", f"{self.sandbox._path()}/archive", query=self._q(guest_dir), data=archive,
                        headers=headers)

    def download_archive(self, guest_path):
        """GET .../archive?path=: the tar stream of a file or directory (a
        ByteStream; close it). Its entries come from the guest: hostile."""
        return self._t.bytes_stream("GET", f"{self.sandbox._path()}/archive", query=self._q(guest_path))

    def download(self, guest_path, local_dir):
        """Copies a guest file or directory tree into local_dir (made if
        missing) as local_dir/<its basename>; returns that local path.
        Entries are checked: no absolute names, no "..", links only inside
        local_dir, no devices; permissions are kept to rwx bits."""
        local_dir = os.fspath(local_dir)
        os.makedirs(local_dir, exist_ok=True)
        top = posixpath.basename(posixpath.normpath(_guest_path(guest_path)))
        with self.download_archive(guest_path) as stream:
            try:
                with tarfile.open(fileobj=stream, mode="r|") as tar:
                    for member in tar:
                        _extract_checked(tar, member, local_dir)
            except tarfile.TarError as e:
                raise ProtocolError(f"the archive of {guest_path} is not a valid tar stream: {e}") from None
        return os.path.join(local_dir, top)


def _inside(root, path):
    root = os.path.realpath(root)
    path = os.path.realpath(path)
    return path == root or path.startswith(root + os.sep)


def _extract_checked(tar, member, dest):
    """SECURITY: the archive is made by tar in the guest; every entry is
    hostile. Names must be relative without "..", the place written to
    (after the symlinks already extracted) must be inside dest, a link's
    target must resolve inside dest, and only files, directories and links
    are made (no devices, fifos, setuid bits or owners)."""
    name = member.name
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts or not parts:
        raise ProtocolError(f"the archive has an entry named {name!r} (absolute or with ..); nothing "
                            "past it was extracted")
    target = os.path.join(dest, *parts)
    if not _inside(dest, os.path.dirname(target)):
        raise ProtocolError(f"the archive's entry {name!r} would be written outside {dest} (through a link)")
    if member.issym() or member.islnk():
        link = member.linkname
        base = os.path.dirname(target) if member.issym() else dest
        if link.startswith("/") or not _inside(dest, os.path.join(base, link)):
            raise ProtocolError(f"the archive's link {name!r} -> {link!r} points outside {dest}")
    elif not (member.isfile() or member.isdir()):
        return  # devices, fifos: skipped
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
        os.unlink(target)  # never write through a link an earlier entry made
    member.mode &= 0o777
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    if member.isdir():
        os.makedirs(target, exist_ok=True)
        os.chmod(target, member.mode | 0o700)
        return
    if member.issym():
        os.symlink(member.linkname, target)
        return
    if member.islnk():
        shutil.copyfile(os.path.join(dest, member.linkname), target)
        return
    src = tar.extractfile(member)
    with open(target, "wb") as out:
        shutil.copyfileobj(src, out)
    os.chmod(target, member.mode)
