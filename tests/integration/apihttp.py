# SPDX-License-Identifier: Apache-2.0
"""HTTP to airlockd's API, standard library only: the connection over its
unix socket, a request's body, one request and its Response. conftest.py
builds its clients on these (and so apiutil.py and tests/security);
bench/benchlib.py uses the connection."""
import http.client
import json
import socket


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Response:
    def __init__(self, status, headers, raw, method, path):
        self.status = status
        self.headers = headers
        self.raw = raw
        self.method = method
        self.path = path
        try:
            self.json = json.loads(raw) if raw else None
        except ValueError:
            self.json = None

    def _error(self, field):
        try:
            return self.json["error"][field]
        except (TypeError, KeyError):
            return None

    @property
    def error_code(self):
        return self._error("code")

    @property
    def error_message(self):
        return self._error("message")

    def __repr__(self):
        text = self.raw[:2000].decode("utf-8", "replace")
        return f"<{self.method} {self.path} -> {self.status} {text}>"


def request_body(body=None, raw=None, headers=None, token=None):
    """(the bytes to send or None, the header fields): body as JSON (with
    its Content-Type), else raw as it is; token as a bearer token unless
    headers say otherwise."""
    hdrs = dict(headers or {})
    if token is not None:
        hdrs.setdefault("Authorization", f"Bearer {token}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    elif raw is not None:
        data = raw
    return data, hdrs


def exchange(conn, method, path, body=None, raw=None, headers=None, token=None):
    """One request on conn (an http.client connection, closed afterwards);
    the Response. body, raw, headers and token: as request_body."""
    data, hdrs = request_body(body, raw, headers, token)
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return Response(resp.status, dict(resp.getheaders()), resp.read(), method, path)
    finally:
        conn.close()
