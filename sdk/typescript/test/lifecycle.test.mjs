// SPDX-License-Identifier: Apache-2.0
// Snapshots, restore, fork and recover through the SDK, over TCP with a token.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, Snapshot, ConflictError, NotFoundError, InvalidArgumentError } from "../src/index.js";
import { SMALL, requireDaemon } from "./helpers.mjs";

describe("the lifecycle over TCP", () => {
  const made = [];
  let sb;
  before(async () => {
    requireDaemon();
    sb = await Sandbox.create(SMALL);
    made.push(sb);
  });
  after(async () => {
    for (const s of made) await s.kill().catch(() => {});
  });

  it("snapshots, lists, restores and deletes a snapshot", async () => {
    await sb.files.write("/tmp/mark", "before\n");
    const snap = await sb.snapshot({ name: "sdk test" });
    assert.match(snap.id, /^snap-[0-9a-f]{16}$/);
    assert.equal(snap.info.name, "sdk test");
    assert.equal(snap.info.sandbox_id, sb.id);
    assert.deepEqual((await Snapshot.list({ sandbox: sb.id })).map((s) => s.id), [snap.id]);
    assert.equal((await Snapshot.get(snap.id)).info.name, "sdk test");
    await sb.files.write("/tmp/mark", "after\n");

    const restored = await snap.restore({ metadata: { from: "snapshot" } });
    made.push(restored);
    assert.notEqual(restored.id, sb.id);
    assert.equal(restored.info.boot, "snapshot");
    assert.equal(await restored.files.readText("/tmp/mark"), "before\n");
    // what `await using` calls at the end of its block
    await restored[Symbol.asyncDispose]();
    assert.equal(restored.state, "deleted");

    await snap.delete();
    await assert.rejects(Snapshot.get(snap.id), NotFoundError);
    await assert.rejects(Sandbox.restore(snap.id, {}), NotFoundError);
    await assert.rejects(sb.snapshot({ name: "" }), InvalidArgumentError);
  });

  it("forks a running sandbox", async () => {
    const [copy] = await sb.fork({ count: 1 });
    made.push(copy);
    assert.notEqual(copy.id, sb.id);
    assert.equal(copy.state, "running");
    assert.equal(await copy.files.readText("/tmp/mark"), "after\n");
    await copy.kill();
    await assert.rejects(sb.fork({ count: 99 }), InvalidArgumentError);
  });

  it("recover refuses a running sandbox with ConflictError", async () => {
    await assert.rejects(sb.recover({ memory: false }), (e) => e instanceof ConflictError && /only a sandbox in state error/.test(e.message));
  });
});
