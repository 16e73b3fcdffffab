# SPDX-License-Identifier: Apache-2.0
"""The Client: the connection to airlockd and what is not one sandbox's
(snapshots, secrets, tokens, tenants, warm pools, templates, events, metrics,
health, the CA)."""
import urllib.parse

from ._http import DEFAULT_TIMEOUT_S, Transport
from ._record import Record
from .sandbox import Sandbox
from .templates import Templates


def _seg(s):
    return urllib.parse.quote(str(s), safe="")


class Snapshot(Record):
    """A snapshot (memory, device state and disk of a sandbox at one
    moment). .id, .name, .sandbox_id, ... from .data."""

    def __init__(self, client, data):
        self.client = client
        self.data = data

    def __repr__(self):
        return f"Snapshot({self.data.get('id')!r}, name={self.data.get('name')!r})"

    def restore(self, **create_args):
        """A new sandbox in the snapshot's state (POST /v1/sandboxes with
        snapshot); takes Sandbox.create's env, metadata, secrets, network,
        timeouts."""
        return Sandbox.create(snapshot=self.id, client=self.client, **create_args)

    def delete(self):
        self.client.snapshots.delete(self.id)


class Snapshots:
    """client.snapshots"""

    def __init__(self, client):
        self._c = client

    def list(self, sandbox=None):
        """GET /v1/snapshots, newest first (sandbox=ID: only its snapshots)."""
        j = self._c.transport.request("GET", "/v1/snapshots", query={"sandbox": sandbox}).json()
        return [Snapshot(self._c, s) for s in j["snapshots"]]

    def get(self, snapshot_id):
        """GET /v1/snapshots/{id}"""
        return Snapshot(self._c, self._c.transport.request("GET", f"/v1/snapshots/{_seg(snapshot_id)}").json())

    def delete(self, snapshot_id):
        """DELETE /v1/snapshots/{id}"""
        self._c.transport.request("DELETE", f"/v1/snapshots/{_seg(snapshot_id)}")


class Secrets:
    """client.secrets: write-only credentials; answers never hold a value.
    tenant= only over the unix socket (a token has its own)."""

    def __init__(self, client):
        self._c = client

    def set(self, name, value, hosts, paths=None, methods=None, header=None, format=None, headers=None,
            tenant=None):
        """POST /v1/secrets: creates or rotates (same name) a secret bound to
        hosts; returns the secret object (without its value)."""
        body = {"name": name, "value": value, "hosts": list(hosts), "paths": paths, "methods": methods,
                "header": header, "format": format, "headers": headers, "tenant": tenant}
        return self._c.transport.request("POST", "/v1/secrets",
                                         json={k: v for k, v in body.items() if v is not None}).json()

    def list(self, tenant=None):
        """GET /v1/secrets"""
        return self._c.transport.request("GET", "/v1/secrets", query={"tenant": tenant}).json()["secrets"]

    def get(self, name, tenant=None):
        """GET /v1/secrets/{name}"""
        return self._c.transport.request("GET", f"/v1/secrets/{_seg(name)}", query={"tenant": tenant}).json()

    def delete(self, name, tenant=None):
        """DELETE /v1/secrets/{name}: sandboxes lose the binding at once."""
        self._c.transport.request("DELETE", f"/v1/secrets/{_seg(name)}", query={"tenant": tenant})


class Tokens:
    """client.tokens (operator only: the unix socket)."""

    def __init__(self, client):
        self._c = client

    def create(self, tenant, description=""):
        """POST /v1/tokens: {"id","tenant","description","created_at","token"};
        the token itself is shown only here."""
        return self._c.transport.request("POST", "/v1/tokens",
                                         json={"tenant": tenant, "description": description}).json()

    def list(self):
        """GET /v1/tokens (without secrets, revoked ones too)."""
        return self._c.transport.request("GET", "/v1/tokens").json()["tokens"]

    def revoke(self, token_id):
        """DELETE /v1/tokens/{id}: the token stops working at once."""
        self._c.transport.request("DELETE", f"/v1/tokens/{_seg(token_id)}")


class Tenants:
    """client.tenants: quotas (set: operator only) and usage."""

    def __init__(self, client):
        self._c = client

    def get(self, name):
        """GET /v1/tenants/{name}: {"name","quotas","usage"}."""
        return self._c.transport.request("GET", f"/v1/tenants/{_seg(name)}").json()

    def set_quotas(self, name, max_sandboxes=None, max_vcpus=None, max_memory_mib=None, max_snapshot_mib=None):
        """PUT /v1/tenants/{name}: replaces the quotas (None or 0: unlimited)."""
        body = {"max_sandboxes": max_sandboxes, "max_vcpus": max_vcpus, "max_memory_mib": max_memory_mib,
                "max_snapshot_mib": max_snapshot_mib}
        return self._c.transport.request("PUT", f"/v1/tenants/{_seg(name)}",
                                         json={k: v for k, v in body.items() if v is not None}).json()


class Pools:
    """client.pools: warm pools, VMs of one shape restored and paused ahead
    of creates (docs/api.md, "Warm pools"). A token sets only its tenant's
    own pool; the unix socket sets shared ones, or a tenant's with tenant=."""

    def __init__(self, client):
        self._c = client

    def list(self):
        """GET /v1/pools: {"pools": [{"tenant","template","vcpus","memory_mib",
        "size","ready","filling","pss_bytes","counts",...}], "ready",
        "pss_bytes", "host_memory"}."""
        return self._c.transport.request("GET", "/v1/pools").json()

    def set(self, template, size, vcpus=None, memory_mib=None, tenant=None):
        """PUT /v1/pools: keep size VMs of (template, vcpus (default 1),
        memory_mib (default 256)) ready; 0 removes the pool. Returns the
        listing, as list()."""
        body = {"template": template, "size": size, "vcpus": vcpus, "memory_mib": memory_mib, "tenant": tenant}
        return self._c.transport.request("PUT", "/v1/pools",
                                         json={k: v for k, v in body.items() if v is not None}).json()


class EventStream:
    """GET /v1/events as an iterator of event dicts ({"seq","time","type",
    "tenant","sandbox","data"}); with follow it waits for new ones until
    close(). .last_seq is the seq of the last event read."""

    def __init__(self, lines):
        self._lines = lines
        self.last_seq = None

    def __iter__(self):
        return self

    def __next__(self):
        ev = next(self._lines)
        self.last_seq = ev.get("seq", self.last_seq)
        return ev

    def close(self):
        self._lines.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def parse_metrics(text):
    """Prometheus text -> {'name{labels}': value} (comments skipped)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            try:
                out[series] = float(value)
            except ValueError:
                continue
    return out


class Client:
    """The connection to airlockd. Without arguments it reads the
    environment the CLI reads: AIRLOCK_HOST (tcp://ADDR:PORT, http://...,
    https://...) with AIRLOCK_TOKEN, else AIRLOCK_SOCKET, else
    /run/airlock/airlockd.sock. socket_path= / host= / token= override it."""

    def __init__(self, socket_path=None, host=None, token=None, timeout=DEFAULT_TIMEOUT_S):
        self.transport = Transport(socket_path=socket_path, host=host, token=token, timeout=timeout)
        self.snapshots = Snapshots(self)
        self.secrets = Secrets(self)
        self.tokens = Tokens(self)
        self.tenants = Tenants(self)
        self.pools = Pools(self)
        self.templates = Templates(self)

    def __repr__(self):
        return f"Client({self.transport.describe()!r})"

    # Sandboxes through this client.
    def create_sandbox(self, **kw):
        return Sandbox.create(client=self, **kw)

    def sandbox(self, sandbox_id):
        return Sandbox.get(sandbox_id, client=self)

    def connect(self, sandbox_id):
        return Sandbox.connect(sandbox_id, client=self)

    def sandboxes(self, all=False, metadata=None):
        return Sandbox.list(all=all, metadata=metadata, client=self)

    def health(self):
        """GET /healthz: {"status","version","backend","accel",...}."""
        return self.transport.request("GET", "/healthz").json()

    def ca(self):
        """GET /v1/ca: the Airlock CA's certificate (PEM text)."""
        return self.transport.request("GET", "/v1/ca").data.decode()

    def metrics(self, parse=False):
        """GET /metrics: the host's Prometheus text (operator only); with
        parse, a {series: value} dict."""
        text = self.transport.request("GET", "/metrics").data.decode()
        return parse_metrics(text) if parse else text

    def events(self, sandbox=None, type=None, since=None, follow=False, timeout=None):
        """GET /v1/events: an EventStream, oldest first; type is a prefix
        ("sandbox."); since the last seq seen (exclusive); follow=True
        waits for new events until the stream is closed. timeout bounds
        each wait for the next event (None: no bound; then ProtocolError)."""
        q = {"sandbox": sandbox, "type": type, "since": since, "follow": "true" if follow else None}
        return EventStream(self.transport.lines("GET", "/v1/events", query=q, timeout=timeout))
