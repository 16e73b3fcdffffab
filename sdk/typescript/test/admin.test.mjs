// SPDX-License-Identifier: Apache-2.0
// The operator's routes over the unix socket: health, metrics, CA, tokens,
// tenants, warm pools, secrets, events.
import { describe, it, before } from "node:test";
import assert from "node:assert/strict";
import { Airlock, UnauthorizedError, NotFoundError, InvalidArgumentError, ForbiddenError } from "../src/index.js";
import { admin, requireDaemon } from "./helpers.mjs";

describe("the operator's API over the unix socket", () => {
  let a;
  before(() => {
    requireDaemon();
    a = admin();
    assert.equal(a.conn.socketPath, process.env.AIRLOCK_SOCKET);
    assert.equal(a.conn.token, null);
  });

  it("health, Prometheus metrics and the CA", async () => {
    const h = await a.health();
    assert.equal(h.status, "ok");
    assert.match(await a.prometheusMetrics(), /^airlock_sandboxes\{state="running"\} \d+$/m);
    assert.match(await a.ca(), /^-----BEGIN CERTIFICATE-----/);
  });

  it("tokens: create, use, list, revoke", async () => {
    const t = await a.tokens.create({ tenant: "sdk-admin", description: "sdk test" });
    assert.match(t.token, /^alk_/);
    assert.equal(t.tenant, "sdk-admin");
    const listed = await a.tokens.list();
    const mine = listed.find((x) => x.id === t.id);
    assert.ok(mine && mine.token === undefined, "a listed token has no secret");
    const user = new Airlock({ host: process.env.AIRLOCK_HOST, token: t.token });
    assert.deepEqual((await user.tenants.get("sdk-admin")).name, "sdk-admin");
    await assert.rejects(user.tenants.get("someone-else"), NotFoundError);
    await a.tokens.revoke(t.id);
    await assert.rejects(user.health(), UnauthorizedError);
    await assert.rejects(a.tokens.revoke("tok-0000000000000000"), NotFoundError);
  });

  it("tenants: quotas and usage", async () => {
    const t = await a.tenants.setQuotas("sdk-quota", { maxSandboxes: 3, maxVcpus: 4, maxMemoryMib: 2048, maxSnapshotMib: 1024 });
    assert.deepEqual(t.quotas, { max_sandboxes: 3, max_vcpus: 4, max_memory_mib: 2048, max_snapshot_mib: 1024 });
    const g = await a.tenants.get("sdk-quota");
    assert.equal(g.quotas.max_sandboxes, 3);
    assert.equal(g.usage.sandboxes, 0);
    await assert.rejects(a.tenants.setQuotas("Bad Name!", {}), (e) => e instanceof InvalidArgumentError || e instanceof NotFoundError);
  });

  it("secrets: set, rotate, list, get, delete; the value is never answered", async () => {
    const s = await a.secrets.set({ name: "sdk-test", value: "s3cret-value", hosts: ["api.example.com"], header: "Authorization", format: "Bearer {value}", tenant: "sdk-admin" });
    assert.match(s.id, /^sec-/);
    assert.ok(!JSON.stringify(s).includes("s3cret-value"));
    const rotated = await a.secrets.set({ name: "sdk-test", value: "n3w-value", hosts: ["api.example.com"], tenant: "sdk-admin" });
    assert.equal(rotated.id, s.id);
    assert.ok((await a.secrets.list({ tenant: "sdk-admin" })).some((x) => x.name === "sdk-test"));
    assert.equal((await a.secrets.get("sdk-test", { tenant: "sdk-admin" })).id, s.id);
    await a.secrets.delete("sdk-test", { tenant: "sdk-admin" });
    await assert.rejects(a.secrets.get("sdk-test", { tenant: "sdk-admin" }), NotFoundError);
    await assert.rejects(a.secrets.set({ name: "x", value: "v", hosts: ["10.0.0.1"] }), InvalidArgumentError);
    // a token may not name another tenant
    const user = new Airlock();
    await assert.rejects(user.secrets.list({ tenant: "sdk-admin" }), ForbiddenError);
  });

  it("warm pools: a shared pool set and removed; a token sets only its own", async () => {
    const answer = await a.pools.set("minimal", 1, { memoryMib: 288 });
    try {
      const shared = answer.pools.filter((p) => p.memory_mib === 288);
      assert.equal(shared.length, 1);
      assert.equal(shared[0].tenant, null);
      assert.equal(shared[0].size, 1);
      assert.equal(typeof answer.host_memory.shedding, "boolean");
      const user = new Airlock(); // the tenant's token
      assert.ok((await user.pools.list()).pools.some((p) => p.memory_mib === 288), "a token sees the shared pools");
      await assert.rejects(user.pools.set("minimal", 1, { tenant: "sdk-admin" }), ForbiddenError);
      await assert.rejects(user.pools.set("minimal", 65), InvalidArgumentError);
    } finally {
      const after = await a.pools.set("minimal", 0, { memoryMib: 288 });
      assert.ok(!after.pools.some((p) => p.memory_mib === 288));
    }
  });

  it("events: a filtered, then followed iterator", async () => {
    const seen = [];
    for await (const ev of a.events({ type: "token." })) seen.push(ev.type);
    assert.ok(seen.includes("token.created") && seen.includes("token.revoked"), seen.join(","));
    const it = a.events({ type: "secret.", follow: true, since: 0 })[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.value.type, "secret.set");
    await it.return();
  });
});
