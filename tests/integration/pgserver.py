# SPDX-License-Identifier: Apache-2.0
"""A private PostgreSQL server for tests (cluster mode, docs/cluster.md).

    from pgserver import PgServer

    with PgServer() as pg:              # or pg = PgServer(); pg.start(); ...; pg.stop()
        pg.conninfo                     # "host=127.0.0.1 port=N dbname=airlock user=postgres"
        pg.socket_conninfo              # the same database over its unix socket
        pg.sql("SELECT 1")              # psql -At: the rows as text lines

Debian's PostgreSQL 15 (/usr/lib/postgresql/15/bin: initdb, postgres; the
package `postgresql`, in scripts/deps.sh), in a fresh temporary directory
owned by the user `postgres` (the tests run as root; the server refuses to
run as root, so every command runs with `runuser -u postgres --`): trust
authentication, listening on 127.0.0.1 at a free port and on a unix socket in
that directory, no fsync (a test's data need not outlive it), a database
`airlock` made at start. stop() kills the server (SIGQUIT, then SIGKILL) and
removes the directory; the context manager calls it, as does a finalizer if
the test forgot. Nothing is installed or left behind; the machine's own
PostgreSQL cluster (if any) is never touched.

Environment: AIRLOCK_PG_BIN overrides the binaries' directory.
"""
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10
USER = "postgres"
DATABASE = "airlock"


def _pg_bin():
    env = os.environ.get("AIRLOCK_PG_BIN")
    if env:
        return env
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    preferred = "/usr/lib/postgresql/15/bin"
    if os.path.exists(os.path.join(preferred, "postgres")):
        return preferred
    if not found:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (make deps)")
    return os.path.dirname(found[-1])


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(argv, **kw):
    if os.geteuid() == 0:
        argv = ["runuser", "-u", USER, "--"] + argv
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _kill(proc, tmpdir):
    if proc and proc.poll() is None:
        try:
            # The server's whole session (runuser does not pass SIGQUIT on):
            # SIGQUIT is PostgreSQL's immediate shutdown.
            os.killpg(proc.pid, signal.SIGQUIT)
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            proc.wait()
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)


class PgServer:
    """One private PostgreSQL server: start(), .conninfo, sql(), stop()."""

    def __init__(self):
        self.bin = _pg_bin()
        self.dir = None
        self.port = None
        self.proc = None
        self.log_path = None
        self._finalizer = None

    @property
    def socket_dir(self):
        return os.path.join(self.dir, "sock")

    @property
    def conninfo(self):
        return f"host=127.0.0.1 port={self.port} dbname={DATABASE} user={USER} connect_timeout=5"

    @property
    def socket_conninfo(self):
        return f"host={self.socket_dir} port={self.port} dbname={DATABASE} user={USER}"

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="airlock-pg-")
        os.chmod(self.dir, 0o755)
        data, sock = os.path.join(self.dir, "data"), self.socket_dir
        os.mkdir(sock)
        self.log_path = os.path.join(self.dir, "postgres.log")
        if os.geteuid() == 0:
            shutil.chown(self.dir, USER)
            shutil.chown(sock, USER)
        _as_postgres([os.path.join(self.bin, "initdb"), "-D", data, "-U", USER, "--auth=trust", "-E", "UTF8",
                      "--locale=C", "--no-sync"])
        self.port = _free_port()
        argv = [os.path.join(self.bin, "postgres"), "-D", data, "-h", "127.0.0.1", "-p", str(self.port),
                "-k", sock, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200", "-c", "shared_buffers=32MB"]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", USER, "--"] + argv
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._finalizer = weakref.finalize(self, _kill, self.proc, self.dir)
        self._wait_ready()
        self.sql(f"CREATE DATABASE {DATABASE}", dbname="postgres")
        return self

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited ({self.proc.returncode}): {self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                r = subprocess.run(self._psql_argv("postgres") + ["-c", "SELECT 1"], capture_output=True,
                                   text=True)
                if r.returncode == 0:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"postgres did not start within {START_TIMEOUT_S} s: {self.log()}")

    def _psql_argv(self, dbname):
        return [os.path.join(self.bin, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                "-p", str(self.port), "-U", USER, "-d", dbname]

    def sql(self, statement, dbname=DATABASE):
        """Runs statement with psql; the rows as a list of lines ('|' between columns)."""
        r = subprocess.run(self._psql_argv(dbname) + ["-c", statement], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"psql: {statement}: {r.stderr.strip()}")
        return [line for line in r.stdout.split("\n") if line]

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self._finalizer:
            self._finalizer()
        self.proc = None
        self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
