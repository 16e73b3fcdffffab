# SPDX-License-Identifier: Apache-2.0
"""Shared by the E2B compatibility tests (test_e2b_*.py): an airlockd with a
TCP listener, a tenant token for it, and the environment E2B's SDK reads
(docs/e2b.md); and for the raw envd tests, a sandbox's envd access token
and Connect's envelopes. The SDK itself runs from tests/e2b
(test_e2b_sdk.py)."""
import base64
import hashlib
import hmac
import json
import os
import struct

from apiutil import ListeningDaemon, free_port
from conftest import ROOT

E2B_DIR = os.path.join(ROOT, "tests", "e2b")
TENANT = "e2b"
ENVD_TOKEN_PURPOSE = b"airlock e2b envd access token v1"
STREAM_CT = "application/connect+json"
END_STREAM = 0x02


class E2bDaemon(ListeningDaemon):
    """airlockd listening on 127.0.0.1:PORT, with a token of tenant TENANT
    (made by start()) and a second tenant's token for isolation checks; with
    proxy_port, its ports proxy on 127.0.0.1:PROXY_PORT (the default domain,
    localhost:PROXY_PORT, is what the SDK's getHost names)."""

    def __init__(self, base_dir, port, proxy_port=None, **kw):
        super().__init__(base_dir, port, **kw)
        self.proxy_port = proxy_port

    def argv(self):
        extra = ["--proxy-listen", f"127.0.0.1:{self.proxy_port}"] if self.proxy_port else []
        return super().argv() + extra

    def start(self, *a, **kw):
        super().start(*a, **kw)
        self.key = self._token(TENANT)
        self.other_key = self._token(TENANT + "-other")
        return self

    def _token(self, tenant):
        r = self.api.request("POST", "/v1/tokens", body={"tenant": tenant, "description": "e2b tests"})
        assert r.status == 201, r
        return r.json["token"]

    @property
    def api_url(self):
        return f"http://127.0.0.1:{self.port}/e2b"

    @property
    def sandbox_url(self):
        return f"http://127.0.0.1:{self.port}/e2b/envd"

    def sdk_env(self, template="base"):
        """What an E2B user sets: the two URLs and the key (nothing else)."""
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("E2B_"):
                del env[k]
        env.update(E2B_API_URL=self.api_url, E2B_SANDBOX_URL=self.sandbox_url, E2B_API_KEY=self.key,
                   AIRLOCK_E2B_TEMPLATE=template, AIRLOCK_E2B_OTHER_KEY=self.other_key)
        return env


def e2b_daemon_start(tmp_path_factory, name="airlockd-e2b", proxy=False):
    return E2bDaemon(tmp_path_factory.mktemp(name), free_port(), proxy_port=free_port() if proxy else None).start()


def e2b_daemon_stop(d):
    """The end of a module's daemon: no QEMU may be left behind."""
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


def envd_token(d, rec):
    """The envd access token of the sandbox rec ({"id", "tenant", ...}), made
    as airlockd makes it, from the daemon's secrets.key."""
    with open(os.path.join(d.state_dir, "secrets.key"), "rb") as f:
        key = f.read()
    msg = ENVD_TOKEN_PURPOSE + b"\0" + rec["tenant"].encode() + b"\0" + rec["id"].encode()
    return "ea_" + hmac.new(key, msg, hashlib.sha256).hexdigest()


def envd_headers(sid, token, content_type, extra=None):
    """The headers of an envd RPC: the sandbox, its token, Connect's."""
    h = {"E2b-Sandbox-Id": sid, "X-Access-Token": token, "Content-Type": content_type,
         "Connect-Protocol-Version": "1"}
    h.update(extra or {})
    return h


def basic_auth(user):
    """The header that names the user of an RPC, as the SDK sends it."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:".encode()).decode()}


def envelope(msg, flags=0):
    data = json.dumps(msg).encode() if not isinstance(msg, bytes) else msg
    return struct.pack(">BI", flags, len(data)) + data


class ConnectStream:
    """A server-streaming call's answer, read envelope by envelope."""

    def __init__(self, conn, resp):
        self.conn, self.resp = conn, resp
        self.status = resp.status
        self.content_type = resp.getheader("Content-Type", "")

    def next(self):
        """(flags, message) of the next envelope."""
        hdr = self.resp.read(5)
        assert len(hdr) == 5, f"the stream ended without an end-of-stream envelope ({hdr!r})"
        flags, n = struct.unpack(">BI", hdr)
        data = self.resp.read(n)
        assert len(data) == n
        return flags, json.loads(data)

    def close(self):
        self.conn.close()
