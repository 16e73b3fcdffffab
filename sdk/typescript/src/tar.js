// SPDX-License-Identifier: Apache-2.0
// Tar streams for Files.upload / Files.download (the archive endpoints): a
// writer of local trees (ustar, pax headers for long names) and a reader that
// extracts a guest's archive into a local directory.
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { ProtocolError } from "./errors.js";

const BLOCK = 512;
/** Default bound on what download() writes to the local disk (like the daemon's --max-file-bytes). */
export const DEFAULT_MAX_EXTRACT_BYTES = 1024 * 1024 * 1024;
/** Entries a download may extract. */
export const MAX_EXTRACT_ENTRIES = 100000;
/** A pax or GNU long-name header's size we accept. */
const MAX_META_BYTES = 64 * 1024;

function octal(n, width) {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function header(name, { type, size = 0, mode = 0o644, mtime = 0, linkname = "" }) {
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100, "utf8");
  h.write(octal(mode & 0o7777, 8), 100, "ascii");
  h.write(octal(0, 8), 108, "ascii");
  h.write(octal(0, 8), 116, "ascii");
  h.write(octal(size, 12), 124, "ascii");
  h.write(octal(Math.max(0, Math.floor(mtime)), 12), 136, "ascii");
  h.fill(0x20, 148, 156);
  h.write(type, 156, "ascii");
  h.write(linkname, 157, 100, "utf8");
  h.write("ustar\x0000", 257, "binary");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(octal(sum, 7) + " ", 148, "ascii");
  return h;
}

function pad(size) {
  const r = size % BLOCK;
  return r ? Buffer.alloc(BLOCK - r) : null;
}

function paxRecord(key, value) {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}

function* headers(name, opts) {
  const needPax = Buffer.byteLength(name) > 99 || Buffer.byteLength(opts.linkname || "") > 99 || opts.size > 0o77777777777;
  if (needPax) {
    let rec = paxRecord("path", name);
    if (opts.linkname) rec += paxRecord("linkpath", opts.linkname);
    const data = Buffer.from(rec);
    yield header("PaxHeader", { type: "x", size: data.length });
    yield data;
    const p = pad(data.length);
    if (p) yield p;
    name = name.slice(0, 99);
  }
  yield header(name, opts);
}

/**
 * One entry for localPath (lstat'ed as st), named name: a file with its data, a symlink
 * (never followed), a directory's header only (name/); nothing for a socket, fifo or device.
 */
export async function* packEntry(localPath, name, st) {
  const mtime = st.mtimeMs / 1000;
  if (st.isSymbolicLink()) {
    yield* headers(name, { type: "2", mode: 0o777, mtime, linkname: await fsp.readlink(localPath) });
  } else if (st.isDirectory()) {
    yield* headers(`${name}/`, { type: "5", mode: st.mode, mtime });
  } else if (st.isFile()) {
    yield* headers(name, { type: "0", size: st.size, mode: st.mode, mtime });
    let sent = 0;
    const fh = await fsp.open(localPath, "r");
    try {
      const buf = Buffer.alloc(256 * 1024);
      while (sent < st.size) {
        const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, st.size - sent), null);
        if (!bytesRead) throw new Error(`${localPath}: shrank while it was uploaded`);
        sent += bytesRead;
        yield Buffer.from(buf.subarray(0, bytesRead));
      }
    } finally {
      await fh.close();
    }
    const p = pad(st.size);
    if (p) yield p;
  }
}

/** A tar stream (async iterable of Buffers) of localPath, its entries named base/… */
export async function* packTree(localPath, base = path.basename(path.resolve(localPath))) {
  const st = await fsp.lstat(localPath);
  yield* packEntry(localPath, base, st);
  if (st.isDirectory()) {
    const names = (await fsp.readdir(localPath)).sort();
    for (const n of names) yield* packTree(path.join(localPath, n), `${base}/${n}`);
  }
  // sockets, fifos and devices are left out
}

/** packTree and the end of the archive. */
export async function* packArchive(localPath) {
  yield* packTree(localPath);
  yield archiveEnd();
}

/** The two zero blocks that end an archive. */
export function archiveEnd() {
  return Buffer.alloc(BLOCK * 2);
}

/** Reads exact byte counts from an async iterable of chunks. */
class Reader {
  constructor(src) {
    this.it = src[Symbol.asyncIterator]();
    this.buf = Buffer.alloc(0);
    this.done = false;
  }
  async fill(n) {
    while (this.buf.length < n && !this.done) {
      const { value, done } = await this.it.next();
      if (done) this.done = true;
      else this.buf = this.buf.length ? Buffer.concat([this.buf, value]) : Buffer.from(value);
    }
    return this.buf.length >= n;
  }
  async read(n) {
    if (!(await this.fill(n))) throw new ProtocolError("the archive ended within an entry", { code: "protocol" });
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }
  /** Chunks of exactly n bytes in all, as they arrive. */
  async *chunks(n) {
    while (n > 0) {
      if (!this.buf.length) {
        if (this.done || !(await this.fill(1))) throw new ProtocolError("the archive ended within a file", { code: "protocol" });
      }
      const take = Math.min(n, this.buf.length);
      const out = this.buf.subarray(0, take);
      this.buf = this.buf.subarray(take);
      n -= take;
      yield out;
    }
  }
}

function cstr(b) {
  const z = b.indexOf(0);
  return b.subarray(0, z < 0 ? b.length : z).toString("utf8");
}

function parseOctal(b, what) {
  if (b[0] & 0x80) throw new ProtocolError(`tar: base-256 ${what} is not supported`, { code: "protocol" });
  const s = cstr(b).trim();
  if (!s) return 0;
  if (!/^[0-7]+$/.test(s)) throw new ProtocolError(`tar: bad ${what} field "${s}"`, { code: "protocol" });
  return parseInt(s, 8);
}

function parsePax(data) {
  const out = {};
  let off = 0;
  while (off < data.length) {
    const sp = data.indexOf(0x20, off);
    if (sp < 0) break;
    const len = parseInt(data.subarray(off, sp).toString("ascii"), 10);
    if (!(len > 0) || off + len > data.length || sp >= off + len) break;
    const kv = data.subarray(sp + 1, off + len - 1).toString("utf8");
    const eq = kv.indexOf("=");
    if (eq > 0) out[kv.slice(0, eq)] = kv.slice(eq + 1);
    off += len;
  }
  return out;
}

/**
 * SECURITY: the archive comes from the guest (made by tar in the sandbox) and
 * is hostile. Every name is checked to stay under dest (no absolute names, no
 * `..`), no existing symlink is followed on the way to an entry (each parent is
 * lstat'ed, files are opened O_NOFOLLOW|O_EXCL after removing what was there),
 * symlinks whose target leaves dest and hard links are refused, only the
 * permission bits are kept (no setuid, setgid, owners), and the total size and
 * entry count are bounded before anything is written.
 */
export async function extractArchive(src, dest, { maxBytes = DEFAULT_MAX_EXTRACT_BYTES } = {}) {
  const root = path.resolve(dest);
  await fsp.mkdir(root, { recursive: true });
  const r = new Reader(src);
  let total = 0;
  let entries = 0;
  let longName = null;
  let longLink = null;
  let pax = {};
  const written = [];
  for (;;) {
    if (!(await r.fill(BLOCK))) break; // a missing end-of-archive marker is tolerated
    const h = await r.read(BLOCK);
    if (h.every((b) => b === 0)) break;
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i];
    if (sum !== parseOctal(h.subarray(148, 156), "checksum")) throw new ProtocolError("tar: a header's checksum is wrong", { code: "protocol" });
    const type = String.fromCharCode(h[156] || 0x30);
    const size = parseOctal(h.subarray(124, 136), "size");
    const padLen = (BLOCK - (size % BLOCK)) % BLOCK;
    if (type === "x" || type === "g" || type === "L" || type === "K") {
      if (size > MAX_META_BYTES) throw new ProtocolError(`tar: a ${type} header of ${size} bytes (at most ${MAX_META_BYTES})`, { code: "protocol" });
      const data = Buffer.from(await r.read(size));
      await r.read(padLen);
      if (type === "x") pax = parsePax(data);
      else if (type === "L") longName = cstr(data);
      else if (type === "K") longLink = cstr(data);
      continue;
    }
    if (++entries > MAX_EXTRACT_ENTRIES) throw new ProtocolError(`tar: more than ${MAX_EXTRACT_ENTRIES} entries`, { code: "protocol" });
    let name = pax.path ?? longName ?? (() => {
      const prefix = cstr(h.subarray(345, 500));
      const n = cstr(h.subarray(0, 100));
      return prefix && h.subarray(257, 262).toString("ascii") === "ustar" ? `${prefix}/${n}` : n;
    })();
    const linkname = pax.linkpath ?? longLink ?? cstr(h.subarray(157, 257));
    const realSize = pax.size !== undefined ? Number(pax.size) : size;
    const mode = parseOctal(h.subarray(100, 108), "mode") & 0o777;
    const mtime = parseOctal(h.subarray(136, 148), "mtime");
    pax = {};
    longName = longLink = null;
    while (name.startsWith("./")) name = name.slice(2);
    const parts = name.split("/").filter((p) => p && p !== ".");
    if (name.startsWith("/") || parts.includes("..")) throw new ProtocolError(`tar: refused the entry "${name}": it would leave ${root}`, { code: "protocol" });
    if (!parts.length) {
      for await (const _ of r.chunks(realSize)) void _;
      await r.read((BLOCK - (realSize % BLOCK)) % BLOCK);
      continue;
    }
    const target = path.join(root, ...parts);
    await safeParents(root, parts.slice(0, -1));
    if (type === "5") {
      const st = await fsp.lstat(target).catch(() => null);
      if (st && !st.isDirectory()) await fsp.rm(target, { recursive: true, force: true });
      if (!st || !st.isDirectory()) await fsp.mkdir(target, { mode: mode | 0o700 });
      written.push([target, mode | 0o700, mtime]);
    } else if (type === "0" || type === "\0" || type === "7") {
      total += realSize;
      if (total > maxBytes) throw new ProtocolError(`tar: the archive holds more than maxBytes (${maxBytes}) bytes; pass a larger maxBytes`, { code: "protocol" });
      await fsp.rm(target, { recursive: true, force: true });
      const fd = fs.openSync(target, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, mode);
      try {
        for await (const c of r.chunks(realSize)) {
          let off = 0;
          while (off < c.length) off += fs.writeSync(fd, c, off, c.length - off);
        }
        fs.fchmodSync(fd, mode);
        fs.futimesSync(fd, mtime, mtime);
      } finally {
        fs.closeSync(fd);
      }
      await r.read((BLOCK - (realSize % BLOCK)) % BLOCK);
    } else if (type === "2") {
      const resolved = path.resolve(path.dirname(target), linkname);
      if (path.isAbsolute(linkname) || (resolved !== root && !resolved.startsWith(root + path.sep)))
        throw new ProtocolError(`tar: refused the symlink "${name}" -> "${linkname}": it points outside ${root}`, { code: "protocol" });
      await fsp.rm(target, { recursive: true, force: true });
      await fsp.symlink(linkname, target);
    } else if (type === "1") {
      throw new ProtocolError(`tar: refused the hard link "${name}" -> "${linkname}" (hard links are not extracted)`, { code: "protocol" });
    } else {
      // devices, fifos and unknown types are skipped with their data
      for await (const _ of r.chunks(realSize)) void _;
      await r.read((BLOCK - (realSize % BLOCK)) % BLOCK);
    }
  }
  for (const [dir, mode, mtime] of written.reverse()) {
    await fsp.chmod(dir, mode).catch(() => {});
    await fsp.utimes(dir, mtime, mtime).catch(() => {});
  }
}

/** Makes root/parts… as directories, refusing to pass through a symlink or a file. */
async function safeParents(root, parts) {
  let cur = root;
  for (const p of parts) {
    cur = path.join(cur, p);
    const st = await fsp.lstat(cur).catch(() => null);
    if (!st) await fsp.mkdir(cur, { mode: 0o755 });
    else if (!st.isDirectory()) throw new ProtocolError(`tar: refused to extract through "${cur}": it is not a directory (a symlink?)`, { code: "protocol" });
  }
}
