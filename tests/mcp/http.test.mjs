// SPDX-License-Identifier: Apache-2.0
// `airlock mcp --http` (streamable HTTP), driven by the official MCP client's
// StreamableHTTPClientTransport: initialize with a session, tools, progress over an
// SSE answer, a resource, errors, another tenant's sandbox refused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { McpError } from '@modelcontextprotocol/sdk/types.js';

import { connectHttp, createSandbox, ok, startHttpServer, text, FOREIGN, LONG, TOOLS } from './mcputil.mjs';

let server;
let conn;
let client;
let sid;

before(async () => {
  server = await startHttpServer();
  conn = await connectHttp(server.url, server.token);
  client = conn.client;
  sid = await createSandbox(client);
});

after(async () => {
  if (sid) await client.callTool({ name: 'delete_sandbox', arguments: { sandbox_id: sid } }, undefined, LONG).catch(() => {});
  await conn?.transport.terminateSession().catch(() => {});
  await conn?.close();
  await server?.stop();
});

test('initialize gave a session id; tools/list', async () => {
  assert.match(conn.transport.sessionId ?? '', /^[0-9a-f]{32}$/);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
});

test('run_command streams progress notifications over SSE', async () => {
  const seen = [];
  const r = await client.callTool(
    { name: 'run_command', arguments: { sandbox_id: sid, command: 'for i in 1 2 3; do echo line$i; sleep 1; done' } },
    undefined, { ...LONG, onprogress: (p) => seen.push(p) });
  assert.match(text(r), /^exit code 0/);
  assert.match(text(r), /line1\nline2\nline3/);
  assert.ok(seen.length >= 2, JSON.stringify(seen));
  assert.ok(seen.some((p) => /line2/.test(p.message)));
});

test('files and a resource read', async () => {
  await ok(client, 'write_file', { sandbox_id: sid, path: '/tmp/h.txt', content: 'over http' });
  assert.equal(await ok(client, 'read_file', { sandbox_id: sid, path: '/tmp/h.txt' }), 'over http');
  const r = await client.readResource({ uri: `airlock://sandboxes/${sid}/files/tmp/h.txt` });
  assert.equal(r.contents[0].text, 'over http');
});

test('errors: unknown tool, bad arguments, ping', async () => {
  await client.ping();
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }),
    (e) => e instanceof McpError && e.code === -32602);
  const r = await client.callTool({ name: 'list_files', arguments: { sandbox_id: sid } });
  assert.equal(r.isError, true);
});

test("another tenant's sandbox is refused", async () => {
  const r = await client.callTool({ name: 'run_command', arguments: { sandbox_id: FOREIGN, command: 'echo no' } });
  assert.equal(r.isError, true);
  assert.match(text(r), /HTTP 404/);
});

test('without the server\'s bearer token: refused', async () => {
  await assert.rejects(connectHttp(server.url), /401|Unauthorized|bearer/i);
  await assert.rejects(connectHttp(server.url, 'wrong'), /401|Unauthorized|bearer/i);
});

test('a second client gets its own session', async () => {
  const other = await connectHttp(server.url, server.token);
  assert.notEqual(other.transport.sessionId, conn.transport.sessionId);
  await other.client.ping();
  await other.transport.terminateSession();
  await other.close();
});
