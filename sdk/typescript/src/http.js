// SPDX-License-Identifier: Apache-2.0
// The connection to airlockd: its unix socket (no token; the operator's) or its
// TCP listener with a bearer token, chosen as the CLI chooses (src/cli/cli-main.c):
// host option, else $AIRLOCK_HOST (tcp://ADDR:PORT), else the socket option, else
// $AIRLOCK_SOCKET, else /run/airlock/airlockd.sock; token option, else $AIRLOCK_TOKEN.
import http from "node:http";
import { Readable } from "node:stream";
import { ROUTES } from "./routes.js";
import { AirlockError, ConnectionError, ProtocolError, errorFromBody } from "./errors.js";

export const DEFAULT_SOCKET = "/run/airlock/airlockd.sock";
/** At most this much of an answer is read into memory as JSON or an error body. */
const MAX_JSON_ANSWER = 256 * 1024 * 1024;

function parseHost(spec) {
  let p = String(spec);
  for (const scheme of ["tcp://", "http://"]) if (p.startsWith(scheme)) p = p.slice(scheme.length);
  p = p.replace(/\/+$/, "");
  let host, portStr;
  if (p.startsWith("[")) {
    const end = p.indexOf("]");
    if (end < 0 || p[end + 1] !== ":") throw new TypeError(`host: expected tcp://[ADDR]:PORT, got "${spec}"`);
    host = p.slice(1, end);
    portStr = p.slice(end + 2);
  } else {
    const c = p.lastIndexOf(":");
    if (c < 0) throw new TypeError(`host: expected tcp://ADDR:PORT (e.g. tcp://127.0.0.1:7070), got "${spec}"`);
    host = p.slice(0, c);
    portStr = p.slice(c + 1);
  }
  const port = Number(portStr);
  if (!host || host.includes("/") || !/^[0-9]+$/.test(portStr) || port < 1 || port > 65535)
    throw new TypeError(`host: expected tcp://ADDR:PORT (e.g. tcp://127.0.0.1:7070), got "${spec}"`);
  return { host, port };
}

function qs(query) {
  if (!query) return "";
  const parts = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    for (const one of Array.isArray(v) ? v : [v]) parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(String(one))}`);
  }
  return parts.length ? `?${parts.join("&")}` : "";
}

async function readAll(res, limit = MAX_JSON_ANSWER) {
  const chunks = [];
  let n = 0;
  for await (const c of res) {
    n += c.length;
    if (n > limit) {
      res.destroy();
      throw new ProtocolError(`the daemon's answer passed ${limit} bytes`, { code: "protocol", status: res.statusCode });
    }
    chunks.push(c);
  }
  return Buffer.concat(chunks);
}

/** The HTTP connection settings and the request primitive every SDK call goes through. */
export class Connection {
  constructor(opts = {}) {
    const env = opts.env || process.env;
    let host = opts.host;
    if (host === undefined && opts.socketPath === undefined && env.AIRLOCK_HOST) host = env.AIRLOCK_HOST;
    if (host) {
      const { host: h, port } = parseHost(host);
      this.host = h;
      this.port = port;
      this.socketPath = null;
    } else {
      this.host = null;
      this.port = null;
      this.socketPath = opts.socketPath || env.AIRLOCK_SOCKET || DEFAULT_SOCKET;
    }
    const token = opts.token !== undefined ? opts.token : env.AIRLOCK_TOKEN;
    this.token = token ? String(token) : null;
    if (this.token && /[\r\n]/.test(this.token)) throw new TypeError("token: must be one line");
    /** Milliseconds to wait for a request's answer head (0: no limit). */
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 0;
  }

  describe() {
    return this.socketPath ? `airlockd at unix:${this.socketPath}` : `airlockd at tcp://${this.host}:${this.port}`;
  }

  /** Options of node's http.request for METHOD and a path with its query. */
  httpOptions(method, path, headers = {}) {
    const h = { ...headers };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    const o = { method, path, headers: h, agent: false };
    if (this.socketPath) {
      o.socketPath = this.socketPath;
      h.Host = "airlock";
    } else {
      o.host = this.host;
      o.port = this.port;
    }
    return o;
  }

  /** METHOD and the path with its query for a route of ROUTES ("METHOD /template") and its params. */
  resolve(route, params = {}, query = undefined) {
    if (!Object.prototype.hasOwnProperty.call(ROUTES, route)) throw new Error(`SDK bug: route "${route}" is not in ROUTES`);
    const sp = route.indexOf(" ");
    const method = route.slice(0, sp);
    const path = route.slice(sp + 1).replace(/\{(\w+)\}/g, (_, k) => {
      if (params[k] === undefined || params[k] === null || params[k] === "") throw new TypeError(`${k}: required`);
      return encodeURIComponent(String(params[k]));
    }) + qs(query);
    return { method, path, sp };
  }

  /**
   * Sends one request of the route table and answers the response (a stream,
   * not read yet). route: "METHOD /template"; params fill the template.
   * Options: query, json (a body to send as JSON), body (Buffer, string,
   * Uint8Array, Readable or async iterable), headers, ok (statuses that are not
   * errors besides 2xx), signal (an AbortSignal).
   * Errors: an API error answer is thrown as its typed error.
   */
  async request(route, params = {}, opts = {}) {
    const { method, path, sp } = this.resolve(route, params, opts.query);
    const headers = { ...(opts.headers || {}) };
    let body = opts.body;
    if (opts.json !== undefined) {
      body = Buffer.from(JSON.stringify(opts.json));
      headers["Content-Type"] = "application/json";
    }
    if (typeof body === "string") body = Buffer.from(body);
    else if (body instanceof Uint8Array && !Buffer.isBuffer(body)) body = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    if (Buffer.isBuffer(body)) headers["Content-Length"] = String(body.length);
    else if (body === undefined && method !== "GET" && method !== "DELETE") headers["Content-Length"] = "0";
    const what = `${method} ${route.slice(sp + 1)}`;
    const res = await new Promise((resolve, reject) => {
      const req = http.request(this.httpOptions(method, path, headers));
      let timer = null;
      const fail = (err) => {
        if (timer) clearTimeout(timer);
        reject(err);
      };
      req.on("error", (err) => {
        if (err instanceof AirlockError) return fail(err);
        fail(new ConnectionError(`${what}: cannot reach ${this.describe()}: ${err.message}` +
          (this.socketPath ? " (is airlockd running? point socketPath / AIRLOCK_SOCKET at its socket, or host / AIRLOCK_HOST at its TCP listener)" : ""),
          { code: "connection" }));
      });
      req.on("response", (r) => {
        if (timer) clearTimeout(timer);
        resolve(r);
      });
      if (opts.signal) {
        if (opts.signal.aborted) req.destroy(new ConnectionError(`${what}: aborted`, { code: "aborted" }));
        opts.signal.addEventListener("abort", () => req.destroy(new ConnectionError(`${what}: aborted`, { code: "aborted" })), { once: true });
      }
      if (this.requestTimeoutMs > 0)
        timer = setTimeout(() => req.destroy(new ConnectionError(`${what}: no answer within ${this.requestTimeoutMs} ms`, { code: "connection" })), this.requestTimeoutMs);
      if (body === undefined || Buffer.isBuffer(body)) {
        req.end(body);
      } else {
        const src = body instanceof Readable ? body : Readable.from(body);
        src.on("error", (err) => req.destroy(err));
        src.pipe(req);
      }
    });
    const ok = opts.ok || [];
    if (res.statusCode >= 300 && !ok.includes(res.statusCode)) {
      const raw = await readAll(res, 1024 * 1024).catch(() => Buffer.alloc(0));
      let parsed = null;
      try {
        parsed = JSON.parse(raw.toString("utf8"));
      } catch {
        parsed = null;
      }
      const ra = res.headers["retry-after"];
      throw errorFromBody(res.statusCode, parsed, { retryAfter: ra !== undefined ? Number(ra) : null, what });
    }
    return res;
  }

  /** request() and the answer parsed as JSON (null for an empty body, e.g. 204). */
  async json(route, params, opts) {
    const res = await this.request(route, params, opts);
    const raw = await readAll(res);
    if (!raw.length) return null;
    try {
      return JSON.parse(raw.toString("utf8"));
    } catch (e) {
      throw new ProtocolError(`${route}: the answer is not JSON: ${e.message}`, { code: "protocol", status: res.statusCode });
    }
  }

  /** request() and the answer as bytes. */
  async bytes(route, params, opts) {
    return readAll(await this.request(route, params, opts), Infinity);
  }
}

/** The longest JSON line of a streamed answer the SDK holds (the daemon's are a chunk of output each). */
export const MAX_LINE_BYTES = 32 * 1024 * 1024;

/**
 * JSON lines of a streamed answer, as they arrive; destroys the answer when the loop stops early.
 * SECURITY: a line's length is bounded (MAX_LINE_BYTES) before more is buffered; its
 * data is the guest's output, handed to the caller as bytes, never interpreted.
 */
export async function* jsonLines(res) {
  let buf = "";
  const dec = new TextDecoder();
  try {
    for await (const chunk of res) {
      buf += dec.decode(chunk, { stream: true });
      if (buf.length > MAX_LINE_BYTES && buf.indexOf("\n") < 0)
        throw new ProtocolError(`a streamed line passed ${MAX_LINE_BYTES} bytes`, { code: "protocol" });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        let obj;
        try {
          obj = JSON.parse(line);
        } catch (e) {
          throw new ProtocolError(`a streamed line is not JSON (${e.message}): ${line.slice(0, 200)}`, { code: "protocol" });
        }
        yield obj;
      }
    }
    buf += dec.decode();
    if (buf.trim()) throw new ProtocolError(`the stream ended within a line: ${buf.slice(0, 200)}`, { code: "protocol" });
  } finally {
    res.destroy();
  }
}
