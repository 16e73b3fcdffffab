# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 to airlockd with the standard library: over its unix socket (the
operator's interface, no token) or its TCP listener (a bearer token), plain
answers, streamed JSON lines, and the PTY's HTTP Upgrade."""
import http.client
import json
import os
import socket
import ssl
import urllib.parse

from .errors import ConnectionFailed, ProtocolError, error_from

DEFAULT_SOCKET = "/run/airlock/airlockd.sock"
# Ordinary requests: a create waits for a boot (and for a start slot), so
# this bounds a hang rather than timing anything.
DEFAULT_TIMEOUT_S = 600.0
# SECURITY: the daemon is trusted, but a broken answer must not make the SDK
# hold unbounded memory: a JSON line and an answer head have a ceiling.
LINE_MAX = 64 << 20
HEAD_MAX = 16 << 10
ERROR_BODY_MAX = 1 << 20
# timeout= not given: the Transport's own. None: wait for ever (streams).
DEFAULT = object()


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def parse_host(spec):
    """tcp://HOST:PORT, http://HOST:PORT, https://HOST:PORT or HOST:PORT ->
    (scheme, host, port); IPv6 addresses in brackets."""
    if "://" not in spec:
        spec = "tcp://" + spec
    u = urllib.parse.urlsplit(spec)
    if u.scheme not in ("tcp", "http", "https") or not u.hostname or (u.path not in ("", "/")):
        raise ValueError(f"AIRLOCK_HOST / host= takes tcp://ADDR:PORT, http://ADDR:PORT or https://ADDR:PORT, "
                         f"got {spec!r}")
    try:
        port = u.port
    except ValueError:
        port = None
    if port is None:
        if u.scheme == "tcp":
            raise ValueError(f"host {spec!r} names no port (e.g. tcp://127.0.0.1:7070)")
        port = 443 if u.scheme == "https" else 80
    return ("https" if u.scheme == "https" else "http"), u.hostname, port


def _retry_after(headers):
    v = headers.get("Retry-After") if headers is not None else None
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def raise_for_answer(status, headers, data, what):
    """Raises the typed error of an API error answer."""
    code, message = None, None
    try:
        err = json.loads(data)["error"]
        code, message = err.get("code"), err.get("message")
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    if not message:
        text = data[:2000].decode("utf-8", "replace").strip() if data else ""
        message = f"{what}: HTTP {status}" + (f": {text}" if text else "")
    raise error_from(code, message, status=status, retry_after=_retry_after(headers), body=data)


class Answer:
    """A complete answer: status, headers (case-insensitive), body bytes."""

    def __init__(self, status, headers, data):
        self.status = status
        self.headers = headers
        self.data = data

    def json(self):
        try:
            return json.loads(self.data) if self.data else None
        except ValueError as e:
            raise ProtocolError(f"the daemon answered {self.status} with a body that is not JSON: {e}",
                                status=self.status, body=self.data) from None


class LineStream:
    """A streamed answer of JSON lines (application/x-ndjson): iterate for
    dicts; close() (or leaving a with block) disconnects."""

    def __init__(self, conn, resp):
        self._conn = conn
        self._resp = resp
        self.headers = resp.headers

    def __iter__(self):
        return self

    def __next__(self):
        if self._resp is None:
            raise StopIteration
        try:
            raw = self._resp.readline(LINE_MAX + 1)
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise ProtocolError(f"the stream broke: {e}") from None
        if not raw:
            self.close()
            raise StopIteration
        if not raw.endswith(b"\n"):
            self.close()
            raise ProtocolError("the stream ended in the middle of a line (or sent a line above "
                                f"{LINE_MAX} bytes)")
        try:
            return json.loads(raw)
        except ValueError as e:
            self.close()
            raise ProtocolError(f"the stream sent a line that is not JSON: {e}") from None

    def close(self):
        conn, self._conn, self._resp = self._conn, None, None
        if conn is not None:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ByteStream:
    """A streamed binary answer (a file, a tar archive): read(n) / iterate
    chunks; close() disconnects."""

    def __init__(self, conn, resp):
        self._conn = conn
        self._resp = resp
        self.headers = resp.headers

    def read(self, n=-1):
        if self._resp is None:
            return b""
        try:
            return self._resp.read() if n is None or n < 0 else self._resp.read(n)
        except http.client.IncompleteRead as e:
            raise ProtocolError(f"the transfer was cut after {len(e.partial)} more bytes (the guest or "
                                "the daemon failed while it streamed)") from None

    def __iter__(self):
        while True:
            chunk = self.read(65536)
            if not chunk:
                return
            yield chunk

    def close(self):
        LineStream.close(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Transport:
    """Connection settings and the requests themselves. One connection per
    request, so one Transport may be used from several threads."""

    def __init__(self, socket_path=None, host=None, token=None, timeout=DEFAULT_TIMEOUT_S):
        if socket_path and host:
            raise ValueError("socket_path and host name two daemons; give one")
        if host is None and socket_path is None:
            host = os.environ.get("AIRLOCK_HOST") or None
        if token is None:
            token = os.environ.get("AIRLOCK_TOKEN") or None
        if token is not None and ("\r" in token or "\n" in token):
            raise ValueError("the token must be one line")
        self.token = token
        self.timeout = timeout
        if host:
            self.scheme, self.host, self.port = parse_host(host)
            self.socket_path = None
        else:
            self.scheme, self.host, self.port = None, None, None
            self.socket_path = socket_path or os.environ.get("AIRLOCK_SOCKET") or DEFAULT_SOCKET
        # Called with (method, path) before each request (tests record the
        # routes the SDK reaches with it).
        self.on_request = None

    @property
    def is_admin(self):
        """True over the unix socket (the operator's interface)."""
        return self.socket_path is not None

    def describe(self):
        if self.socket_path:
            return self.socket_path
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{h}:{self.port}"

    def _hint(self):
        if self.socket_path:
            return (f"is airlockd running with --socket {self.socket_path}? Point socket_path= or "
                    "AIRLOCK_SOCKET at its socket, or host= / AIRLOCK_HOST at its TCP listener")
        return "is airlockd listening there (airlockd --listen ADDR:PORT)? Check host= / AIRLOCK_HOST"

    def _connection(self, timeout):
        if self.socket_path:
            return _UnixHTTPConnection(self.socket_path, timeout)
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _headers(self, extra):
        h = {"Host": "localhost"} if self.socket_path else {}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(extra or {})
        return h

    @staticmethod
    def url(path, query=None):
        if not query:
            return path
        items = []
        for k, v in query.items():
            if v is None:
                continue
            if isinstance(v, bool):
                v = "true" if v else "false"
            for one in v if isinstance(v, (list, tuple)) else [v]:  # a repeated parameter
                items.append((k, str(one)))
        return path + ("?" + urllib.parse.urlencode(items) if items else "")

    def _send(self, method, path, query, json_body, data, headers, timeout):
        """Sends a request; returns (conn, resp) with the answer's head read."""
        if self.on_request is not None:
            self.on_request(method, path)
        hdrs = {}
        if json_body is not None:
            data = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        elif data is not None:
            hdrs["Content-Type"] = "application/octet-stream"
        hdrs.update(headers or {})
        conn = self._connection(self.timeout if timeout is DEFAULT else timeout)
        try:
            conn.request(method, self.url(path, query), body=data, headers=self._headers(hdrs),
                         encode_chunked=data is not None and not isinstance(data, (bytes, bytearray))
                         and "Content-Length" not in hdrs)
            resp = conn.getresponse()
        except (FileNotFoundError, ConnectionRefusedError) as e:
            conn.close()
            raise ConnectionFailed(f"cannot reach airlockd at {self.describe()} ({e.strerror or e}); "
                                   f"{self._hint()}") from None
        except (BrokenPipeError, ConnectionResetError):
            # The daemon may answer (413, 401) and close before it read the
            # whole body: its answer is still there to read.
            try:
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise ConnectionFailed(f"airlockd at {self.describe()} closed the connection: {e}") from None
        except socket.timeout:
            conn.close()
            raise ConnectionFailed(f"airlockd at {self.describe()} did not answer {method} {path} within "
                                   f"{conn.timeout} s") from None
        except (OSError, ssl.SSLError, http.client.HTTPException) as e:
            conn.close()
            raise ConnectionFailed(f"{method} {path} to airlockd at {self.describe()} failed: {e}") from None
        return conn, resp

    def request(self, method, path, query=None, json=None, data=None, headers=None, timeout=DEFAULT, ok=None):
        """A complete request; raises the typed error unless the status is 2xx
        (or in ok)."""
        conn, resp = self._send(method, path, query, json, data, headers, timeout)
        try:
            try:
                body = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise ConnectionFailed(f"{method} {path}: the answer broke off: {e}") from None
            if not (200 <= resp.status < 300 or (ok and resp.status in ok)):
                raise_for_answer(resp.status, resp.headers, body, f"{method} {path}")
            return Answer(resp.status, resp.headers, body)
        finally:
            conn.close()

    def _open(self, method, path, query, json_body, data, headers, timeout):
        conn, resp = self._send(method, path, query, json_body, data, headers, timeout)
        if not 200 <= resp.status < 300:
            try:
                body = resp.read(ERROR_BODY_MAX)
            finally:
                conn.close()
            raise_for_answer(resp.status, resp.headers, body, f"{method} {path}")
        return conn, resp

    def lines(self, method, path, query=None, json=None, timeout=None, data=None, headers=None):
        """A streamed JSON-lines answer (LineStream). The default timeout is
        none: a followed stream may be silent for as long as it likes; a
        number bounds each wait for the next bytes. data: a body (bytes, or
        an iterable of bytes sent chunked)."""
        return LineStream(*self._open(method, path, query, json, data, headers, timeout))

    def bytes_stream(self, method, path, query=None, timeout=DEFAULT):
        return ByteStream(*self._open(method, path, query, None, None, None, timeout))

    def upgrade(self, path, protocol, query=None, timeout=DEFAULT):
        """GET path with `Connection: Upgrade`; returns (socket, bytes already
        read past the 101 answer's head)."""
        if self.on_request is not None:
            self.on_request("GET", path)
        timeout = self.timeout if timeout is DEFAULT else timeout
        try:
            if self.socket_path:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(self.socket_path)
            else:
                sock = socket.create_connection((self.host, self.port), timeout=timeout)
                if self.scheme == "https":
                    sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise ConnectionFailed(f"cannot reach airlockd at {self.describe()} ({e.strerror or e}); "
                                   f"{self._hint()}") from None
        hdrs = self._headers({"Connection": "Upgrade", "Upgrade": protocol})
        if "Host" not in hdrs:
            hdrs["Host"] = f"{self.host}:{self.port}"
        req = f"GET {self.url(path, query)} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
        try:
            sock.sendall((req + "\r\n").encode("latin-1"))
            buf = b""
            while b"\r\n\r\n" not in buf:
                if len(buf) > HEAD_MAX:
                    raise ProtocolError(f"the answer to the upgrade has a head above {HEAD_MAX} bytes")
                chunk = sock.recv(65536)
                if not chunk:
                    raise ProtocolError("the daemon closed the connection before it answered the upgrade")
                buf += chunk
        except BaseException:
            sock.close()
            raise
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if status == 101:
            return sock, rest
        headers = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        length = int(headers.get("Content-Length", "0") or 0) if headers.get("Content-Length", "").isdigit() else 0
        try:
            while len(rest) < min(length, ERROR_BODY_MAX):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
        except OSError:
            pass
        sock.close()
        raise_for_answer(status, headers, rest, f"GET {path} (upgrade to {protocol})")
