// SPDX-License-Identifier: Apache-2.0
// Shared by tests/mcp/*.test.mjs: the official MCP client (@modelcontextprotocol/sdk)
// connected to `airlock mcp` over stdio or streamable HTTP. The environment comes
// from tests/integration/test_mcp.py: AIRLOCK_BIN (build/airlock), AIRLOCK_HOST and
// AIRLOCK_TOKEN (a tenant's token on the daemon's TCP listener), AIRLOCK_MCP_FOREIGN
// (a sandbox of another tenant).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export const BIN = process.env.AIRLOCK_BIN;
export const FOREIGN = process.env.AIRLOCK_MCP_FOREIGN;
export const LONG = { timeout: 600_000 }; // boots and snapshots under TCG

function serverEnv() {
  return {
    PATH: process.env.PATH,
    AIRLOCK_HOST: process.env.AIRLOCK_HOST,
    AIRLOCK_TOKEN: process.env.AIRLOCK_TOKEN,
  };
}

export async function connectStdio() {
  assert.ok(BIN, 'AIRLOCK_BIN is not set (run through tests/integration/test_mcp.py)');
  const transport = new StdioClientTransport({ command: BIN, args: ['mcp'], env: serverEnv(), stderr: 'inherit' });
  const client = new Client({ name: 'airlock-tests', version: '1.0.0' });
  await client.connect(transport);
  return { client, close: () => client.close() };
}

// Starts `airlock mcp --http 127.0.0.1:0` with a bearer token of its own
// (AIRLOCK_MCP_HTTP_TOKEN) and reads the port it printed.
export async function startHttpServer() {
  const token = randomBytes(16).toString('hex');
  const child = spawn(BIN, ['mcp', '--http', '127.0.0.1:0'], {
    env: { ...serverEnv(), AIRLOCK_MCP_HTTP_TOKEN: token }, stdio: ['ignore', 'inherit', 'pipe'],
  });
  const url = await new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`airlock mcp --http said nothing in 10 s: ${err}`)), 10_000);
    child.stderr.on('data', (d) => {
      err += d;
      const m = /listening on (http:\/\/\S+\/mcp)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on('exit', (code) => reject(new Error(`airlock mcp --http exited with ${code}: ${err}`)));
  });
  return {
    url,
    token,
    stop: () => new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill('SIGTERM');
    }),
  };
}

export async function connectHttp(url, token) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: token ? { headers: { Authorization: `Bearer ${token}` } } : undefined,
  });
  const client = new Client({ name: 'airlock-tests', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport, close: () => client.close() };
}

export function text(result) {
  assert.ok(Array.isArray(result.content), `no content in ${JSON.stringify(result)}`);
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// A tool call that must succeed; its text.
export async function ok(client, name, args, options = LONG) {
  const r = await client.callTool({ name, arguments: args }, undefined, options);
  assert.notEqual(r.isError, true, `${name} failed: ${text(r)}`);
  return text(r);
}

export async function createSandbox(client) {
  const t = await ok(client, 'create_sandbox', { template: 'minimal', vcpus: 1, metadata: { suite: 'mcp' } });
  const sb = JSON.parse(t);
  assert.match(sb.id, /^sb-/);
  assert.equal(sb.state, 'running');
  return sb.id;
}

export const TOOLS = [
  'create_sandbox', 'delete_sandbox', 'download', 'expose_port', 'get_output', 'kill_process', 'list_files',
  'list_ports', 'list_sandboxes', 'list_templates', 'read_file', 'restore', 'run_command', 'snapshot', 'start_process', 'upload',
  'write_file',
];
