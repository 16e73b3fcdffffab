// SPDX-License-Identifier: Apache-2.0
// Templates through the SDK as the token's tenant: a build from a context
// directory (its .dockerignore honoured), the template's sandbox, an import
// of a docker save archive laid out as a directory, list, get, delete.
import { describe, it, before } from "node:test";
import assert from "node:assert/strict";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Airlock, Sandbox, ForbiddenError, NotFoundError, InvalidArgumentError } from "../src/index.js";
import { packArchive } from "../src/tar.js";
import { requireDaemon } from "./helpers.mjs";

async function bytesOf(iterable) {
  const parts = [];
  for await (const b of iterable) parts.push(b);
  return Buffer.concat(parts);
}

const sha = (b) => crypto.createHash("sha256").update(b).digest("hex");

/** A docker save archive, as a directory: one layer holding etc/hello. */
async function dockerSaveDir(dir) {
  const tree = path.join(dir, "tree");
  fs.mkdirSync(path.join(tree, "etc"), { recursive: true });
  fs.writeFileSync(path.join(tree, "etc", "hello"), "from an image\n");
  // packArchive names entries tree/...: the layer's root is tree's content.
  const layer = await bytesOf(packArchive(path.join(tree, "etc")));
  const out = path.join(dir, "save");
  const id = sha(layer);
  fs.mkdirSync(path.join(out, id), { recursive: true });
  fs.writeFileSync(path.join(out, id, "layer.tar"), layer);
  const config = Buffer.from(JSON.stringify({
    architecture: "amd64", os: "linux", config: { Env: ["FROM_TS=1"], WorkingDir: "/etc" },
    rootfs: { type: "layers", diff_ids: [`sha256:${id}`] },
  }));
  fs.writeFileSync(path.join(out, `${sha(config)}.json`), config);
  fs.writeFileSync(path.join(out, "manifest.json"),
    JSON.stringify([{ Config: `${sha(config)}.json`, RepoTags: ["ts:latest"], Layers: [`${id}/layer.tar`] }]));
  return out;
}

describe("templates", () => {
  let al, dir;
  before(() => {
    requireDaemon();
    al = new Airlock();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-sdk-ts-tpl-"));
  });

  it("builds from a context directory, lists, gets, runs, deletes", async () => {
    const ctx = path.join(dir, "ctx");
    fs.mkdirSync(ctx);
    fs.writeFileSync(path.join(ctx, "Dockerfile"), "FROM minimal\nENV SDK=ts\nCOPY app.txt /opt/\nRUN cat /opt/app.txt\n");
    fs.writeFileSync(path.join(ctx, "app.txt"), "from the ts sdk\n");
    fs.writeFileSync(path.join(ctx, "secret.txt"), "not sent\n");
    fs.writeFileSync(path.join(ctx, ".dockerignore"), "secret.txt\n");
    const events = [];
    const t = await al.templates.build("sdk-ts-built", ctx, { onProgress: (e) => events.push(e) });
    assert.equal(t.name, "sdk-ts-built");
    assert.equal(t.parent, "minimal");
    assert.ok(events.some((e) => e.type === "output" && e.data.includes("from the ts sdk")), JSON.stringify(events));
    assert.deepEqual(events.filter((e) => e.type === "step").map((e) => e.step), [1, 2, 3, 4]);
    assert.ok((await al.templates.list()).some((x) => x.name === "sdk-ts-built"));
    assert.deepEqual((await al.templates.get("sdk-ts-built")).config.env, ["SDK=ts"]);
    const bad = path.join(dir, "bad");
    fs.mkdirSync(bad);
    fs.writeFileSync(path.join(bad, "Dockerfile"), "FROM minimal\nCOPY secret.txt /x\n");
    await assert.rejects(al.templates.build("sdk-ts-bad", bad), (e) => /secret\.txt/.test(e.message));
    const sb = await Sandbox.create({ template: "sdk-ts-built" });
    try {
      const r = await sb.exec("cat /opt/app.txt; echo $SDK");
      assert.equal(r.stdout, "from the ts sdk\nts\n");
    } finally {
      await sb.kill();
    }
    await al.templates.delete("sdk-ts-built");
    await assert.rejects(al.templates.get("sdk-ts-built"), NotFoundError);
    await assert.rejects(al.templates.delete("minimal"), ForbiddenError);
  });

  it("imports a docker save archive laid out as a directory", async () => {
    const src = await dockerSaveDir(dir);
    const phases = [];
    const t = await al.templates.import("sdk-ts-imported", src, { onProgress: (e) => phases.push(e.phase) });
    assert.equal(t.source, "image");
    assert.equal(t.config.workdir, "/etc");
    assert.ok(phases.includes("layer") && phases.includes("mkfs"), phases.join(","));
    // Bytes: a body the client has sent whole when the 400 comes back.
    await assert.rejects(al.templates.import("Bad Name", Buffer.from("x")), InvalidArgumentError);
    await al.templates.delete("sdk-ts-imported");
  });
});
