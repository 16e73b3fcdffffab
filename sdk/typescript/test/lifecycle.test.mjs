// SPDX-License-Identifier: Apache-2.0
// Snapshots, restore, fork and recover through the SDK, over TCP with a token.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { Sandbox, Snapshot, ConflictError, NotFoundError, InvalidArgumentError } from "../src/index.js";
import { SMALL, requireDaemon } from "./helpers.mjs";

/** The pid of the sandbox's VMM (QEMU is started with -name airlock-<id>), or 0. */
function vmmPid(id) {
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    let argv;
    try {
      argv = fs.readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    const i = argv.indexOf("-name");
    if (i >= 0 && argv[i + 1] === `airlock-${id}`) return Number(d);
  }
  return 0;
}

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

  it("recover refuses a running sandbox, and brings back one whose VM died", async (t) => {
    await assert.rejects(sb.recover({ memory: false }), (e) => e instanceof ConflictError && /only a sandbox in state error/.test(e.message));
    if (sb.info.backend !== "qemu") {
      t.diagnostic(`the VMM is found by QEMU's -name; backend ${sb.info.backend}: recover checked only for its 409`);
      return;
    }
    await sb.exec("echo kept > /root/disk.txt && sync");
    const pid = vmmPid(sb.id);
    assert.ok(pid, `no VMM process named airlock-${sb.id}`);
    process.kill(pid, "SIGKILL");
    const deadline = Date.now() + 30000;
    while ((await sb.refresh()).state !== "error") {
      assert.ok(Date.now() < deadline, `still ${sb.state} 30 s after its VMM was killed`);
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.match(sb.info.error, /VM exited|VMM/);
    await sb.recover({ memory: false });
    assert.equal(sb.state, "running");
    assert.equal((await sb.exec("cat /root/disk.txt")).stdout, "kept\n");
  });
});
