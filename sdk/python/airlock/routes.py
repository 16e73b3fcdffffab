# SPDX-License-Identifier: Apache-2.0
"""Which SDK method calls each route of docs/api/openapi.yaml. The tests
(tests/integration/test_sdk_python.py) check that this table names exactly
the spec's routes, that each method exists, and that a real run reaches
every route; a route the SDK leaves out must be in EXCLUDED with the reason
(README.md, "Coverage")."""

ROUTES = {
    ("GET", "/healthz"): "Client.health",
    ("GET", "/metrics"): "Client.metrics",
    ("GET", "/v1/sandboxes"): "Sandbox.list",
    ("POST", "/v1/sandboxes"): "Sandbox.create",
    ("GET", "/v1/sandboxes/{id}"): "Sandbox.get",
    ("DELETE", "/v1/sandboxes/{id}"): "Sandbox.delete",
    ("POST", "/v1/sandboxes/{id}/pause"): "Sandbox.pause",
    ("POST", "/v1/sandboxes/{id}/resume"): "Sandbox.resume",
    ("POST", "/v1/sandboxes/{id}/snapshots"): "Sandbox.snapshot",
    ("POST", "/v1/sandboxes/{id}/fork"): "Sandbox.fork",
    ("POST", "/v1/sandboxes/{id}/recover"): "Sandbox.recover",
    ("POST", "/v1/sandboxes/{id}/timeout"): "Sandbox.set_timeout",
    ("GET", "/v1/sandboxes/{id}/network"): "Sandbox.get_network",
    ("PUT", "/v1/sandboxes/{id}/network"): "Sandbox.set_network",
    ("POST", "/v1/sandboxes/{id}/exec"): "Sandbox.exec",
    ("GET", "/v1/sandboxes/{id}/metrics"): "Sandbox.metrics",
    ("GET", "/v1/sandboxes/{id}/ports"): "Sandbox.ports",
    ("PUT", "/v1/sandboxes/{id}/ports/{port}"): "Sandbox.expose",
    ("DELETE", "/v1/sandboxes/{id}/ports/{port}"): "Sandbox.unexpose",
    ("GET", "/v1/sandboxes/{id}/ports/{port}/connect"): "Sandbox.connect_port",
    ("POST", "/v1/sandboxes/{id}/processes"): "Sandbox.start",
    ("GET", "/v1/sandboxes/{id}/processes"): "Sandbox.processes",
    ("GET", "/v1/sandboxes/{id}/processes/{pid}"): "Process.refresh",
    ("GET", "/v1/sandboxes/{id}/processes/{pid}/output"): "Process.output",
    ("POST", "/v1/sandboxes/{id}/processes/{pid}/stdin"): "Process.write_stdin",
    ("POST", "/v1/sandboxes/{id}/processes/{pid}/signal"): "Process.signal",
    ("POST", "/v1/sandboxes/{id}/processes/{pid}/resize"): "Process.resize",
    ("GET", "/v1/sandboxes/{id}/processes/{pid}/wait"): "Process.wait",
    ("GET", "/v1/sandboxes/{id}/processes/{pid}/attach"): "Process.attach",
    ("GET", "/v1/sandboxes/{id}/files"): "Files.read",
    ("PUT", "/v1/sandboxes/{id}/files"): "Files.write",
    ("GET", "/v1/sandboxes/{id}/files/stat"): "Files.stat",
    ("GET", "/v1/sandboxes/{id}/files/list"): "Files.list",
    ("POST", "/v1/sandboxes/{id}/files/mkdir"): "Files.mkdir",
    ("POST", "/v1/sandboxes/{id}/files/remove"): "Files.remove",
    ("POST", "/v1/sandboxes/{id}/files/rename"): "Files.rename",
    ("GET", "/v1/sandboxes/{id}/archive"): "Files.download",
    ("PUT", "/v1/sandboxes/{id}/archive"): "Files.upload",
    ("GET", "/v1/snapshots"): "Snapshots.list",
    ("GET", "/v1/snapshots/{id}"): "Snapshots.get",
    ("DELETE", "/v1/snapshots/{id}"): "Snapshots.delete",
    ("POST", "/v1/tokens"): "Tokens.create",
    ("GET", "/v1/tokens"): "Tokens.list",
    ("DELETE", "/v1/tokens/{id}"): "Tokens.revoke",
    ("PUT", "/v1/tenants/{name}"): "Tenants.set_quotas",
    ("GET", "/v1/tenants/{name}"): "Tenants.get",
    ("GET", "/v1/pools"): "Pools.list",
    ("PUT", "/v1/pools"): "Pools.set",
    ("GET", "/v1/events"): "Client.events",
    ("POST", "/v1/secrets"): "Secrets.set",
    ("GET", "/v1/secrets"): "Secrets.list",
    ("GET", "/v1/secrets/{name}"): "Secrets.get",
    ("DELETE", "/v1/secrets/{name}"): "Secrets.delete",
    ("GET", "/v1/ca"): "Client.ca",
    ("GET", "/v1/templates"): "Templates.list",
    ("POST", "/v1/templates"): "Templates.build",
    ("GET", "/v1/templates/{name}"): "Templates.get",
    ("DELETE", "/v1/templates/{name}"): "Templates.delete",
    ("POST", "/v1/templates/import"): "Templates.import_",
}

# Routes of the spec the SDK does not call, with the reason. Paths under
# /e2b/ are not in the spec (E2B's API, docs/e2b.md) and not in this SDK.
EXCLUDED = {
    ("POST", "/v1/cluster/sandboxes/{id}/adopt"): "cluster mode's node route for airlock-api, the front (docs/cluster.md): clients resume through the front",
}
