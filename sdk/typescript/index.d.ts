// SPDX-License-Identifier: Apache-2.0
// Types of @airlock/sdk (the implementation is src/*.js; docs/api.md is the API).
/// <reference types="node" />
import type { IncomingMessage } from "node:http";
import type { Readable } from "node:stream";

export declare const DEFAULT_SOCKET: string;
export declare const DEFAULT_MAX_EXTRACT_BYTES: number;
/** "METHOD /path" of every API route → the SDK method that calls it. */
export declare const ROUTES: Readonly<Record<string, string>>;
/** Routes deliberately without a method → why. */
export declare const EXCLUDED: Readonly<Record<string, string>>;
export declare const FOREIGN_PREFIXES: readonly string[];

// ---- errors ----
export type ErrorCode =
  | "invalid_argument" | "unauthorized" | "forbidden" | "not_found" | "method_not_allowed" | "conflict"
  | "payload_too_large" | "quota_exceeded" | "unsupported_media_type" | "boot_failed" | "internal"
  | "guest_error" | "unavailable" | "timeout" | "connection" | "aborted" | "protocol" | "unknown";
export declare class AirlockError extends Error {
  constructor(message: string, opts?: { code?: string; status?: number; retryAfter?: number | null; body?: unknown });
  readonly code: ErrorCode | string;
  readonly status: number;
  readonly retryAfter: number | null;
  readonly body: unknown;
}
export declare class InvalidArgumentError extends AirlockError {}
export declare class UnauthorizedError extends AirlockError {}
export declare class ForbiddenError extends AirlockError {}
export declare class NotFoundError extends AirlockError {}
export declare class MethodNotAllowedError extends AirlockError {}
export declare class ConflictError extends AirlockError {}
export declare class PayloadTooLargeError extends AirlockError {}
export declare class QuotaExceededError extends AirlockError {}
export declare class UnsupportedMediaTypeError extends AirlockError {}
export declare class BootFailedError extends AirlockError {}
export declare class InternalError extends AirlockError {}
export declare class GuestError extends AirlockError {}
export declare class UnavailableError extends AirlockError {}
export declare class TimeoutError extends AirlockError {}
export declare class ConnectionError extends AirlockError {}
export declare class ProtocolError extends AirlockError {}
export declare const ERROR_CLASSES: Readonly<Record<string, typeof AirlockError>>;
export declare function errorFromBody(status: number, body: unknown, opts?: { retryAfter?: number | null; what?: string }): AirlockError;

// ---- connection ----
export interface ConnectionOptions {
  /** The unix socket (the operator's; no token). Default $AIRLOCK_SOCKET, else /run/airlock/airlockd.sock. */
  socketPath?: string | null;
  /** The TCP listener, "tcp://ADDR:PORT". Default $AIRLOCK_HOST (it wins over $AIRLOCK_SOCKET, as in the CLI). */
  host?: string | null;
  /** The bearer token of the TCP listener. Default $AIRLOCK_TOKEN. */
  token?: string | null;
  /** Milliseconds to wait for an answer's head (0: no limit, the default). */
  requestTimeoutMs?: number;
  /** Read these instead of process.env. */
  env?: Record<string, string | undefined>;
}
export declare class Connection {
  constructor(opts?: ConnectionOptions);
  readonly socketPath: string | null;
  readonly host: string | null;
  readonly port: number | null;
  readonly token: string | null;
  describe(): string;
  request(route: string, params?: Record<string, string>, opts?: {
    query?: Record<string, string | number | boolean | undefined | null | Array<string>>;
    json?: unknown; body?: Buffer | string | Uint8Array | Readable | AsyncIterable<Uint8Array>;
    headers?: Record<string, string>; ok?: number[]; signal?: AbortSignal;
  }): Promise<IncomingMessage>;
  json<T = any>(route: string, params?: Record<string, string>, opts?: object): Promise<T>;
  bytes(route: string, params?: Record<string, string>, opts?: object): Promise<Buffer>;
}
/** Where a call connects: a client, or connection options (`env` there is not the connection's). */
export interface Via extends Omit<ConnectionOptions, "env"> {
  client?: Airlock;
}

// ---- objects of the API (snake_case, as the API answers them) ----
export type SandboxState = "creating" | "running" | "paused" | "snapshotting" | "stopping" | "stopped" | "error" | "deleted";
export interface NetworkPolicy {
  allow: string[];
  deny: string[];
}
export interface SandboxInfo {
  id: string;
  state: SandboxState;
  template: string;
  vcpus: number;
  memory_mib: number;
  disk_mib: number | null;
  env: Record<string, string>;
  metadata: Record<string, string>;
  backend: string;
  accel: string;
  cpu: string;
  accel_reason: string;
  created_at: string;
  updated_at: string;
  boot_ms: number | null;
  boot: "template" | "cold" | "snapshot" | "pool" | null;
  error: string | null;
  timeout_s: number;
  on_timeout: "kill" | "pause";
  idle_timeout_s: number;
  /** Traffic to its ports resumes it when paused. */
  auto_resume: boolean;
  /** The exposed ports (url null without a proxy). */
  ports: Array<{ port: number; public: boolean; url: string | null }>;
  running_ms: number;
  network: NetworkPolicy;
  secrets: Array<{ env: string; secret: string; placeholder: string }>;
  ca_bundle: string | null;
  [k: string]: unknown;
}
export interface SnapshotInfo {
  id: string;
  name: string;
  sandbox_id: string;
  tenant: string;
  template: string;
  vcpus: number;
  memory_mib: number;
  backend: string;
  created_at: string;
  size_bytes: number;
  generation: number;
  digests: Record<string, string>;
}
export interface ProcessInfo {
  id: string;
  cmd: string[];
  tag: string;
  state: "running" | "exited";
  pty: boolean;
  stdin_stream: boolean;
  exit_code: number | null;
  signal: number | null;
  timed_out: boolean;
  started_at: string;
  ended_at: string | null;
  output_bytes: number;
  output_dropped: number;
  error?: string;
}
export interface FileStat {
  name: string;
  type: "file" | "dir" | "symlink" | "other" | string;
  size: number;
  mode: number;
  uid: number;
  gid: number;
  mtime_ms: number;
  target: string | null;
}
export interface SandboxMetrics {
  cpu_usage_usec: number;
  cpus: number;
  mem_total_kib: number;
  mem_available_kib: number;
  disk_total_bytes: number;
  disk_used_bytes: number;
  uptime_ms: number;
  processes: number;
}
export interface NetworkInfo {
  sandbox: string;
  policy: NetworkPolicy;
  guest: { address: string; gateway: string; dns: string; mac: string };
  dropped: { packets: number; bytes: number } | null;
}
export interface Event {
  seq: number;
  time: string;
  type: string;
  tenant: string;
  sandbox: string | null;
  data: Record<string, unknown>;
}
export interface TokenInfo {
  id: string;
  tenant: string;
  description: string;
  created_at: string;
  /** Only in the answer of create(). */
  token?: string;
}
export interface Quotas {
  max_sandboxes: number;
  max_vcpus: number;
  max_memory_mib: number;
  max_snapshot_mib: number;
}
export interface TenantInfo {
  name: string;
  quotas: Quotas;
  usage: { sandboxes: number; vcpus: number; memory_mib: number };
}
export interface PoolInfo {
  /** The owner; null: a shared pool (the operator's). */
  tenant: string | null;
  template: string;
  vcpus: number;
  memory_mib: number;
  size: number;
  ready: number;
  filling: boolean;
  /** Absent from a tenant's view of a shared pool (as are counts and error). */
  pss_bytes?: number;
  pss_per_vm_bytes?: number;
  counts?: { hits: number; misses: number; fills: number; failures: number; shed: number; lost: number };
  /** Why the last fill failed; absent once one succeeds. */
  error?: string;
}
export interface PoolList {
  pools: PoolInfo[];
  ready: number;
  pss_bytes: number;
  /** The operator's only (absent with a tenant's token). */
  host_memory?: { total_bytes: number; available_bytes: number; high_pct: number; shedding: boolean };
}
export interface SecretInfo {
  id: string;
  tenant: string;
  name: string;
  hosts: string[];
  paths: string[];
  methods: string[];
  header: string | null;
  format: string | null;
  headers: string[] | null;
  created_at: string;
  updated_at: string;
}
export interface Health {
  status: string;
  version: string;
  backend: string;
  accel: string;
  [k: string]: unknown;
}

// ---- clients ----
export interface EventsOptions {
  sandbox?: string;
  /** A type prefix ("sandbox.", "exec.exit"). */
  type?: string;
  /** The last seq seen (exclusive). */
  since?: number;
  /** Stay open for new events. */
  follow?: boolean;
  signal?: AbortSignal;
}
export declare class Airlock {
  constructor(opts?: ConnectionOptions | Connection);
  static from(opts?: Via): Airlock;
  readonly conn: Connection;
  readonly tokens: Tokens;
  readonly tenants: Tenants;
  readonly pools: Pools;
  readonly secrets: Secrets;
  readonly templates: Templates;
  readonly sandboxes: {
    create(opts?: CreateOptions): Promise<Sandbox>;
    get(id: string): Promise<Sandbox>;
    connect(id: string): Promise<Sandbox>;
    list(opts?: ListOptions): Promise<Sandbox[]>;
  };
  readonly snapshots: {
    list(opts?: { sandbox?: string }): Promise<Snapshot[]>;
    get(id: string): Promise<Snapshot>;
  };
  health(): Promise<Health>;
  /** The host's Prometheus metrics (operator only). */
  prometheusMetrics(): Promise<string>;
  /** The Airlock CA certificate, PEM. */
  ca(): Promise<string>;
  events(opts?: EventsOptions): AsyncGenerator<Event, void, undefined>;
}
export declare class Tokens {
  create(opts: { tenant?: string; description?: string }): Promise<TokenInfo & { token: string }>;
  list(): Promise<TokenInfo[]>;
  revoke(id: string): Promise<void>;
}
export declare class Tenants {
  get(name: string): Promise<TenantInfo>;
  setQuotas(name: string, quotas: { maxSandboxes?: number; maxVcpus?: number; maxMemoryMib?: number; maxSnapshotMib?: number }): Promise<TenantInfo>;
}
/** Warm pools (client.pools). */
export declare class Pools {
  list(): Promise<PoolList>;
  /** size 0 removes the pool; tenant: over the unix socket only (a token sets its own). */
  set(template: string, size: number, opts?: { vcpus?: number; memoryMib?: number; tenant?: string }): Promise<PoolList>;
}
/** A template (docs/api.md, "Templates"). */
export interface TemplateInfo {
  name: string;
  /** null: the operator's, shared with every tenant. */
  tenant: string | null;
  source: "builtin" | "dockerfile" | "image";
  parent: string | null;
  size_mib: number;
  created_ms: number;
  description?: string;
  config: { env: string[]; workdir: string; user: string; cmd: string[] | null; entrypoint: string[] | null };
  in_use: { sandboxes: number; snapshots: number; pools: number };
  /** Dockerfile templates only. */
  steps?: { instruction: string; cached: boolean }[];
}
/** One line of a build's or an import's progress stream (but "done" and "error", which end it). */
export type TemplateEvent =
  | { type: "step"; step: number; steps: number; instruction: string; cached: boolean }
  | { type: "output"; stream: "stdout" | "stderr"; data: string }
  | {
      type: "progress";
      phase: "upload" | "layer" | "mkfs" | "export" | "snapshot";
      layer?: number;
      layers?: number;
      bytes?: number;
      total_bytes?: number;
    };
export interface TemplateBuildOptions {
  /** A local path (default context/Dockerfile); with a tar's bytes as the context, its path in the tar (default "Dockerfile"). */
  dockerfile?: string;
  buildArgs?: Record<string, string>;
  /** The RUN steps' network policy (as a create's `network`), within the operator's ceiling. */
  network?: Record<string, unknown>;
  noCache?: boolean;
  snapshot?: boolean;
  diskMib?: number;
  /** Over the unix socket: build it as this tenant's. */
  tenant?: string;
  onProgress?: (event: TemplateEvent) => void;
  signal?: AbortSignal;
  /** Receives the names of the sockets, fifos and devices left out of the context. */
  skipped?: string[];
}
/** Templates (client.templates). An "error" line of the stream is thrown as its typed error; a stream that ends without "done" as a ProtocolError. */
export declare class Templates {
  list(): Promise<TemplateInfo[]>;
  get(name: string): Promise<TemplateInfo>;
  /** ConflictError while a sandbox, snapshot or pool uses it; ForbiddenError for a built-in one. */
  delete(name: string): Promise<void>;
  /** context: a directory (default ".", sent as a tar minus its .dockerignore) or a tar's bytes. */
  build(name: string, context?: string | Uint8Array | ArrayBuffer, opts?: TemplateBuildOptions): Promise<TemplateInfo>;
  /** source: a docker save or OCI archive file (maybe gzip), an OCI layout directory, or the archive's bytes. */
  import(
    name: string,
    source: string | Uint8Array | ArrayBuffer,
    opts?: { tenant?: string; onProgress?: (event: TemplateEvent) => void; signal?: AbortSignal },
  ): Promise<TemplateInfo>;
}
/** .dockerignore as `airlock template build` reads it (docs/cli.md, "Templates"). */
export declare class DockerIgnore {
  constructor(text?: string);
  static load(dir: string): Promise<DockerIgnore>;
  readonly hasExceptions: boolean;
  /** Whether path ("a/b", relative to the context) is left out. */
  excludes(path: string): boolean;
}
/** A build context as a tar stream (what Templates.build sends for a directory). */
export declare function packContext(
  dir: string,
  opts?: { ignore?: DockerIgnore | null; keep?: string | null; extra?: string | null; skipped?: string[] },
): AsyncGenerator<Buffer, void, undefined>;
export declare const AIRLOCK_DOCKERFILE: ".airlock-Dockerfile";
export interface SecretSpec {
  name: string;
  value: string;
  hosts: string[];
  paths?: string[];
  methods?: string[];
  header?: string | null;
  headers?: string[];
  format?: string;
  /** Unix socket only. */
  tenant?: string;
}
export declare class Secrets {
  set(spec: SecretSpec): Promise<SecretInfo>;
  list(opts?: { tenant?: string }): Promise<SecretInfo[]>;
  get(name: string, opts?: { tenant?: string }): Promise<SecretInfo>;
  delete(name: string, opts?: { tenant?: string }): Promise<void>;
}
export declare class Snapshot {
  readonly client: Airlock;
  readonly id: string;
  info: SnapshotInfo;
  static list(opts?: Via & { sandbox?: string }): Promise<Snapshot[]>;
  static get(id: string, opts?: Via): Promise<Snapshot>;
  delete(): Promise<void>;
  restore(opts?: Omit<CreateOptions, "snapshot">): Promise<Sandbox>;
}

export interface CreateOptions extends Via {
  template?: string;
  vcpus?: number;
  memoryMib?: number;
  diskMib?: number;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  /** The egress policy; default: the daemon's (deny all). */
  network?: Partial<NetworkPolicy>;
  /** ENV_NAME → secret name. */
  secrets?: Record<string, string>;
  /** Seconds of running time (0: none). */
  timeout?: number;
  onTimeout?: "kill" | "pause";
  /** Seconds without a request before the sandbox is paused (0: none). */
  idleTimeout?: number;
  /** Restore this snapshot instead of booting. */
  snapshot?: string;
  boot?: "auto" | "cold";
  /** Unix socket only. */
  tenant?: string;
  /** Traffic to its ports (a tunnel, the proxy) resumes it when paused. */
  autoResume?: boolean;
}
/** GET /v1/sandboxes/{id}/ports (docs/api.md, "Ports"). */
export interface PortsInfo {
  ports: Array<{
    port: number;
    exposed: boolean;
    public: boolean;
    /** null without a proxy */
    url: string | null;
    path_url: string | null;
    requests: number;
    bytes_in: number;
    bytes_out: number;
    errors: number;
  }>;
  traffic_token: string;
  auto_resume: boolean;
  proxy: boolean;
}
export interface ListOptions extends Via {
  all?: boolean;
  metadata?: Record<string, string>;
}
export interface ExecOptions {
  /** Text of stdout as it arrives (the exec is streamed). */
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  stdin?: string | Uint8Array;
  /** Seconds (default 300); on expiry the process group is killed and timedOut is true. */
  timeout?: number;
  env?: Record<string, string>;
  cwd?: string;
  uid?: number;
  gid?: number;
  maxOutputBytes?: number;
  /** Resume a paused sandbox first. */
  resume?: boolean;
  /** Stream even without callbacks. */
  stream?: boolean;
  signal?: AbortSignal;
}
export interface ExecResult {
  processId: string;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  durationMs: number;
}

export declare class Sandbox implements AsyncDisposable {
  readonly client: Airlock;
  readonly id: string;
  info: SandboxInfo;
  readonly state: SandboxState;
  readonly files: Files;
  readonly processes: Processes;
  readonly pty: Ptys;
  static create(opts?: CreateOptions): Promise<Sandbox>;
  static restore(snapshotId: string, opts?: CreateOptions): Promise<Sandbox>;
  static get(id: string, opts?: Via): Promise<Sandbox>;
  /** get(), resuming a paused sandbox; ConflictError for one neither running nor paused. */
  static connect(id: string, opts?: Via): Promise<Sandbox>;
  static list(opts?: ListOptions): Promise<Sandbox[]>;
  refresh(): Promise<this>;
  /** Deletes the sandbox (idempotent). */
  kill(): Promise<this>;
  [Symbol.asyncDispose](): Promise<void>;
  pause(): Promise<this>;
  resume(): Promise<this>;
  snapshot(opts?: { name?: string }): Promise<Snapshot>;
  fork(opts?: { count?: number; secrets?: Record<string, string> }): Promise<Sandbox[]>;
  recover(opts?: { memory?: boolean }): Promise<this>;
  setTimeout(opts: { timeout?: number; onTimeout?: "kill" | "pause"; idleTimeout?: number; autoResume?: boolean }): Promise<this>;
  /** The exposed ports and those that had traffic, their URLs and counters; the traffic token. */
  ports(): Promise<PortsInfo>;
  /** Exposes the guest's port on the daemon's proxy (public: without the traffic token). */
  expose(port: number, opts?: { public?: boolean }): Promise<PortsInfo>;
  /** NotFoundError when the port is not exposed. */
  unexpose(port: number): Promise<PortsInfo>;
  /** The host name of the port's URL on the proxy; null when not exposed or without a proxy. */
  getHost(port: number): Promise<string | null>;
  /** A TCP stream to the guest's port (Upgrade: airlock-tcp/1); GuestError when nothing listens. */
  connectPort(port: number): Promise<import("node:net").Socket>;
  getNetwork(): Promise<NetworkInfo>;
  setNetwork(policy: Partial<NetworkPolicy>): Promise<NetworkInfo>;
  metrics(opts?: { resume?: boolean }): Promise<SandboxMetrics>;
  events(opts?: Omit<EventsOptions, "sandbox">): AsyncGenerator<Event, void, undefined>;
  /** cmd: a string (run with sh -c) or an argv array. A non-zero exit is not an error. */
  exec(cmd: string | string[], opts?: ExecOptions): Promise<ExecResult>;
}
/** Creates a sandbox, runs fn, deletes the sandbox whatever happens. */
export declare function withSandbox<T>(opts: CreateOptions, fn: (sb: Sandbox) => Promise<T> | T): Promise<T>;
export declare function withSandbox<T>(fn: (sb: Sandbox) => Promise<T> | T): Promise<T>;

export interface StartOptions extends Omit<ExecOptions, "onStdout" | "onStderr" | "maxOutputBytes" | "stream" | "signal"> {
  /** Keep stdin open for writeStdin(). */
  stdinStream?: boolean;
  pty?: { rows?: number; cols?: number };
  tag?: string;
}
export type OutputEvent =
  | { type: "stdout" | "stderr"; data: Buffer; readonly text: string }
  | { type: "exit"; exitCode: number | null; signal: number | null; timedOut: boolean; durationMs: number }
  | { type: "dropped"; bytes: number };
export declare class Processes {
  start(cmd: string | string[], opts?: StartOptions): Promise<Process>;
  list(): Promise<Process[]>;
  get(pid: string): Promise<Process>;
}
export declare class Process implements AsyncIterable<OutputEvent> {
  readonly sandbox: Sandbox;
  readonly id: string;
  info: ProcessInfo;
  readonly state: "running" | "exited";
  readonly exitCode: number | null;
  refresh(): Promise<this>;
  /** from: "start" (default) or "now"; follow (default true) ends with the exit event. */
  output(opts?: { from?: "start" | "now"; follow?: boolean; signal?: AbortSignal }): AsyncGenerator<OutputEvent, void, undefined>;
  [Symbol.asyncIterator](): AsyncGenerator<OutputEvent, void, undefined>;
  writeStdin(data: string | Uint8Array, opts?: { eof?: boolean }): Promise<void>;
  closeStdin(): Promise<void>;
  signal(sig?: string | number): Promise<void>;
  kill(): Promise<void>;
  resize(rows: number, cols: number): Promise<void>;
  /** The exited process; with timeout (s), TimeoutError if it still runs by then. */
  wait(opts?: { timeout?: number }): Promise<ProcessInfo>;
  attach(): Promise<Pty>;
}
export interface PtyExit {
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  durationMs: number | null;
}
export declare class Ptys {
  create(opts?: { cmd?: string | string[]; rows?: number; cols?: number; env?: Record<string, string>; cwd?: string; uid?: number; gid?: number; tag?: string; resume?: boolean }): Promise<Pty>;
}
export declare class Pty implements AsyncIterable<Buffer> {
  readonly process: Process;
  exit: PtyExit | null;
  /** Every chunk from the terminal, first those not read yet; with a listener the iterator gets nothing. */
  onData(fn: (chunk: Buffer) => void): void;
  [Symbol.asyncIterator](): AsyncIterator<Buffer>;
  write(data: string | Uint8Array): void;
  resize(rows: number, cols: number): void;
  /** Resolves when the daemon closes, with the exit (null if it closed without one). */
  wait(): Promise<PtyExit | null>;
  /** Detaches; the process keeps running. */
  close(): void;
}
export declare class Files {
  read(path: string, opts?: { resume?: boolean }): Promise<Buffer>;
  readText(path: string, opts?: { resume?: boolean }): Promise<string>;
  readStream(path: string, opts?: { resume?: boolean }): Promise<Readable>;
  write(path: string, data: string | Uint8Array | ArrayBuffer | Readable | AsyncIterable<Uint8Array>, opts?: { mode?: number | string; resume?: boolean }): Promise<{ path: string; size: number }>;
  writeText(path: string, text: string, opts?: { mode?: number | string; resume?: boolean }): Promise<{ path: string; size: number }>;
  stat(path: string): Promise<FileStat>;
  exists(path: string): Promise<boolean>;
  list(path: string): Promise<FileStat[]>;
  mkdir(path: string, opts?: { parents?: boolean; mode?: number }): Promise<void>;
  remove(path: string, opts?: { recursive?: boolean }): Promise<void>;
  rename(path: string, to: string): Promise<void>;
  /** localPath (a file or a tree) lands at remoteDir/basename(localPath). */
  upload(localPath: string, remoteDir: string): Promise<void>;
  uploadArchive(remoteDir: string, tar: Buffer | Uint8Array | Readable | AsyncIterable<Uint8Array>): Promise<void>;
  /** remotePath lands at localDir/basename(remotePath); hostile archive entries are refused. */
  download(remotePath: string, localDir: string, opts?: { maxBytes?: number }): Promise<void>;
  downloadArchive(remotePath: string): Promise<Readable>;
}
export default Sandbox;
