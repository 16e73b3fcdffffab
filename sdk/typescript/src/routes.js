// SPDX-License-Identifier: Apache-2.0
// Every route of docs/api/openapi.yaml and the SDK method that calls it.
// The SDK sends requests only through these keys (client.js refuses any other),
// and tests/integration/test_sdk_typescript.py checks this table against the
// spec and `airlockd --print-routes`: a route without a method here fails the
// test unless it is in EXCLUDED with a reason (paths under /e2b/ are E2B's API,
// not Airlock's: docs/e2b.md).

export const ROUTES = {
  "GET /healthz": "Airlock.prototype.health",
  "GET /metrics": "Airlock.prototype.prometheusMetrics",
  "GET /v1/ca": "Airlock.prototype.ca",
  "GET /v1/sandboxes": "Sandbox.list",
  "POST /v1/sandboxes": "Sandbox.create",
  "GET /v1/sandboxes/{id}": "Sandbox.get",
  "DELETE /v1/sandboxes/{id}": "Sandbox.prototype.kill",
  "POST /v1/sandboxes/{id}/exec": "Sandbox.prototype.exec",
  "GET /v1/sandboxes/{id}/metrics": "Sandbox.prototype.metrics",
  "GET /v1/sandboxes/{id}/ports": "Sandbox.prototype.ports",
  "PUT /v1/sandboxes/{id}/ports/{port}": "Sandbox.prototype.expose",
  "DELETE /v1/sandboxes/{id}/ports/{port}": "Sandbox.prototype.unexpose",
  "GET /v1/sandboxes/{id}/ports/{port}/connect": "Sandbox.prototype.connectPort",
  "POST /v1/sandboxes/{id}/pause": "Sandbox.prototype.pause",
  "POST /v1/sandboxes/{id}/resume": "Sandbox.prototype.resume",
  "POST /v1/sandboxes/{id}/snapshots": "Sandbox.prototype.snapshot",
  "POST /v1/sandboxes/{id}/fork": "Sandbox.prototype.fork",
  "POST /v1/sandboxes/{id}/recover": "Sandbox.prototype.recover",
  "POST /v1/sandboxes/{id}/timeout": "Sandbox.prototype.setTimeout",
  "GET /v1/sandboxes/{id}/network": "Sandbox.prototype.getNetwork",
  "PUT /v1/sandboxes/{id}/network": "Sandbox.prototype.setNetwork",
  "POST /v1/sandboxes/{id}/processes": "Processes.prototype.start",
  "GET /v1/sandboxes/{id}/processes": "Processes.prototype.list",
  "GET /v1/sandboxes/{id}/processes/{pid}": "Process.prototype.refresh",
  "GET /v1/sandboxes/{id}/processes/{pid}/output": "Process.prototype.output",
  "POST /v1/sandboxes/{id}/processes/{pid}/stdin": "Process.prototype.writeStdin",
  "POST /v1/sandboxes/{id}/processes/{pid}/signal": "Process.prototype.signal",
  "POST /v1/sandboxes/{id}/processes/{pid}/resize": "Process.prototype.resize",
  "GET /v1/sandboxes/{id}/processes/{pid}/wait": "Process.prototype.wait",
  "GET /v1/sandboxes/{id}/processes/{pid}/attach": "Process.prototype.attach",
  "GET /v1/sandboxes/{id}/files": "Files.prototype.read",
  "PUT /v1/sandboxes/{id}/files": "Files.prototype.write",
  "GET /v1/sandboxes/{id}/files/stat": "Files.prototype.stat",
  "GET /v1/sandboxes/{id}/files/list": "Files.prototype.list",
  "POST /v1/sandboxes/{id}/files/mkdir": "Files.prototype.mkdir",
  "POST /v1/sandboxes/{id}/files/remove": "Files.prototype.remove",
  "POST /v1/sandboxes/{id}/files/rename": "Files.prototype.rename",
  "GET /v1/sandboxes/{id}/archive": "Files.prototype.download",
  "PUT /v1/sandboxes/{id}/archive": "Files.prototype.upload",
  "GET /v1/snapshots": "Snapshot.list",
  "GET /v1/snapshots/{id}": "Snapshot.get",
  "DELETE /v1/snapshots/{id}": "Snapshot.prototype.delete",
  "POST /v1/tokens": "Tokens.prototype.create",
  "GET /v1/tokens": "Tokens.prototype.list",
  "DELETE /v1/tokens/{id}": "Tokens.prototype.revoke",
  "PUT /v1/tenants/{name}": "Tenants.prototype.setQuotas",
  "GET /v1/tenants/{name}": "Tenants.prototype.get",
  "GET /v1/pools": "Pools.prototype.list",
  "PUT /v1/pools": "Pools.prototype.set",
  "GET /v1/events": "Airlock.prototype.events",
  "POST /v1/secrets": "Secrets.prototype.set",
  "GET /v1/secrets": "Secrets.prototype.list",
  "GET /v1/secrets/{name}": "Secrets.prototype.get",
  "DELETE /v1/secrets/{name}": "Secrets.prototype.delete",
  "GET /v1/templates": "Templates.prototype.list",
  "POST /v1/templates": "Templates.prototype.build",
  "GET /v1/templates/{name}": "Templates.prototype.get",
  "DELETE /v1/templates/{name}": "Templates.prototype.delete",
  "POST /v1/templates/import": "Templates.prototype.import",
};

/** Routes of the spec deliberately left without a method: "METHOD /path" → why. */
export const EXCLUDED = {
  "POST /v1/cluster/sandboxes/{id}/adopt":
    "cluster mode's node route for airlock-api, the front (docs/cluster.md): clients resume through the front",
};

/** Path prefixes that are not Airlock's API (E2B's compatibility API, docs/e2b.md). */
export const FOREIGN_PREFIXES = ["/e2b/"];
