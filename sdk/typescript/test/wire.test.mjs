// SPDX-License-Identifier: Apache-2.0
// The SDK's side of the wire against a scripted server on a unix socket (no
// daemon, no VM): streamed exec lines and their error line, wait's 408 loop,
// Retry-After, the PTY protocol's frames after the upgrade, events closed early.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Airlock, Sandbox, Process, GuestError, QuotaExceededError, TimeoutError, ProtocolError } from "../src/index.js";

let server;
let sock;
let tmp;
const seen = [];
let eventsClosed = null;

function frame(type, payload) {
  const h = Buffer.alloc(5);
  h[0] = type;
  h.writeUInt32BE(payload.length, 1);
  return Buffer.concat([h, payload]);
}

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-wire-"));
  sock = path.join(tmp, "d.sock");
  let waits = 0;
  server = http.createServer((req, res) => {
    const u = new URL(req.url, "http://x");
    seen.push(`${req.method} ${u.pathname}${u.search}`);
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      if (u.pathname === "/v1/sandboxes/sb-1/exec") {
        res.writeHead(200, { "Content-Type": "application/x-ndjson" });
        const j = JSON.parse(body);
        assert.equal(j.stream, true);
        res.write('{"type":"start","process_id":"p-1"}\n{"type":"stdout","data":"aé","encoding":"utf8"}\n');
        res.write('{"type":"stdout","data":"');
        setTimeout(() => {
          if (j.cmd[2] === "fail") res.end('","encoding":"utf8"}\n{"type":"error","error":{"code":"guest_error","message":"the guest went away"}}\n');
          else res.end(`${Buffer.from([0xe2, 0x9c]).toString("base64")}","encoding":"base64"}\n{"type":"stdout","data":"kw==","encoding":"base64"}\n{"type":"exit","exit_code":0,"signal":null,"timed_out":false,"duration_ms":5}\n`);
        }, 20);
      } else if (u.pathname === "/v1/sandboxes/sb-1/processes/p-2/wait") {
        waits++;
        const exited = waits >= 3;
        res.writeHead(exited ? 200 : 408, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ id: "p-2", state: exited ? "exited" : "running", exit_code: exited ? 0 : null }));
      } else if (u.pathname === "/v1/sandboxes") {
        res.writeHead(429, { "Content-Type": "application/json", "Retry-After": "3" });
        res.end('{"error":{"code":"quota_exceeded","message":"tenant t: 2 of 2 sandboxes"}}');
      } else if (u.pathname === "/v1/events") {
        res.writeHead(200, { "Content-Type": "application/x-ndjson" });
        res.write('{"seq":1,"type":"a"}\n{"seq":2,"type":"b"}\n');
        eventsClosed = new Promise((resolve) => res.on("close", resolve));
      } else if (u.pathname === "/v1/sandboxes/sb-1/files") {
        res.writeHead(200);
        res.end("not json");
      } else {
        res.writeHead(404, { "Content-Type": "application/json" });
        res.end('{"error":{"code":"not_found","message":"nope"}}');
      }
    });
  });
  server.on("upgrade", (req, socket) => {
    seen.push(`UPGRADE ${req.url} ${req.headers.upgrade}`);
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: airlock-pty/1\r\nConnection: Upgrade\r\n\r\n");
    // the first frame in the same write as the head, the second split in two
    socket.write(frame(2, Buffer.from("$ ")));
    const two = frame(2, Buffer.from("echoed"));
    socket.write(two.subarray(0, 3));
    setTimeout(() => socket.write(two.subarray(3)), 10);
    let got = Buffer.alloc(0);
    socket.on("data", (d) => {
      got = Buffer.concat([got, d]);
      // keys "ls\n" (type 0) and a resize (type 1), then exit
      if (got.length >= 8 + 5 + 21) {
        assert.equal(got[0], 0);
        assert.equal(got.subarray(5, 8).toString(), "ls\n");
        assert.equal(got[8], 1);
        assert.deepEqual(JSON.parse(got.subarray(13).toString()), { rows: 40, cols: 120 });
        setTimeout(() => socket.end(frame(3, Buffer.from('{"type":"exit","exit_code":7,"signal":null,"timed_out":false,"duration_ms":9}'))), 50);
      }
    });
  });
  await new Promise((r) => server.listen(sock, r));
});

after(() => {
  server.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

function sandbox() {
  return new Sandbox(new Airlock({ socketPath: sock, env: {} }), { id: "sb-1", state: "running" });
}

test("a streamed exec decodes text across lines and encodings", async () => {
  const parts = [];
  const r = await sandbox().exec("ok", { onStdout: (s) => parts.push(s) });
  assert.equal(r.stdout, "aé✓");
  assert.equal(parts.join(""), "aé✓");
  assert.equal(r.exitCode, 0);
  assert.equal(r.processId, "p-1");
});

test("an error line in a stream is thrown as its class", async () => {
  await assert.rejects(sandbox().exec("fail", { stream: true }), (e) => e instanceof GuestError && e.message === "the guest went away");
});

test("wait() asks again after a 408 and throws TimeoutError when its time is up", async () => {
  const sb = sandbox();
  const p = new Process(sb, { id: "p-2" });
  await assert.rejects(p.wait({ timeout: 0 }), TimeoutError);
  const info = await p.wait();
  assert.equal(info.state, "exited");
  assert.ok(seen.filter((s) => s.startsWith("GET /v1/sandboxes/sb-1/processes/p-2/wait?timeout_s=")).length >= 3);
});

test("a 429 is QuotaExceededError with Retry-After", async () => {
  await assert.rejects(Sandbox.create({ socketPath: sock, env: {} }), (e) => e instanceof QuotaExceededError && e.retryAfter === 3 && e.status === 429);
});

test("the PTY protocol: frames both ways, split frames, the exit", async () => {
  const p = new Process(sandbox(), { id: "p-9" });
  const pty = await p.attach();
  const chunks = [];
  pty.onData((d) => chunks.push(d.toString()));
  pty.write("ls\n");
  pty.resize(40, 120);
  const exit = await pty.wait();
  assert.equal(exit.exitCode, 7);
  assert.deepEqual(chunks, ["$ ", "echoed"]);
  assert.ok(seen.includes("UPGRADE /v1/sandboxes/sb-1/processes/p-9/attach airlock-pty/1"));
});

test("leaving an events loop early closes the stream", async () => {
  const a = new Airlock({ socketPath: sock, env: {} });
  for await (const ev of a.events({ follow: true })) {
    assert.equal(ev.seq, 1);
    break;
  }
  await eventsClosed;
});

test("a JSON answer that is not JSON is a ProtocolError; bytes are bytes", async () => {
  assert.equal(await sandbox().files.readText("/x"), "not json");
  await assert.rejects(new Airlock({ socketPath: sock, env: {} }).health(), (e) => e.code === "not_found");
  void ProtocolError;
});
