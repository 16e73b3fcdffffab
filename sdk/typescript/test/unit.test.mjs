// SPDX-License-Identifier: Apache-2.0
// Pure checks (no daemon): the route table names real methods, errors map by
// code, the connection settings follow the CLI's, tar round trips and refuses
// hostile entries.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import * as sdk from "../src/index.js";
import { Connection } from "../src/http.js";
import { packArchive, extractArchive } from "../src/tar.js";

function resolveMethod(name) {
  let obj = sdk;
  for (const part of name.split(".")) {
    obj = obj?.[part];
  }
  return obj;
}

test("every route of the table names an SDK method", () => {
  for (const [route, name] of Object.entries(sdk.ROUTES)) {
    assert.match(route, /^(GET|POST|PUT|DELETE|PATCH) \/\S*$/, route);
    assert.equal(typeof resolveMethod(name), "function", `${route}: ${name} is not a function of the SDK`);
  }
  for (const [route, why] of Object.entries(sdk.EXCLUDED)) {
    assert.ok(!(route in sdk.ROUTES), `${route} is both routed and excluded`);
    assert.ok(typeof why === "string" && why.length > 10, `${route}: the exclusion needs a reason`);
  }
});

test("requests outside the route table are refused", async () => {
  const c = new Connection({ socketPath: "/nonexistent" });
  await assert.rejects(c.request("GET /v1/nope"), /not in ROUTES/);
});

test("errors are typed by the API's code", () => {
  const cases = {
    invalid_argument: [400, sdk.InvalidArgumentError], unauthorized: [401, sdk.UnauthorizedError],
    forbidden: [403, sdk.ForbiddenError], not_found: [404, sdk.NotFoundError],
    method_not_allowed: [405, sdk.MethodNotAllowedError], conflict: [409, sdk.ConflictError],
    payload_too_large: [413, sdk.PayloadTooLargeError], quota_exceeded: [429, sdk.QuotaExceededError],
    unsupported_media_type: [415, sdk.UnsupportedMediaTypeError], boot_failed: [500, sdk.BootFailedError],
    internal: [500, sdk.InternalError], guest_error: [502, sdk.GuestError], unavailable: [503, sdk.UnavailableError],
    timeout: [504, sdk.TimeoutError],
  };
  for (const [code, [status, Cls]] of Object.entries(cases)) {
    const e = sdk.errorFromBody(status, { error: { code, message: `m ${code}` } }, { retryAfter: 2 });
    assert.ok(e instanceof Cls && e instanceof sdk.AirlockError, code);
    assert.equal(e.code, code);
    assert.equal(e.status, status);
    assert.equal(e.message, `m ${code}`);
    assert.equal(e.retryAfter, 2);
  }
  assert.ok(sdk.errorFromBody(404, null) instanceof sdk.NotFoundError, "a status alone maps too");
});

test("the connection follows the CLI: host + token, else the socket", () => {
  let c = new Connection({ env: { AIRLOCK_HOST: "tcp://127.0.0.1:7070", AIRLOCK_TOKEN: "alk_x", AIRLOCK_SOCKET: "/s" } });
  assert.equal(c.host, "127.0.0.1");
  assert.equal(c.port, 7070);
  assert.equal(c.token, "alk_x");
  assert.equal(c.httpOptions("GET", "/healthz").headers.Authorization, "Bearer alk_x");
  c = new Connection({ env: { AIRLOCK_SOCKET: "/s" } });
  assert.equal(c.socketPath, "/s");
  c = new Connection({ env: {} });
  assert.equal(c.socketPath, sdk.DEFAULT_SOCKET);
  c = new Connection({ socketPath: "/x", env: { AIRLOCK_HOST: "tcp://[::1]:9" } });
  assert.equal(c.socketPath, "/x", "an explicit socket wins over $AIRLOCK_HOST");
  c = new Connection({ host: "[::1]:9", env: {} });
  assert.equal(c.host, "::1");
  assert.throws(() => new Connection({ host: "nohost", env: {} }), /tcp:\/\/ADDR:PORT/);
  assert.throws(() => new Connection({ token: "a\nb", env: {} }), /one line/);
});

test("an unreachable daemon is a ConnectionError that says what to do", async () => {
  const c = new sdk.Airlock({ socketPath: "/nonexistent/airlockd.sock" });
  await assert.rejects(c.health(), (e) => e instanceof sdk.ConnectionError && /AIRLOCK_SOCKET/.test(e.message));
});

async function collect(it) {
  const out = [];
  for await (const c of it) out.push(c);
  return Buffer.concat(out);
}

test("tar: a tree round trips, long names too", async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-sdk-"));
  try {
    const src = path.join(tmp, "tree");
    const long = "d".repeat(60) + "/" + "f".repeat(120);
    fs.mkdirSync(path.join(src, "sub", "d".repeat(60)), { recursive: true });
    fs.writeFileSync(path.join(src, "a.txt"), "hello\n");
    fs.writeFileSync(path.join(src, "sub", "b.bin"), Buffer.from([0, 1, 2, 255]));
    fs.writeFileSync(path.join(src, "sub", long), "long\n");
    fs.chmodSync(path.join(src, "a.txt"), 0o755);
    fs.symlinkSync("a.txt", path.join(src, "link"));
    const tar = await collect(packArchive(src));
    assert.equal(tar.length % 512, 0);
    const out = path.join(tmp, "out");
    await extractArchive(Readable.from([tar]), out);
    assert.equal(fs.readFileSync(path.join(out, "tree", "a.txt"), "utf8"), "hello\n");
    assert.equal(fs.statSync(path.join(out, "tree", "a.txt")).mode & 0o777, 0o755);
    assert.deepEqual([...fs.readFileSync(path.join(out, "tree", "sub", "b.bin"))], [0, 1, 2, 255]);
    assert.equal(fs.readFileSync(path.join(out, "tree", "sub", long), "utf8"), "long\n");
    assert.equal(fs.readlinkSync(path.join(out, "tree", "link")), "a.txt");
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

function rawEntry(name, { type = "0", data = Buffer.alloc(0), linkname = "" } = {}) {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100);
  h.write("0000644\0", 100);
  h.write("0000000\0", 108);
  h.write("0000000\0", 116);
  h.write(data.length.toString(8).padStart(11, "0") + "\0", 124);
  h.write("00000000000\0", 136);
  h.fill(0x20, 148, 156);
  h.write(type, 156);
  h.write(linkname, 157, 100);
  h.write("ustar\x0000", 257, "binary");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
  const padLen = (512 - (data.length % 512)) % 512;
  return Buffer.concat([h, data, Buffer.alloc(padLen)]);
}

test("tar: hostile entries are refused before anything leaves the directory", async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-sdk-"));
  try {
    const end = Buffer.alloc(1024);
    const cases = [
      [rawEntry("../evil", { data: Buffer.from("x") }), /leave/],
      [rawEntry("/etc/evil", { data: Buffer.from("x") }), /leave/],
      [rawEntry("a/../../evil", { data: Buffer.from("x") }), /leave/],
      [rawEntry("out", { type: "2", linkname: "/etc" }), /outside/],
      [rawEntry("up", { type: "2", linkname: "../.." }), /outside/],
      [rawEntry("hard", { type: "1", linkname: "/etc/passwd" }), /hard link/],
    ];
    for (const [entry, re] of cases) {
      const dest = path.join(tmp, "d");
      await assert.rejects(extractArchive(Readable.from([Buffer.concat([entry, end])]), dest), re);
    }
    // A symlink inside, then a file through it: refused (never followed).
    const dest = path.join(tmp, "d2");
    fs.mkdirSync(path.join(tmp, "outside"));
    const tar = Buffer.concat([rawEntry("dir", { type: "2", linkname: "." }), rawEntry("dir/x", { data: Buffer.from("x") }), end]);
    await assert.rejects(extractArchive(Readable.from([tar]), dest), /not a directory/);
    await assert.rejects(extractArchive(Readable.from([Buffer.concat([rawEntry("big", { data: Buffer.alloc(100) }), end])]), path.join(tmp, "d3"), { maxBytes: 10 }), /maxBytes/);
    assert.deepEqual(fs.readdirSync(path.join(tmp, "outside")), []);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test(".dockerignore patterns as the CLI reads them", () => {
  let ig = new sdk.DockerIgnore("*.md\n!README*.md\nREADME-secret.md\ndata\n! data/keep\n# c\n");
  assert.ok(ig.excludes("CHANGES.md") && !ig.excludes("README.md") && ig.excludes("README-secret.md"));
  assert.ok(ig.excludes("data/x") && !ig.excludes("data/keep/deep/file") && ig.excludes("data"));
  assert.ok(!ig.excludes("docs/x.md"), "* stays within a component");
  ig = new sdk.DockerIgnore("**/*.pyc\nsrc/**/gen\n*/temp*\n[^c-z]y\n\\*literal\n../outside\n/build/\n");
  assert.ok(ig.excludes("x.pyc") && ig.excludes("a/b/c/x.pyc") && !ig.excludes("a/b/c/x.py"));
  assert.ok(ig.excludes("src/gen") && ig.excludes("src/a/b/gen/f.c") && !ig.excludes("lib/gen"));
  assert.ok(ig.excludes("a/temporary") && !ig.excludes("a/b/temp"));
  assert.ok(ig.excludes("ay") && !ig.excludes("dy") && ig.excludes("*literal") && !ig.excludes("xliteral"));
  assert.ok(!ig.excludes("outside") && ig.excludes("build/out.o"));
});

test("a build context: .dockerignore, the Dockerfile kept, symlinks, special files left out", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-ctx-"));
  try {
    fs.mkdirSync(path.join(dir, "data/keep"), { recursive: true });
    fs.mkdirSync(path.join(dir, "data/drop"));
    fs.writeFileSync(path.join(dir, "Dockerfile"), "FROM base\n");
    fs.writeFileSync(path.join(dir, "data/keep/k"), "k");
    fs.writeFileSync(path.join(dir, "data/drop/d"), "d");
    fs.writeFileSync(path.join(dir, "notes.md"), "m");
    fs.symlinkSync("data/keep/k", path.join(dir, "link"));
    fs.writeFileSync(path.join(dir, ".dockerignore"), "*.md\ndata\n!data/keep\nDockerfile\n");
    const skipped = [];
    const ignore = await sdk.DockerIgnore.load(dir);
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-out-"));
    try {
      await extractArchive(Readable.from(sdk.packContext(dir, { ignore, keep: "Dockerfile", skipped })), out);
      const seen = [];
      const walk = (d, rel) => {
        for (const n of fs.readdirSync(d).sort()) {
          const r = rel ? `${rel}/${n}` : n;
          seen.push(r);
          if (fs.lstatSync(path.join(d, n)).isDirectory()) walk(path.join(d, n), r);
        }
      };
      walk(out, "");
      assert.deepEqual(seen, [".dockerignore", "Dockerfile", "data", "data/keep", "data/keep/k", "link"]);
      assert.equal(fs.readlinkSync(path.join(out, "link")), "data/keep/k");
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
