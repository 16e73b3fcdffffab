// SPDX-License-Identifier: Apache-2.0
// One sandbox over TCP with a tenant's token (from the environment, as a user
// would): create/get/list/connect, exec (collected and streamed), background
// processes, a PTY, files and trees, network, metrics, pause/resume, timeouts,
// events, and the typed errors of each.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  Airlock, Sandbox, withSandbox, NotFoundError, InvalidArgumentError, ConflictError, UnauthorizedError,
  ForbiddenError, AirlockError, TimeoutError, GuestError,
} from "../src/index.js";
import { SMALL, requireDaemon, collectText, admin } from "./helpers.mjs";

describe("a sandbox over TCP", () => {
  let sb;
  before(async () => {
    requireDaemon();
    // a secret of the token's tenant (set by the operator), granted to the sandbox
    await admin().secrets.set({ name: "sdk-key", value: "the-real-value", hosts: ["api.example.com"], tenant: "sdk" });
    sb = await Sandbox.create({
      ...SMALL, env: { GREETING: "hello" }, metadata: { suite: "sdk-ts", run: String(process.pid) },
      secrets: { API_KEY: "sdk-key" }, network: { allow: ["api.example.com"] }, autoResume: true,
    });
    assert.equal(sb.info.auto_resume, true);
  });
  after(async () => {
    if (sb) await sb.kill();
    await admin().secrets.delete("sdk-key", { tenant: "sdk" }).catch(() => {});
  });

  it("creates, gets, lists and connects", async () => {
    assert.match(sb.id, /^sb-[0-9a-f]{16}$/);
    assert.equal(sb.state, "running");
    assert.equal(sb.info.template, SMALL.template);
    assert.deepEqual(sb.info.metadata, { suite: "sdk-ts", run: String(process.pid) });
    const again = await Sandbox.get(sb.id);
    assert.equal(again.id, sb.id);
    const listed = await Sandbox.list({ metadata: { run: String(process.pid) } });
    assert.deepEqual(listed.map((s) => s.id), [sb.id]);
    assert.deepEqual(await Sandbox.list({ metadata: { run: "nobody" } }), []);
    const c = await Sandbox.connect(sb.id);
    assert.equal(c.state, "running");
    await assert.rejects(Sandbox.get("sb-0000000000000000"), NotFoundError);
  });

  it("grants a secret as a placeholder, never the value", async () => {
    assert.deepEqual(sb.info.secrets.map((b) => [b.env, b.secret]), [["API_KEY", "sdk-key"]]);
    const r = await sb.exec("echo $API_KEY");
    assert.match(r.stdout, /^airlock-ph-[0-9a-f]{64}\n$/);
    assert.equal(r.stdout.trim(), sb.info.secrets[0].placeholder);
    assert.ok(!JSON.stringify(sb.info).includes("the-real-value"));
    await assert.rejects(Sandbox.create({ ...SMALL, secrets: { K: "no-such-secret" } }), InvalidArgumentError);
  });

  it("refuses a bad create with InvalidArgumentError", async () => {
    await assert.rejects(Sandbox.create({ ...SMALL, vcpus: 999 }), (e) => e instanceof InvalidArgumentError && e.status === 400 && /vcpus/.test(e.message));
  });

  it("refuses a bad token with UnauthorizedError, an operator route with ForbiddenError", async () => {
    const bad = new Airlock({ host: process.env.AIRLOCK_HOST, token: "alk_not-a-token" });
    await assert.rejects(bad.health(), (e) => e instanceof UnauthorizedError && e.code === "unauthorized");
    await assert.rejects(new Airlock().prometheusMetrics(), ForbiddenError);
    await assert.rejects(new Airlock().tokens.list(), ForbiddenError);
    const h = await new Airlock().health();
    assert.equal(h.status, "ok");
  });

  it("execs collected: exit code, stdout, stderr, env, stdin, bytes", async () => {
    const r = await sb.exec("echo $GREETING; echo err >&2; exit 3");
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, "hello\n");
    assert.equal(r.stderr, "err\n");
    assert.match(r.processId, /^p-\d+$/);
    const cat = await sb.exec(["cat"], { stdin: "from stdin" });
    assert.equal(cat.stdout, "from stdin");
    const bin = await sb.exec(["cat"], { stdin: Buffer.from([0, 255, 1]) });
    assert.deepEqual([...bin.stdoutBytes], [0, 255, 1]);
    const env = await sb.exec("echo $X; pwd", { env: { X: "y" }, cwd: "/tmp" });
    assert.equal(env.stdout, "y\n/tmp\n");
    const t = await sb.exec("sleep 30", { timeout: 1 });
    assert.equal(t.timedOut, true);
    await assert.rejects(sb.exec(["/no/such/binary"]), InvalidArgumentError);
  });

  it("execs streamed with callbacks", async () => {
    const out = [];
    const err = [];
    const r = await sb.exec("for i in 1 2 3; do echo line$i; sleep 0.1; done; echo e >&2", {
      onStdout: (s) => out.push(s), onStderr: (s) => err.push(s),
    });
    assert.equal(r.exitCode, 0);
    assert.equal(out.join(""), "line1\nline2\nline3\n");
    assert.equal(r.stdout, "line1\nline2\nline3\n");
    assert.equal(err.join(""), "e\n");
  });

  it("runs background processes: output, stdin, signal, wait, list", async () => {
    const p = await sb.processes.start("echo started; sleep 0.2; echo done", { tag: "bg" });
    assert.match(p.id, /^p-\d+$/);
    assert.equal(await collectText(p.output()), "started\ndone\n");
    const waited = await p.wait({ timeout: 30 });
    assert.equal(waited.state, "exited");
    assert.equal(waited.exit_code, 0);

    const cat = await sb.processes.start(["cat"], { stdinStream: true });
    await cat.writeStdin("one\n");
    await cat.writeStdin(Buffer.from("two\n"), { eof: true });
    const events = [];
    for await (const ev of cat) events.push(ev);
    assert.equal(events.filter((e) => e.type === "stdout").map((e) => e.text).join(""), "one\ntwo\n");
    assert.equal(events.at(-1).type, "exit");
    assert.equal(events.at(-1).exitCode, 0);

    const sleeper = await sb.processes.start(["sleep", "600"]);
    await assert.rejects(sleeper.wait({ timeout: 1 }), TimeoutError);
    const listed = await sb.processes.list();
    assert.ok(listed.some((x) => x.id === sleeper.id && x.state === "running"));
    await sleeper.signal("TERM");
    const end = await sleeper.wait({ timeout: 30 });
    assert.equal(end.state, "exited");
    assert.equal(end.signal, 15);
    assert.equal((await sb.processes.get(sleeper.id)).state, "exited");
    await assert.rejects(sleeper.writeStdin("x"), ConflictError);
  });

  it("drives a PTY over the attach upgrade", async () => {
    const pty = await sb.pty.create({ cmd: ["sh"], rows: 24, cols: 80 });
    let seen = "";
    pty.onData((d) => { seen += d.toString("utf8"); });
    await pty.process.resize(30, 100);
    pty.resize(40, 120);
    pty.write("stty size; echo pty-$((40+2)); exit 7\n");
    const exit = await pty.wait();
    assert.equal(exit.exitCode, 7);
    assert.match(seen, /pty-42/);
    assert.match(seen, /40 120/);
  });

  it("reads and writes files, lists, stats, renames, removes", async () => {
    await sb.files.mkdir("/tmp/sdk/a/b");
    const w = await sb.files.write("/tmp/sdk/a/b/f.txt", "text ✓\n", { mode: 0o600 });
    assert.equal(w.size, Buffer.byteLength("text ✓\n"));
    assert.equal(await sb.files.readText("/tmp/sdk/a/b/f.txt"), "text ✓\n");
    const st = await sb.files.stat("/tmp/sdk/a/b/f.txt");
    assert.equal(st.type, "file");
    assert.equal(st.mode & 0o777, 0o600);
    await sb.files.write("/tmp/sdk/bytes", Buffer.from([1, 2, 3, 0, 255]));
    assert.deepEqual([...(await sb.files.read("/tmp/sdk/bytes"))], [1, 2, 3, 0, 255]);
    const names = (await sb.files.list("/tmp/sdk")).map((e) => e.name).sort();
    assert.deepEqual(names, ["a", "bytes"]);
    await sb.files.rename("/tmp/sdk/bytes", "/tmp/sdk/moved");
    assert.equal(await sb.files.exists("/tmp/sdk/bytes"), false);
    assert.equal(await sb.files.exists("/tmp/sdk/moved"), true);
    await sb.files.remove("/tmp/sdk/moved");
    await assert.rejects(sb.files.read("/tmp/sdk/moved"), NotFoundError);
    await assert.rejects(sb.files.remove("/tmp/sdk/a"), ConflictError);
    await sb.files.remove("/tmp/sdk/a", { recursive: true });
    assert.deepEqual(await sb.files.list("/tmp/sdk"), []);
    await assert.rejects(sb.files.readText("relative"), InvalidArgumentError);
  });

  it("uploads and downloads trees through the archive endpoints", async () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-sdk-tree-"));
    try {
      const src = path.join(tmp, "proj");
      fs.mkdirSync(path.join(src, "lib"), { recursive: true });
      fs.writeFileSync(path.join(src, "main.sh"), "echo main\n");
      fs.chmodSync(path.join(src, "main.sh"), 0o755);
      fs.writeFileSync(path.join(src, "lib", "data.bin"), Buffer.from([9, 8, 7]));
      await sb.files.mkdir("/tmp/up");
      await sb.files.upload(src, "/tmp/up");
      const r = await sb.exec("sh /tmp/up/proj/main.sh; test -x /tmp/up/proj/main.sh && echo x; od -An -tu1 /tmp/up/proj/lib/data.bin");
      assert.equal(r.exitCode, 0, r.stderr);
      assert.match(r.stdout, /^main\nx\n\s*9\s+8\s+7\n$/);
      await sb.exec("mkdir -p /tmp/out/deep && echo result > /tmp/out/deep/r.txt");
      const dest = path.join(tmp, "down");
      await sb.files.download("/tmp/out", dest);
      assert.equal(fs.readFileSync(path.join(dest, "out", "deep", "r.txt"), "utf8"), "result\n");
      await sb.files.download("/tmp/up/proj", dest);
      assert.deepEqual([...fs.readFileSync(path.join(dest, "proj", "lib", "data.bin"))], [9, 8, 7]);
      await assert.rejects(sb.files.download("/tmp/nope", dest), NotFoundError);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("reads metrics and the network, replaces the policy", async () => {
    const m = await sb.metrics();
    assert.ok(m.mem_total_kib > 0 && m.uptime_ms > 0, JSON.stringify(m));
    const n = await sb.getNetwork();
    assert.equal(n.sandbox, sb.id);
    assert.deepEqual(n.policy.allow, ["api.example.com"]);
    const set = await sb.setNetwork({ allow: ["example.com"], deny: [] });
    assert.deepEqual(set.policy ? set.policy.allow : (await sb.getNetwork()).policy.allow, ["example.com"]);
    assert.deepEqual((await sb.getNetwork()).policy.allow, ["example.com"]);
    await assert.rejects(sb.setNetwork({ allow: ["169.254.169.254"] }), ForbiddenError);
    await assert.rejects(sb.setNetwork({ allow: ["not a rule!"] }), InvalidArgumentError);
  });

  it("exposes ports and tunnels to one", async () => {
    let a = await sb.expose(7000);
    const mine = a.ports.find((p) => p.port === 7000);
    assert.ok(mine && mine.exposed && !mine.public && a.proxy === false, JSON.stringify(a));
    assert.deepEqual(sb.info.ports, [{ port: 7000, public: false, url: null }]);
    assert.equal(await sb.getHost(7000), null, "no proxy: no host");
    a = await sb.expose(7000, { public: true });
    assert.equal(a.ports.find((p) => p.port === 7000).public, true);
    assert.ok((await sb.ports()).traffic_token.startsWith("att_"));
    assert.throws(() => sb.connectPort(70000), RangeError);
    await assert.rejects(sb.connectPort(7001), GuestError);
    await sb.processes.start(["sh", "-c", "echo hello-from-guest | nc -l -p 7000"]);
    let socket = null;
    for (let i = 0; !socket; i++) {
      try {
        socket = await sb.connectPort(7000);
      } catch (e) {
        if (!(e instanceof GuestError) || i > 300) throw e;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    let got = "";
    for await (const chunk of socket) got += chunk.toString();
    assert.match(got, /hello-from-guest/);
    socket.destroy();
    // The daemon's side ends (and counts the tunnel) once nc closed too.
    for (let i = 0; !(await sb.ports()).ports.some((p) => p.port === 7000 && p.requests >= 1); i++) {
      assert.ok(i < 300, "the tunnel was not counted");
      await new Promise((r) => setTimeout(r, 200));
    }
    await sb.unexpose(7000);
    assert.deepEqual(sb.info.ports, []);
    await assert.rejects(sb.unexpose(7000), NotFoundError);
    await sb.setTimeout({ autoResume: false });
    assert.equal(sb.info.auto_resume, false);
  });

  it("pauses, resumes, and sets timeouts", async () => {
    await sb.pause();
    assert.equal(sb.state, "paused");
    await assert.rejects(sb.exec("true"), (e) => e instanceof ConflictError && e.status === 409);
    const r = await sb.exec("echo resumed", { resume: true });
    assert.equal(r.stdout, "resumed\n");
    await sb.refresh();
    assert.equal(sb.state, "running");
    await sb.pause();
    await sb.resume();
    assert.equal(sb.state, "running");
    await sb.pause();
    assert.equal((await Sandbox.connect(sb.id)).state, "running", "connect resumes a paused sandbox");
    await sb.setTimeout({ timeout: 3600, onTimeout: "pause", idleTimeout: 1800 });
    assert.equal(sb.info.timeout_s, 3600);
    assert.equal(sb.info.on_timeout, "pause");
    assert.equal(sb.info.idle_timeout_s, 1800);
    await sb.setTimeout({ timeout: 0, idleTimeout: 0 });
    assert.equal(sb.info.timeout_s, 0);
    await assert.rejects(sb.setTimeout({ onTimeout: "explode" }), InvalidArgumentError);
  });

  it("reads the sandbox's events as an async iterator", async () => {
    const types = new Set();
    let last = 0;
    for await (const ev of sb.events()) {
      assert.equal(ev.sandbox, sb.id);
      assert.ok(ev.seq > last);
      last = ev.seq;
      types.add(ev.type);
    }
    for (const t of ["sandbox.state", "exec.start", "exec.exit"]) assert.ok(types.has(t), `no ${t} in ${[...types]}`);
    // follow: a new exec shows up, then the loop is left early.
    const it = sb.events({ follow: true, since: last, type: "exec." })[Symbol.asyncIterator]();
    const next = it.next();
    await sb.exec("true");
    const { value } = await next;
    assert.equal(value.type, "exec.start");
    await it.return();
  });

  it("withSandbox deletes the sandbox, also when the callback throws", async () => {
    let id;
    await assert.rejects(withSandbox(SMALL, async (s) => {
      id = s.id;
      assert.equal((await s.exec("echo in")).stdout, "in\n");
      throw new Error("boom");
    }), /boom/);
    assert.equal((await Sandbox.get(id)).state, "deleted");
    const s2 = await Sandbox.get(id);
    await s2.kill();
    assert.ok(new NotFoundError("x") instanceof AirlockError);
  });
});
