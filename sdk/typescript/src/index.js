// SPDX-License-Identifier: Apache-2.0
// @airlock/sdk: Airlock's SDK for JavaScript and TypeScript (types in index.d.ts).
// A client of the API in docs/api.md; every route it calls is in routes.js.
import http from "node:http";
import { Readable } from "node:stream";
import { Connection, jsonLines, DEFAULT_SOCKET } from "./http.js";
import { packArchive, extractArchive, DEFAULT_MAX_EXTRACT_BYTES } from "./tar.js";
import { TimeoutError, ProtocolError, ConnectionError, ConflictError, errorFromBody } from "./errors.js";
import { Templates } from "./templates.js";

export * from "./errors.js";
export { ROUTES, EXCLUDED, FOREIGN_PREFIXES } from "./routes.js";
export { DEFAULT_SOCKET, DEFAULT_MAX_EXTRACT_BYTES };
export { Templates, DockerIgnore, packContext, AIRLOCK_DOCKERFILE } from "./templates.js";

const asyncDispose = Symbol.asyncDispose ?? Symbol.for("nodejs.asyncDispose");
/** A PTY message's payload limit (docs/api.md, "The PTY protocol"). */
const PTY_MAX_PAYLOAD = 65536;
/** Terminal output held for a reader that is behind; past it the socket is paused (back-pressure). */
const PTY_MAX_QUEUED_BYTES = 4 * 1024 * 1024;

function drop(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) out[k] = v;
  return out;
}

function argv(cmd) {
  if (typeof cmd === "string") return ["sh", "-c", cmd];
  if (Array.isArray(cmd) && cmd.length && cmd.every((c) => typeof c === "string")) return cmd;
  throw new TypeError("cmd: a string (run with sh -c) or a non-empty array of strings");
}

function toBuffer(data) {
  if (Buffer.isBuffer(data)) return data;
  if (typeof data === "string") return Buffer.from(data, "utf8");
  if (data instanceof Uint8Array) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return Buffer.from(data);
  throw new TypeError("data: a string, Buffer or Uint8Array");
}

function stdinFields(stdin) {
  if (stdin === undefined || stdin === null) return {};
  if (typeof stdin === "string") return { stdin, stdin_encoding: "utf8" };
  return { stdin: toBuffer(stdin).toString("base64"), stdin_encoding: "base64" };
}

function decodeData(data, encoding) {
  return encoding === "base64" ? Buffer.from(data || "", "base64") : Buffer.from(data || "", "utf8");
}

function resumeQuery(resume) {
  return resume ? { resume: "true" } : {};
}

/** The exec body fields shared by exec and processes.start. */
function execBody(cmd, o) {
  return drop({
    cmd: argv(cmd),
    env: o.env,
    cwd: o.cwd,
    uid: o.uid,
    gid: o.gid,
    timeout_s: o.timeout,
    ...stdinFields(o.stdin),
  });
}

/** The connection to one airlockd and its operator-level APIs. */
export class Airlock {
  /**
   * opts: socketPath, host ("tcp://ADDR:PORT"), token, requestTimeoutMs, env (instead of process.env).
   * Without options: $AIRLOCK_HOST + $AIRLOCK_TOKEN, else $AIRLOCK_SOCKET, else /run/airlock/airlockd.sock.
   */
  constructor(opts = {}) {
    this.conn = opts instanceof Connection ? opts : new Connection(opts);
    this.tokens = new Tokens(this);
    this.tenants = new Tenants(this);
    this.pools = new Pools(this);
    this.templates = new Templates(this);
    this.secrets = new Secrets(this);
    this.sandboxes = {
      create: (o = {}) => Sandbox.create({ ...o, client: this }),
      get: (id) => Sandbox.get(id, { client: this }),
      connect: (id, o = {}) => Sandbox.connect(id, { ...o, client: this }),
      list: (o = {}) => Sandbox.list({ ...o, client: this }),
    };
    this.snapshots = {
      list: (o = {}) => Snapshot.list({ ...o, client: this }),
      get: (id) => Snapshot.get(id, { client: this }),
    };
  }

  static from(opts) {
    if (opts && opts.client instanceof Airlock) return opts.client;
    // (not opts.env: in a create's options that is the sandbox's environment)
    return new Airlock(opts ? drop({ socketPath: opts.socketPath, host: opts.host, token: opts.token, requestTimeoutMs: opts.requestTimeoutMs }) : {});
  }

  /** GET /healthz. */
  health() {
    return this.conn.json("GET /healthz");
  }

  /** GET /metrics: the host's Prometheus text (operator only: the unix socket). */
  async prometheusMetrics() {
    return (await this.conn.bytes("GET /metrics")).toString("utf8");
  }

  /** GET /v1/ca: the Airlock CA certificate (PEM). */
  async ca() {
    return (await this.conn.bytes("GET /v1/ca")).toString("utf8");
  }

  /**
   * Events as an async iterator (GET /v1/events). opts: sandbox, type (a prefix),
   * since (the last seq seen), follow (stay open for new events), signal.
   * Breaking out of the loop closes the stream.
   */
  async *events(opts = {}) {
    const res = await this.conn.request("GET /v1/events", {}, {
      query: drop({ sandbox: opts.sandbox, type: opts.type, since: opts.since, follow: opts.follow ? "true" : undefined }),
      signal: opts.signal,
    });
    yield* jsonLines(res);
  }
}

export class Tokens {
  constructor(client) {
    this.client = client;
  }
  /** POST /v1/tokens (operator only): {id, tenant, description, created_at, token}. */
  create({ tenant, description } = {}) {
    return this.client.conn.json("POST /v1/tokens", {}, { json: drop({ tenant, description }) });
  }
  async list() {
    return (await this.client.conn.json("GET /v1/tokens")).tokens;
  }
  async revoke(id) {
    await this.client.conn.json("DELETE /v1/tokens/{id}", { id });
  }
}

export class Tenants {
  constructor(client) {
    this.client = client;
  }
  /** GET /v1/tenants/{name}: {name, quotas, usage}. */
  get(name) {
    return this.client.conn.json("GET /v1/tenants/{name}", { name });
  }
  /** PUT /v1/tenants/{name} (operator only): quotas {maxSandboxes, maxVcpus, maxMemoryMib, maxSnapshotMib} (0: unlimited). */
  setQuotas(name, q = {}) {
    return this.client.conn.json("PUT /v1/tenants/{name}", { name }, {
      json: drop({
        max_sandboxes: q.maxSandboxes ?? q.max_sandboxes,
        max_vcpus: q.maxVcpus ?? q.max_vcpus,
        max_memory_mib: q.maxMemoryMib ?? q.max_memory_mib,
        max_snapshot_mib: q.maxSnapshotMib ?? q.max_snapshot_mib,
      }),
    });
  }
}

/** Warm pools (docs/api.md, "Warm pools"): VMs of one shape restored and paused ahead of creates. */
export class Pools {
  constructor(client) {
    this.client = client;
  }
  /** GET /v1/pools: {pools: [{tenant, template, vcpus, memory_mib, size, ready, filling, pss_bytes, counts, error?}], ready, pss_bytes, host_memory}. */
  list() {
    return this.client.conn.json("GET /v1/pools");
  }
  /**
   * PUT /v1/pools: keep `size` VMs of (template, vcpus (default 1), memoryMib (default 256)) ready; 0 removes
   * the pool. A token sets its tenant's own pool; the unix socket a shared one, or `tenant`'s. Answers as list().
   */
  set(template, size, o = {}) {
    return this.client.conn.json("PUT /v1/pools", {}, {
      json: drop({ template, size, vcpus: o.vcpus, memory_mib: o.memoryMib ?? o.memory_mib, tenant: o.tenant }),
    });
  }
}

export class Secrets {
  constructor(client) {
    this.client = client;
  }
  /** POST /v1/secrets: create or rotate; answers the secret object (never the value). */
  set({ name, value, hosts, paths, methods, header, headers, format, tenant } = {}) {
    return this.client.conn.json("POST /v1/secrets", {}, { json: drop({ name, value, hosts, paths, methods, header, headers, format, tenant }) });
  }
  async list({ tenant } = {}) {
    return (await this.client.conn.json("GET /v1/secrets", {}, { query: drop({ tenant }) })).secrets;
  }
  get(name, { tenant } = {}) {
    return this.client.conn.json("GET /v1/secrets/{name}", { name }, { query: drop({ tenant }) });
  }
  async delete(name, { tenant } = {}) {
    await this.client.conn.json("DELETE /v1/secrets/{name}", { name }, { query: drop({ tenant }) });
  }
}

/** A snapshot record (docs/api.md, "The snapshot object"). */
export class Snapshot {
  constructor(client, info) {
    this.client = client;
    this.info = info;
    this.id = info.id;
  }
  static async list(opts = {}) {
    const c = Airlock.from(opts);
    const r = await c.conn.json("GET /v1/snapshots", {}, { query: drop({ sandbox: opts.sandbox }) });
    return r.snapshots.map((s) => new Snapshot(c, s));
  }
  static async get(id, opts = {}) {
    const c = Airlock.from(opts);
    return new Snapshot(c, await c.conn.json("GET /v1/snapshots/{id}", { id }));
  }
  /** DELETE /v1/snapshots/{id}. */
  async delete() {
    await this.client.conn.json("DELETE /v1/snapshots/{id}", { id: this.id });
  }
  /** A new sandbox from this snapshot (POST /v1/sandboxes with `snapshot`). */
  restore(opts = {}) {
    return Sandbox.create({ ...opts, snapshot: this.id, client: this.client });
  }
}

function createBody(o) {
  return drop({
    template: o.template,
    vcpus: o.vcpus,
    memory_mib: o.memoryMib,
    disk_mib: o.diskMib,
    env: o.env,
    metadata: o.metadata,
    snapshot: o.snapshot,
    timeout_s: o.timeout,
    on_timeout: o.onTimeout,
    idle_timeout_s: o.idleTimeout,
    network: o.network,
    secrets: o.secrets,
    boot: o.boot,
    tenant: o.tenant,
    auto_resume: o.autoResume,
  });
}

// GET path with Connection: Upgrade and Upgrade: protocol; resolves with
// onUpgrade(socket, head) after the 101, rejects with the API's error
// (what names the route) or a connection error (who names the target).
function upgradeRequest(conn, path, protocol, what, who, onUpgrade) {
  return new Promise((resolve, reject) => {
    const req = http.request(conn.httpOptions("GET", path, { Connection: "Upgrade", Upgrade: protocol }));
    req.on("upgrade", (res, socket, head) => resolve(onUpgrade(socket, head)));
    req.on("response", async (res) => {
      const chunks = [];
      for await (const c of res) chunks.push(c);
      let body = null;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        body = null;
      }
      reject(errorFromBody(res.statusCode, body, { what }));
    });
    req.on("error", (err) => reject(new ConnectionError(`${who}: cannot reach ${conn.describe()}: ${err.message}`, { code: "connection" })));
    req.end();
  });
}

function portNumber(port) {
  const n = Number(port);
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new RangeError(`port ${port}: must be 1-65535`);
  return String(n);
}

/** One sandbox. Sandbox.create() boots one; kill() (or `await using`) deletes it. */
export class Sandbox {
  constructor(client, info) {
    this.client = client;
    this.info = info;
    this.id = info.id;
    this.files = new Files(this);
    this.processes = new Processes(this);
    this.pty = new Ptys(this);
  }

  get state() {
    return this.info.state;
  }

  /**
   * POST /v1/sandboxes. opts: template, vcpus, memoryMib, diskMib, env, metadata,
   * network {allow, deny}, secrets {ENV: secret}, timeout (s of running time),
   * onTimeout ("kill" | "pause"), idleTimeout (s), snapshot (restore it), boot,
   * tenant (unix socket), autoResume (traffic to its ports resumes it when paused),
   * and the connection (client, or socketPath/host/token).
   */
  static async create(opts = {}) {
    const c = Airlock.from(opts);
    return new Sandbox(c, await c.conn.json("POST /v1/sandboxes", {}, { json: createBody(opts) }));
  }

  /** A new sandbox from a snapshot id. */
  static restore(snapshotId, opts = {}) {
    return Sandbox.create({ ...opts, snapshot: snapshotId });
  }

  /** GET /v1/sandboxes/{id} (deleted ones too). */
  static async get(id, opts = {}) {
    const c = Airlock.from(opts);
    return new Sandbox(c, await c.conn.json("GET /v1/sandboxes/{id}", { id }));
  }

  /** get() that resumes a paused sandbox; refuses one that is not paused or running. */
  static async connect(id, opts = {}) {
    const sb = await Sandbox.get(id, opts);
    if (sb.state === "paused") await sb.resume();
    else if (sb.state !== "running") throw new ConflictError(`sandbox ${id} is ${sb.state}: only a running or paused sandbox can be connected to`, { code: "conflict", status: 409 });
    return sb;
  }

  /** GET /v1/sandboxes: opts all (deleted ones too), metadata {k: v} (all must match). */
  static async list(opts = {}) {
    const c = Airlock.from(opts);
    const query = drop({ all: opts.all ? "true" : undefined });
    for (const [k, v] of Object.entries(opts.metadata || {})) query[`metadata.${k}`] = v;
    const r = await c.conn.json("GET /v1/sandboxes", {}, { query });
    return r.sandboxes.map((s) => new Sandbox(c, s));
  }

  _set(info) {
    this.info = info;
    return this;
  }

  async refresh() {
    return this._set(await this.client.conn.json("GET /v1/sandboxes/{id}", { id: this.id }));
  }

  /** DELETE /v1/sandboxes/{id} (idempotent). */
  async kill() {
    return this._set(await this.client.conn.json("DELETE /v1/sandboxes/{id}", { id: this.id }));
  }

  /** `await using sb = await Sandbox.create()` deletes it at the end of the block. */
  async [asyncDispose]() {
    await this.kill();
  }

  async pause() {
    return this._set(await this.client.conn.json("POST /v1/sandboxes/{id}/pause", { id: this.id }));
  }

  async resume() {
    return this._set(await this.client.conn.json("POST /v1/sandboxes/{id}/resume", { id: this.id }));
  }

  /** POST /v1/sandboxes/{id}/snapshots → a Snapshot. */
  async snapshot({ name } = {}) {
    return new Snapshot(this.client, await this.client.conn.json("POST /v1/sandboxes/{id}/snapshots", { id: this.id }, { json: drop({ name }) }));
  }

  /** POST /v1/sandboxes/{id}/fork → `count` new running Sandboxes. */
  async fork({ count, secrets } = {}) {
    const r = await this.client.conn.json("POST /v1/sandboxes/{id}/fork", { id: this.id }, { json: drop({ count, secrets }) });
    return r.sandboxes.map((s) => new Sandbox(this.client, s));
  }

  /** POST /v1/sandboxes/{id}/recover (a sandbox in state error). */
  async recover({ memory } = {}) {
    return this._set(await this.client.conn.json("POST /v1/sandboxes/{id}/recover", { id: this.id }, { json: drop({ memory }) }));
  }

  /** POST /v1/sandboxes/{id}/timeout: {timeout, onTimeout, idleTimeout} (seconds; 0 = none), autoResume. */
  async setTimeout({ timeout, onTimeout, idleTimeout, autoResume } = {}) {
    return this._set(await this.client.conn.json("POST /v1/sandboxes/{id}/timeout", { id: this.id }, {
      json: drop({ timeout_s: timeout, on_timeout: onTimeout, idle_timeout_s: idleTimeout, auto_resume: autoResume }),
    }));
  }

  /** The exposed ports of a ports answer into info.ports (as the sandbox object has them). */
  _keepPorts(answer) {
    this.info = {
      ...this.info,
      ports: answer.ports.filter((p) => p.exposed).map((p) => ({ port: p.port, public: p.public, url: p.url })),
      auto_resume: answer.auto_resume,
    };
    return answer;
  }

  /**
   * GET /v1/sandboxes/{id}/ports: {ports: [{port, exposed, public, url, path_url, requests, bytes_in,
   * bytes_out, errors}], traffic_token, auto_resume, proxy} (docs/api.md, "Ports"); url and path_url are
   * null without a proxy.
   */
  async ports() {
    return this._keepPorts(await this.client.conn.json("GET /v1/sandboxes/{id}/ports", { id: this.id }));
  }

  /** PUT /v1/sandboxes/{id}/ports/{port}: exposes the guest's port on the proxy (public: without the traffic token). */
  async expose(port, { public: pub = false } = {}) {
    return this._keepPorts(await this.client.conn.json("PUT /v1/sandboxes/{id}/ports/{port}", { id: this.id, port: portNumber(port) }, { json: { public: !!pub } }));
  }

  /** DELETE /v1/sandboxes/{id}/ports/{port} (NotFoundError when it is not exposed). */
  async unexpose(port) {
    return this._keepPorts(await this.client.conn.json("DELETE /v1/sandboxes/{id}/ports/{port}", { id: this.id, port: portNumber(port) }));
  }

  /** The host name of the port's URL on the daemon's proxy, or null (not exposed, or no proxy). */
  async getHost(port) {
    const n = Number(portNumber(port));
    const p = (await this.ports()).ports.find((x) => x.port === n && x.url);
    return p ? new URL(p.url).host : null;
  }

  /**
   * GET /v1/sandboxes/{id}/ports/{port}/connect (Upgrade: airlock-tcp/1): a net.Socket carrying a TCP
   * stream to the guest's port (which need not be exposed). A paused sandbox is resumed when its
   * auto_resume is on, else ConflictError; GuestError when nothing listens.
   */
  connectPort(port) {
    const conn = this.client.conn;
    const { path } = conn.resolve("GET /v1/sandboxes/{id}/ports/{port}/connect", { id: this.id, port: portNumber(port) });
    return upgradeRequest(conn, path, "airlock-tcp/1", "GET …/connect", `port ${port} of ${this.id}`, (socket, head) => {
      if (head && head.length) socket.unshift(head);
      return socket;
    });
  }

  /** GET /v1/sandboxes/{id}/network: {sandbox, policy, guest, dropped}. */
  getNetwork() {
    return this.client.conn.json("GET /v1/sandboxes/{id}/network", { id: this.id });
  }

  /** PUT /v1/sandboxes/{id}/network: replaces the egress policy {allow, deny}. */
  setNetwork({ allow = [], deny = [] } = {}) {
    return this.client.conn.json("PUT /v1/sandboxes/{id}/network", { id: this.id }, { json: { allow, deny } });
  }

  /** GET /v1/sandboxes/{id}/metrics. */
  metrics({ resume } = {}) {
    return this.client.conn.json("GET /v1/sandboxes/{id}/metrics", { id: this.id }, { query: resumeQuery(resume) });
  }

  /** Events of this sandbox (see Airlock.events). */
  events(opts = {}) {
    return this.client.events({ ...opts, sandbox: this.id });
  }

  /**
   * Runs a command to completion: cmd is a string (sh -c) or an argv array.
   * opts: onStdout / onStderr (called with text as it arrives: the exec is
   * streamed), stdin (string or bytes), timeout (s), env, cwd, uid, gid,
   * maxOutputBytes, resume (resume a paused sandbox first), signal.
   * Answers {exitCode, signal, timedOut, stdout, stderr, stdoutBytes, stderrBytes, ...};
   * a command that exits non-zero is not an error.
   */
  async exec(cmd, opts = {}) {
    const body = execBody(cmd, opts);
    const query = resumeQuery(opts.resume);
    if (!opts.onStdout && !opts.onStderr && !opts.stream) {
      body.max_output_bytes = opts.maxOutputBytes;
      const r = await this.client.conn.json("POST /v1/sandboxes/{id}/exec", { id: this.id }, { json: drop(body), query, signal: opts.signal });
      const out = decodeData(r.stdout, r.stdout_encoding);
      const err = decodeData(r.stderr, r.stderr_encoding);
      return {
        processId: r.process_id, exitCode: r.exit_code, signal: r.signal, timedOut: r.timed_out,
        stdout: out.toString("utf8"), stderr: err.toString("utf8"), stdoutBytes: out, stderrBytes: err,
        stdoutTruncated: r.stdout_truncated, stderrTruncated: r.stderr_truncated, durationMs: r.duration_ms,
      };
    }
    body.stream = true;
    const res = await this.client.conn.request("POST /v1/sandboxes/{id}/exec", { id: this.id }, { json: body, query, signal: opts.signal });
    const bufs = { stdout: [], stderr: [] };
    const decs = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const cbs = { stdout: opts.onStdout, stderr: opts.onStderr };
    let processId = null;
    let exit = null;
    for await (const line of jsonLines(res)) {
      if (line.type === "start") processId = line.process_id;
      else if (line.type === "stdout" || line.type === "stderr") {
        const b = decodeData(line.data, line.encoding);
        bufs[line.type].push(b);
        const cb = cbs[line.type];
        if (cb) {
          const text = decs[line.type].decode(b, { stream: true });
          if (text) await cb(text);
        }
      } else if (line.type === "exit") exit = line;
      else if (line.type === "error") throw errorFromBody(0, line);
    }
    for (const k of ["stdout", "stderr"]) {
      const rest = decs[k].decode();
      if (rest && cbs[k]) await cbs[k](rest);
    }
    if (!exit) throw new ProtocolError(`exec in ${this.id}: the stream ended without an exit line`, { code: "protocol" });
    const out = Buffer.concat(bufs.stdout);
    const err = Buffer.concat(bufs.stderr);
    return {
      processId, exitCode: exit.exit_code, signal: exit.signal, timedOut: exit.timed_out,
      stdout: out.toString("utf8"), stderr: err.toString("utf8"), stdoutBytes: out, stderrBytes: err,
      stdoutTruncated: false, stderrTruncated: false, durationMs: exit.duration_ms,
    };
  }
}

/** Creates a sandbox, runs fn(sandbox), deletes the sandbox whatever happens. */
export async function withSandbox(opts, fn) {
  if (typeof opts === "function") {
    fn = opts;
    opts = {};
  }
  const sb = await Sandbox.create(opts);
  try {
    return await fn(sb);
  } finally {
    await sb.kill();
  }
}

/** A sandbox's background processes. */
export class Processes {
  constructor(sandbox) {
    this.sandbox = sandbox;
  }
  /**
   * POST /v1/sandboxes/{id}/processes: starts cmd detached. opts: env, cwd, uid,
   * gid, timeout (s; default none), stdin (string or bytes, all of it now) or
   * stdinStream (true: keep stdin open for writeStdin), pty {rows, cols}, tag, resume.
   */
  async start(cmd, opts = {}) {
    const body = execBody(cmd, opts);
    if (opts.stdinStream) body.stdin_stream = true;
    if (opts.pty) body.pty = { rows: opts.pty.rows ?? 24, cols: opts.pty.cols ?? 80 };
    if (opts.tag !== undefined) body.tag = opts.tag;
    const info = await this.sandbox.client.conn.json("POST /v1/sandboxes/{id}/processes", { id: this.sandbox.id }, { json: body, query: resumeQuery(opts.resume) });
    return new Process(this.sandbox, info);
  }
  /** GET /v1/sandboxes/{id}/processes → Process objects (running and recently exited). */
  async list() {
    const r = await this.sandbox.client.conn.json("GET /v1/sandboxes/{id}/processes", { id: this.sandbox.id });
    return r.processes.map((p) => new Process(this.sandbox, p));
  }
  /** The process with this id (GET …/processes/{pid}). */
  async get(pid) {
    return new Process(this.sandbox, { id: pid }).refresh();
  }
}

/** A background process of a sandbox. */
export class Process {
  constructor(sandbox, info) {
    this.sandbox = sandbox;
    this.info = info;
    this.id = info.id;
  }
  get state() {
    return this.info.state;
  }
  get exitCode() {
    return this.info.exit_code;
  }
  _conn() {
    return this.sandbox.client.conn;
  }
  _p() {
    return { id: this.sandbox.id, pid: this.id };
  }
  async refresh() {
    this.info = await this._conn().json("GET /v1/sandboxes/{id}/processes/{pid}", this._p());
    return this;
  }
  /**
   * The output as an async iterator of {type: "stdout"|"stderr", data: Buffer,
   * text} and, at the end with follow, {type: "exit", exitCode, signal, timedOut,
   * durationMs}; {type: "dropped", bytes} when the kept log lost output.
   * opts: from ("start" | "now"; default start), follow (default true), signal.
   */
  async *output({ from = "start", follow = true, signal } = {}) {
    const res = await this._conn().request("GET /v1/sandboxes/{id}/processes/{pid}/output", this._p(), {
      query: { from, follow: follow ? "true" : "false" }, signal,
    });
    for await (const line of jsonLines(res)) {
      if (line.type === "stdout" || line.type === "stderr") {
        const data = decodeData(line.data, line.encoding);
        yield { type: line.type, data, get text() { return data.toString("utf8"); } };
      } else if (line.type === "exit") {
        yield { type: "exit", exitCode: line.exit_code, signal: line.signal, timedOut: line.timed_out, durationMs: line.duration_ms };
      } else if (line.type === "dropped") {
        yield { type: "dropped", bytes: line.bytes };
      } else if (line.type === "error") {
        throw errorFromBody(0, line);
      }
    }
  }
  [Symbol.asyncIterator]() {
    return this.output();
  }
  /** POST …/stdin: writes bytes (or text) to the process's stdin; eof closes it after them. */
  async writeStdin(data, { eof = false } = {}) {
    await this._conn().json("POST /v1/sandboxes/{id}/processes/{pid}/stdin", this._p(), {
      body: toBuffer(data), headers: { "Content-Type": "application/octet-stream" }, query: { eof: eof ? "true" : "false" },
    });
  }
  closeStdin() {
    return this.writeStdin(Buffer.alloc(0), { eof: true });
  }
  /** POST …/signal: "TERM", "KILL", "INT", … or a number. */
  async signal(sig = "TERM") {
    await this._conn().json("POST /v1/sandboxes/{id}/processes/{pid}/signal", this._p(), {
      json: { signal: typeof sig === "string" ? sig.replace(/^SIG/, "") : sig },
    });
  }
  kill() {
    return this.signal("KILL");
  }
  /** POST …/resize (PTY processes). */
  async resize(rows, cols) {
    await this._conn().json("POST /v1/sandboxes/{id}/processes/{pid}/resize", this._p(), { json: { rows, cols } });
  }
  /**
   * Waits for the process to exit and answers its object. timeout (s): without
   * one it waits as long as it takes; with one, throws TimeoutError if it still runs.
   */
  async wait({ timeout } = {}) {
    const deadline = timeout !== undefined ? Date.now() + timeout * 1000 : Infinity;
    for (;;) {
      const left = Math.ceil((deadline - Date.now()) / 1000);
      const step = Math.max(1, Math.min(3600, Number.isFinite(left) ? left : 3600));
      const res = await this._conn().request("GET /v1/sandboxes/{id}/processes/{pid}/wait", this._p(), { query: { timeout_s: step }, ok: [408] });
      const chunks = [];
      for await (const c of res) chunks.push(c);
      this.info = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      if (res.statusCode !== 408) return this.info;
      if (Date.now() >= deadline) throw new TimeoutError(`process ${this.id} of ${this.sandbox.id} still runs after ${timeout} s`, { code: "timeout", status: 408, body: this.info });
    }
  }
  /** Attaches to the process's terminal (GET …/attach, Upgrade: airlock-pty/1) → a Pty. */
  attach() {
    return Pty.attach(this);
  }
}

/** Starts terminal sessions: a process with a PTY, attached. */
export class Ptys {
  constructor(sandbox) {
    this.sandbox = sandbox;
  }
  /** Starts cmd (default: sh) on a PTY of rows × cols and attaches to it → a Pty. */
  async create({ cmd = ["sh"], rows = 24, cols = 80, env, cwd, uid, gid, tag, resume } = {}) {
    const p = await this.sandbox.processes.start(cmd, { pty: { rows, cols }, env, cwd, uid, gid, tag, resume });
    return p.attach();
  }
}

/**
 * An attached terminal. Bytes from the terminal arrive through onData
 * callbacks and the async iterator; wait() answers the exit object.
 */
export class Pty {
  constructor(process, socket) {
    this.process = process;
    this.socket = socket;
    this._buf = Buffer.alloc(0);
    this._queue = [];
    this._queued = 0;
    this._waiters = [];
    this._listeners = [];
    this._ended = false;
    this.exit = null;
    this._exitWaiters = [];
    socket.on("data", (d) => this._onBytes(d));
    socket.on("close", () => this._end(null));
    socket.on("error", (e) => this._end(e));
  }

  static attach(process) {
    const conn = process._conn();
    const p = process._p();
    const { path } = conn.resolve("GET /v1/sandboxes/{id}/processes/{pid}/attach", p);
    return upgradeRequest(conn, path, "airlock-pty/1", "GET …/attach", `attach to ${p.pid} of ${p.id}`, (socket, head) => {
      const pty = new Pty(process, socket);
      if (head && head.length) pty._onBytes(head);
      return pty;
    });
  }

  _onBytes(d) {
    this._buf = this._buf.length ? Buffer.concat([this._buf, d]) : d;
    while (this._buf.length >= 5) {
      const type = this._buf[0];
      const len = this._buf.readUInt32BE(1);
      // SECURITY: the length comes from the daemon; bound it before waiting for that much.
      if (len > PTY_MAX_PAYLOAD) {
        this._end(new ProtocolError(`pty: a message of ${len} bytes (at most ${PTY_MAX_PAYLOAD})`, { code: "protocol" }));
        this.socket.destroy();
        return;
      }
      if (this._buf.length < 5 + len) break;
      const payload = Buffer.from(this._buf.subarray(5, 5 + len));
      this._buf = this._buf.subarray(5 + len);
      if (type === 2) {
        for (const l of this._listeners) l(payload);
        const w = this._waiters.shift();
        if (w) w.resolve({ value: payload, done: false });
        else if (!this._listeners.length) {
          this._queue.push(payload);
          this._queued += payload.length;
          if (this._queued > PTY_MAX_QUEUED_BYTES) this.socket.pause();
        }
      } else if (type === 3) {
        try {
          const e = JSON.parse(payload.toString("utf8"));
          this.exit = { exitCode: e.exit_code, signal: e.signal, timedOut: e.timed_out, durationMs: e.duration_ms };
        } catch {
          this.exit = { exitCode: null, signal: null, timedOut: false, durationMs: null };
        }
      }
    }
  }

  _end(err) {
    if (this._ended) return;
    this._ended = true;
    this._error = err;
    for (const w of this._waiters.splice(0)) err ? w.reject(err) : w.resolve({ value: undefined, done: true });
    for (const w of this._exitWaiters.splice(0)) w(this.exit);
  }

  /** Calls fn(Buffer) with every chunk from the terminal, first those not read yet. */
  onData(fn) {
    for (const c of this._queue.splice(0)) fn(c);
    this._queued = 0;
    this._listeners.push(fn);
    this.socket.resume();
  }

  [Symbol.asyncIterator]() {
    return {
      next: () => {
        if (this._queue.length) {
          const value = this._queue.shift();
          this._queued -= value.length;
          if (this._queued <= PTY_MAX_QUEUED_BYTES) this.socket.resume();
          return Promise.resolve({ value, done: false });
        }
        if (this._ended) return this._error ? Promise.reject(this._error) : Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => this._waiters.push({ resolve, reject }));
      },
      return: () => {
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }

  _send(type, payload) {
    for (let off = 0; off < payload.length || (off === 0 && payload.length === 0); off += PTY_MAX_PAYLOAD) {
      const part = payload.subarray(off, off + PTY_MAX_PAYLOAD);
      const h = Buffer.alloc(5);
      h[0] = type;
      h.writeUInt32BE(part.length, 1);
      this.socket.write(Buffer.concat([h, part]));
      if (payload.length === 0) break;
    }
  }

  /** Sends keys to the terminal (text or bytes; "\x03" is Ctrl-C). */
  write(data) {
    this._send(0, toBuffer(data));
  }

  resize(rows, cols) {
    this._send(1, Buffer.from(JSON.stringify({ rows, cols })));
  }

  /** Waits for the daemon to close (after the exit message); answers the exit object (null if it closed without one). */
  wait() {
    if (this._ended) return Promise.resolve(this.exit);
    return new Promise((resolve) => this._exitWaiters.push(resolve));
  }

  /** Detaches (the process keeps running). */
  close() {
    this.socket.end();
    this.socket.destroy();
  }
}

/** A sandbox's files. Paths are absolute guest paths. */
export class Files {
  constructor(sandbox) {
    this.sandbox = sandbox;
  }
  _conn() {
    return this.sandbox.client.conn;
  }
  _id() {
    return { id: this.sandbox.id };
  }
  /** GET …/files: the file's bytes (a Buffer). */
  read(path, { resume } = {}) {
    return this._conn().bytes("GET /v1/sandboxes/{id}/files", this._id(), { query: { path, ...resumeQuery(resume) } });
  }
  async readText(path, opts = {}) {
    return (await this.read(path, opts)).toString("utf8");
  }
  /** The file as a stream (a Readable of Buffers), for large files. */
  async readStream(path, { resume } = {}) {
    return this._conn().request("GET /v1/sandboxes/{id}/files", this._id(), { query: { path, ...resumeQuery(resume) } });
  }
  /** PUT …/files: data is a string, bytes, a Readable or an async iterable; mode an octal number or string. → {path, size} */
  write(path, data, { mode, resume } = {}) {
    const body = typeof data === "string" || data instanceof Uint8Array || data instanceof ArrayBuffer ? toBuffer(data) : data;
    return this._conn().json("PUT /v1/sandboxes/{id}/files", this._id(), {
      query: drop({ path, mode: typeof mode === "number" ? mode.toString(8).padStart(4, "0") : mode, ...resumeQuery(resume) }),
      body, headers: { "Content-Type": "application/octet-stream" },
    });
  }
  writeText(path, text, opts = {}) {
    return this.write(path, String(text), opts);
  }
  /** GET …/files/stat: {name, type, size, mode, uid, gid, mtime_ms, target}. */
  stat(path) {
    return this._conn().json("GET /v1/sandboxes/{id}/files/stat", this._id(), { query: { path } });
  }
  /** stat() that answers false for a path that does not exist. */
  async exists(path) {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e.code === "not_found") return false;
      throw e;
    }
  }
  /** GET …/files/list: the directory's entries (stat objects). */
  async list(path) {
    return (await this._conn().json("GET /v1/sandboxes/{id}/files/list", this._id(), { query: { path } })).entries;
  }
  /** POST …/files/mkdir (parents: true by default). */
  async mkdir(path, { parents = true, mode } = {}) {
    await this._conn().json("POST /v1/sandboxes/{id}/files/mkdir", this._id(), { json: drop({ path, parents, mode }) });
  }
  /** POST …/files/remove. */
  async remove(path, { recursive = false } = {}) {
    await this._conn().json("POST /v1/sandboxes/{id}/files/remove", this._id(), { json: { path, recursive } });
  }
  /** POST …/files/rename. */
  async rename(path, to) {
    await this._conn().json("POST /v1/sandboxes/{id}/files/rename", this._id(), { json: { path, to } });
  }
  /**
   * Uploads a local file or directory tree into the guest directory remoteDir
   * (PUT …/archive), as `docker cp`: localPath "./proj" lands at remoteDir/proj.
   */
  async upload(localPath, remoteDir) {
    await this.uploadArchive(remoteDir, Readable.from(packArchive(localPath)));
  }
  /** PUT …/archive with a tar stream you made: extracted into remoteDir. */
  async uploadArchive(remoteDir, tar) {
    const body = typeof tar === "string" || tar instanceof Uint8Array ? toBuffer(tar) : tar;
    await this._conn().json("PUT /v1/sandboxes/{id}/archive", this._id(), {
      query: { path: remoteDir }, body, headers: { "Content-Type": "application/x-tar" },
    });
  }
  /**
   * Downloads a guest file or directory into the local directory localDir
   * (GET …/archive), as `docker cp`: "/work/out" lands at localDir/out. The
   * archive is checked entry by entry (no name leaves localDir; see tar.js).
   * opts: maxBytes (default 1 GiB).
   */
  async download(remotePath, localDir, { maxBytes } = {}) {
    const res = await this.downloadArchive(remotePath);
    await extractArchive(res, localDir, drop({ maxBytes }));
  }
  /** GET …/archive: the raw tar stream (a Readable). */
  downloadArchive(remotePath) {
    return this._conn().request("GET /v1/sandboxes/{id}/archive", this._id(), { query: { path: remotePath } });
  }
}

export { Connection };
export default Sandbox;
