// SPDX-License-Identifier: Apache-2.0
// Templates (docs/api.md, "Templates"): built from a Dockerfile or imported from an image.
// Build and import upload a stream (a build context as a tar, an image archive) and read
// the daemon's progress lines (application/x-ndjson).
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { Readable } from "node:stream";
import { jsonLines } from "./http.js";
import { packEntry, archiveEnd } from "./tar.js";
import { ProtocolError, errorFromBody } from "./errors.js";

export const AIRLOCK_DOCKERFILE = ".airlock-Dockerfile";

function escapeRe(c) {
  return c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

/** One path component's glob as a RegExp: * ? [...] ([^...] or [!...]) and \ escapes. */
function componentRegex(pat) {
  let out = "";
  for (let i = 0; i < pat.length; i++) {
    const c = pat[i];
    let end = -1;
    if (c === "[") {
      const j = i + 1 + (pat[i + 1] === "!" || pat[i + 1] === "^" ? 1 : 0);
      end = j < pat.length ? pat.indexOf("]", j + 1) : -1;
    }
    if (c === "*") out += ".*";
    else if (c === "?") out += ".";
    else if (c === "\\" && i + 1 < pat.length) out += escapeRe(pat[++i]);
    else if (end > 0) {
      let body = pat.slice(i + 1, end);
      const neg = body[0] === "!" || body[0] === "^";
      if (neg) body = body.slice(1);
      out += `[${neg ? "^" : ""}${body.replace(/\\/g, "\\\\")}]`;
      i = end;
    } else out += escapeRe(c);
  }
  return new RegExp(`^${out}$`, "s");
}

/** A path's components, cleaned ("" and "." dropped, ".." taking one back); null when it leaves its root. */
function clean(p) {
  const comps = [];
  for (const c of p.split("/")) {
    if (c === "" || c === ".") continue;
    if (c === "..") {
      if (!comps.length) return null;
      comps.pop();
    } else comps.push(c);
  }
  return comps;
}

/**
 * .dockerignore as `airlock template build` reads it (docs/cli.md, "Templates"): "!" exceptions,
 * "**" components, the last matching pattern decides, a pattern that matches a directory matches
 * all under it.
 */
export class DockerIgnore {
  constructor(text = "") {
    this.patterns = [];
    for (const line of String(text).split("\n")) {
      let p = line.trim();
      if (!p || p.startsWith("#")) continue;
      const exception = p.startsWith("!");
      if (exception) p = p.slice(1).trim();
      const comps = clean(p);
      if (comps && comps.length)
        this.patterns.push({ exception, comps: comps.map((c) => (c === "**" ? "**" : componentRegex(c))) });
    }
    this.hasExceptions = this.patterns.some((p) => p.exception);
  }

  static async load(dir) {
    try {
      return new DockerIgnore(await fsp.readFile(path.join(dir, ".dockerignore"), "utf8"));
    } catch (e) {
      if (e.code === "ENOENT") return new DockerIgnore();
      throw e;
    }
  }

  static match(pat, comps) {
    if (!pat.length) return !comps.length;
    if (pat[0] === "**") {
      for (let k = 0; k <= comps.length; k++) if (DockerIgnore.match(pat.slice(1), comps.slice(k))) return true;
      return false;
    }
    return comps.length > 0 && pat[0].test(comps[0]) && DockerIgnore.match(pat.slice(1), comps.slice(1));
  }

  /** Whether path ("a/b", relative to the context) is left out. */
  excludes(p) {
    const comps = clean(p) || [];
    let excluded = false;
    for (const { exception, comps: pat } of this.patterns) {
      if (exception !== excluded) continue;
      for (let k = 1; k <= comps.length; k++) {
        if (DockerIgnore.match(pat, comps.slice(0, k))) {
          excluded = !exception;
          break;
        }
      }
    }
    return excluded;
  }
}

/**
 * The build context dir as a tar stream, entries named relative to it: .dockerignore (ignore)
 * honoured but keep (the Dockerfile's path) always sent; symlinks as symlinks; sockets, fifos
 * and devices left out (their names pushed onto skipped); extra, a file outside the context,
 * added as .airlock-Dockerfile. A directory left out is still walked when an exception may
 * bring something back under it; its header is written before the first entry in it.
 */
export async function* packContext(dir, { ignore = null, keep = null, extra = null, skipped = [] } = {}) {
  async function* ensure(chain) {
    for (const d of chain) {
      if (d.written) continue;
      d.written = true;
      yield* packEntry(d.src, d.name, await fsp.lstat(d.src));
    }
  }
  async function* walk(src, name, parents) {
    for (const leaf of (await fsp.readdir(src)).sort()) {
      const csrc = path.join(src, leaf);
      const cname = name ? `${name}/${leaf}` : leaf;
      if (extra && cname === AIRLOCK_DOCKERFILE) continue;
      const st = await fsp.lstat(csrc);
      const out = ignore !== null && cname !== keep && ignore.excludes(cname);
      if (!st.isFile() && !st.isDirectory() && !st.isSymbolicLink()) {
        if (!out) skipped.push(cname);
        continue;
      }
      if (!st.isDirectory()) {
        if (out) continue;
        yield* ensure(parents);
        yield* packEntry(csrc, cname, st);
        continue;
      }
      if (out && !(ignore.hasExceptions || (keep || "").startsWith(`${cname}/`))) continue;
      const chain = [...parents, { src: csrc, name: cname, written: false }];
      if (!out) yield* ensure(chain);
      yield* walk(csrc, cname, chain);
    }
  }
  yield* walk(dir, "", []);
  if (extra) yield* packEntry(extra, AIRLOCK_DOCKERFILE, await fsp.stat(extra));
  yield archiveEnd();
}

/** Where the Dockerfile is for the daemon: {param, keep, extra} (its path in the context, or a file sent as .airlock-Dockerfile). */
async function dockerfilePlace(context, dockerfile) {
  const rctx = await fsp.realpath(context);
  const rdf = await fsp.realpath(dockerfile ?? path.join(context, "Dockerfile"));
  if (!(await fsp.stat(rdf)).isFile()) throw new TypeError(`dockerfile: ${rdf} is not a file`);
  const prefix = rctx.endsWith("/") ? rctx : `${rctx}/`;
  if (rdf.startsWith(prefix)) {
    const rel = rdf.slice(prefix.length);
    return { param: rel, keep: rel, extra: null };
  }
  return { param: AIRLOCK_DOCKERFILE, keep: null, extra: rdf };
}

function isBytes(v) {
  return typeof v === "string" ? false : v instanceof Uint8Array || v instanceof ArrayBuffer;
}

function toBuffer(v) {
  return Buffer.isBuffer(v) ? v : v instanceof ArrayBuffer ? Buffer.from(v) : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
}

async function gzipMagic(file) {
  const fh = await fsp.open(file, "r");
  try {
    const b = Buffer.alloc(2);
    const { bytesRead } = await fh.read(b, 0, 2, 0);
    return bytesRead === 2 && b[0] === 0x1f && b[1] === 0x8b;
  } finally {
    await fh.close();
  }
}

/** al.templates: list, get, delete, build, import. */
export class Templates {
  constructor(client) {
    this.client = client;
  }

  /** GET /v1/templates: [{name, tenant, source, parent, size_mib, created_ms, description, config, in_use, steps?}]. */
  async list() {
    return (await this.client.conn.json("GET /v1/templates")).templates;
  }

  /** GET /v1/templates/{name}. */
  get(name) {
    return this.client.conn.json("GET /v1/templates/{name}", { name });
  }

  /** DELETE /v1/templates/{name}: ConflictError while in use, ForbiddenError for a built-in one. */
  async delete(name) {
    await this.client.conn.json("DELETE /v1/templates/{name}", { name });
  }

  /** POSTs body to route; each step/output/progress event goes to onProgress; answers the template of "done". */
  async _stream(what, route, query, body, contentType, onProgress, signal) {
    const res = await this.client.conn.request(route, {}, { query, body, headers: { "Content-Type": contentType }, signal });
    for await (const ev of jsonLines(res)) {
      if (ev.type === "done") return ev.template;
      if (ev.type === "error") {
        const e = ev.error || {};
        throw errorFromBody(200, { error: { code: e.code, message: `template ${what}: ${e.message}` } }, { what: `template ${what}` });
      }
      if (onProgress) onProgress(ev);
    }
    throw new ProtocolError(`template ${what}: the connection closed before the ${what} finished`, { code: "protocol" });
  }

  /**
   * POST /v1/templates: builds a template from a Dockerfile and answers it. context: a directory
   * (default ".", sent as a tar while it is read, minus its .dockerignore) or the bytes of a tar
   * you made. Options: dockerfile (a local path, default context/Dockerfile; with bytes, its path
   * in the tar, default "Dockerfile"), buildArgs ({K: V}), network (the RUN steps' policy
   * object), noCache, snapshot, diskMib, tenant, onProgress(event), signal.
   */
  async build(name, context = ".", o = {}) {
    const query = {
      name,
      build_arg: Object.entries(o.buildArgs || {}).map(([k, v]) => `${k}=${v}`),
      no_cache: o.noCache ? "1" : undefined,
      snapshot: o.snapshot ? "1" : undefined,
      disk_mib: o.diskMib,
      network: o.network !== undefined ? JSON.stringify(o.network) : undefined,
      tenant: o.tenant,
    };
    let body;
    if (isBytes(context)) {
      query.dockerfile = o.dockerfile ?? "Dockerfile";
      body = toBuffer(context);
    } else {
      const place = await dockerfilePlace(context, o.dockerfile);
      query.dockerfile = place.param;
      const ignore = await DockerIgnore.load(context);
      body = Readable.from(packContext(context, { ignore, keep: place.keep, extra: place.extra, skipped: o.skipped }));
    }
    return this._stream("build", "POST /v1/templates", query, body, "application/x-tar", o.onProgress, o.signal);
  }

  /**
   * POST /v1/templates/import: a template from an image, answered when made. source: an image
   * archive file (docker save or OCI, gzip or not; sent as it is), an OCI layout directory (sent
   * as a tar of it) or the archive's bytes. Options: tenant, onProgress(event), signal.
   */
  async import(name, source, o = {}) {
    let body;
    let gz = false;
    if (isBytes(source)) {
      body = toBuffer(source);
      gz = body.length >= 2 && body[0] === 0x1f && body[1] === 0x8b;
    } else if ((await fsp.stat(source)).isDirectory()) {
      body = Readable.from(packContext(source));
    } else {
      gz = await gzipMagic(source);
      body = fs.createReadStream(source);
    }
    return this._stream("import", "POST /v1/templates/import", { name, tenant: o.tenant }, body,
      gz ? "application/gzip" : "application/x-tar", o.onProgress, o.signal);
  }
}
