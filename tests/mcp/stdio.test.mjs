// SPDX-License-Identifier: Apache-2.0
// `airlock mcp` over stdio, driven by the official MCP client: every tool, progress
// notifications, resources, and the errors (unknown tool, bad arguments, another
// tenant's sandbox).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { McpError } from '@modelcontextprotocol/sdk/types.js';

import { connectStdio, createSandbox, ok, text, FOREIGN, LONG, TOOLS } from './mcputil.mjs';

let conn;
let client;
let sid;
const extra = [];

before(async () => {
  conn = await connectStdio();
  client = conn.client;
  sid = await createSandbox(client);
});

after(async () => {
  for (const id of [...extra, sid]) {
    if (id) await client.callTool({ name: 'delete_sandbox', arguments: { sandbox_id: id } }, undefined, LONG).catch(() => {});
  }
  await conn?.close();
});

test('initialize: server info, capabilities, a protocol version', () => {
  assert.equal(client.getServerVersion().name, 'airlock');
  const caps = client.getServerCapabilities();
  assert.ok(caps.tools, 'tools capability');
  assert.ok(caps.resources, 'resources capability');
  assert.match(client.getInstructions() ?? '', /sandbox/);
});

test('tools/list: every tool, with a JSON Schema; no expose_port', async () => {
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.equal(t.inputSchema.additionalProperties, false, t.name);
    assert.ok(t.description.length > 10, t.name);
  }
});

test('list_templates names the built-in templates create_sandbox takes', async () => {
  const { templates } = JSON.parse(await ok(client, 'list_templates', {}));
  const minimal = templates.find((t) => t.name === 'minimal');
  assert.ok(minimal, JSON.stringify(templates));
  assert.equal(minimal.source, 'builtin');
  assert.ok(minimal.size_mib > 0);
});

test('list_sandboxes lists the sandbox', async () => {
  const list = JSON.parse(await ok(client, 'list_sandboxes', {}));
  assert.ok(list.sandboxes.some((s) => s.id === sid && s.metadata.suite === 'mcp'));
});

test('run_command: exit code, stdout, stderr, and progress while it runs', async () => {
  const seen = [];
  const r = await client.callTool(
    { name: 'run_command', arguments: { sandbox_id: sid, command: 'echo hello; echo oops >&2; sleep 1; echo bye; exit 3' } },
    undefined, { ...LONG, onprogress: (p) => seen.push(p) });
  const t = text(r);
  assert.match(t, /^exit code 3/);
  assert.match(t, /--- stdout ---\nhello\nbye\n/);
  assert.match(t, /--- stderr ---\noops\n/);
  assert.ok(seen.length >= 2, `progress notifications: ${JSON.stringify(seen)}`);
  assert.ok(seen.some((p) => /stdout: hello/.test(p.message)), JSON.stringify(seen));
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, 'progress increases');
});

test('run_command: argv, stdin, cwd, env, timeout', async () => {
  let t = await ok(client, 'run_command', { sandbox_id: sid, argv: ['cat'], stdin: 'from stdin' });
  assert.match(t, /--- stdout ---\nfrom stdin/);
  t = await ok(client, 'run_command', { sandbox_id: sid, command: 'pwd; echo $X', cwd: '/tmp', env: { X: 'y' } });
  assert.match(t, /\/tmp\ny\n/);
  t = await ok(client, 'run_command', { sandbox_id: sid, command: 'sleep 30', timeout_s: 1 });
  assert.match(t, /^timed out/);
});

test('run_command: output bounded at 64 KiB with a truncation marker', async () => {
  const t = await ok(client, 'run_command', {
    sandbox_id: sid, command: 'yes aaaaaaaaa | head -c 100000',
  });
  assert.match(t, /\[… 34464 bytes truncated\]/);
  assert.ok(t.length < 70_000, `text of ${t.length} bytes`);
});

test('write_file, read_file (bounded), list_files', async () => {
  await ok(client, 'write_file', { sandbox_id: sid, path: '/tmp/hello.txt', content: 'hi there\n' });
  assert.equal(await ok(client, 'read_file', { sandbox_id: sid, path: '/tmp/hello.txt' }), 'hi there\n');
  assert.equal(await ok(client, 'read_file', { sandbox_id: sid, path: '/tmp/hello.txt', max_bytes: 2 }),
    'hi\n[… 7 bytes truncated]');
  await ok(client, 'write_file', { sandbox_id: sid, path: '/tmp/bin', content: Buffer.from([0, 1, 2, 255]).toString('base64'), encoding: 'base64' });
  assert.match(await ok(client, 'read_file', { sandbox_id: sid, path: '/tmp/bin' }), /^\(binary file, base64\)\nAAEC\/w==/);
  const ls = await ok(client, 'list_files', { sandbox_id: sid, path: '/tmp' });
  assert.match(ls, /hello\.txt/);
});

test('download a tree as tar, upload it elsewhere', async () => {
  const r = await client.callTool({ name: 'download', arguments: { sandbox_id: sid, path: '/tmp/hello.txt' } }, undefined, LONG);
  assert.notEqual(r.isError, true, text(r));
  const res = r.content.find((c) => c.type === 'resource');
  assert.equal(res.resource.mimeType, 'application/x-tar');
  const tar = Buffer.from(res.resource.blob, 'base64');
  assert.ok(tar.includes(Buffer.from('hi there\n')));
  await ok(client, 'run_command', { sandbox_id: sid, command: 'mkdir -p /tmp/copy' });
  await ok(client, 'upload', { sandbox_id: sid, path: '/tmp/copy', archive_base64: res.resource.blob });
  assert.equal(await ok(client, 'read_file', { sandbox_id: sid, path: '/tmp/copy/hello.txt' }), 'hi there\n');
});

test('start_process, get_output, kill_process', async () => {
  let t = await ok(client, 'start_process', { sandbox_id: sid, command: 'echo started; sleep 1; echo done', tag: 'bg' });
  const pid = /process (\S+) in/.exec(t)[1];
  t = await ok(client, 'get_output', { sandbox_id: sid, process_id: pid, wait_s: 30 });
  assert.match(t, /exit code 0/);
  assert.match(t, /started\ndone/);
  t = await ok(client, 'start_process', { sandbox_id: sid, argv: ['sleep', '100'] });
  const pid2 = /process (\S+) in/.exec(t)[1];
  assert.match(await ok(client, 'get_output', { sandbox_id: sid, process_id: pid2 }), /still running/);
  await ok(client, 'kill_process', { sandbox_id: sid, process_id: pid2, signal: 'KILL' });
  assert.match(await ok(client, 'get_output', { sandbox_id: sid, process_id: pid2, wait_s: 30 }), /killed by signal 9/);
});

test('resources: list, templates, read a file and a directory', async () => {
  const { resources } = await client.listResources();
  assert.ok(resources.some((r) => r.uri === `airlock://sandboxes/${sid}`));
  const { resourceTemplates } = await client.listResourceTemplates();
  assert.ok(resourceTemplates.some((t) => t.uriTemplate.includes('/files/{+path}')));
  let r = await client.readResource({ uri: `airlock://sandboxes/${sid}/files/tmp/hello.txt` });
  assert.equal(r.contents[0].text, 'hi there\n');
  r = await client.readResource({ uri: `airlock://sandboxes/${sid}/files/tmp` });
  assert.ok(JSON.parse(r.contents[0].text).entries.some((e) => e.name === 'hello.txt'));
  r = await client.readResource({ uri: `airlock://sandboxes/${sid}` });
  assert.equal(JSON.parse(r.contents[0].text).id, sid);
  await assert.rejects(client.readResource({ uri: `airlock://sandboxes/${sid}/files/no/such/file` }),
    (e) => e instanceof McpError && e.code === -32002);
});

test('expose_port and list_ports: a link to a server in the sandbox', async () => {
  await ok(client, 'start_process', {
    sandbox_id: sid, tag: 'httpd',
    command: 'mkdir -p /tmp/www && echo "served by the guest" > /tmp/www/index.html && exec httpd -f -p 8000 -h /tmp/www',
  });
  const port = JSON.parse(await ok(client, 'expose_port', { sandbox_id: sid, port: 8000 }));
  assert.equal(port.port, 8000);
  assert.equal(port.public, false);
  assert.match(port.url, new RegExp(`^http://8000-${sid}\\.`));
  const token = new URL(port.link).searchParams.get('airlock_token');
  assert.match(token, /^att_[0-9a-f]{64}$/);
  assert.deepEqual(JSON.parse(await ok(client, 'list_ports', { sandbox_id: sid })), [port]);
  // The path form's URL, through the proxy, with the token the link carries.
  const url = port.path_url.replace('//localhost:', '//127.0.0.1:');
  let r;
  for (let i = 0; i < 60; i++) {
    r = await fetch(url, { headers: { 'X-Airlock-Traffic-Token': token } });
    if (r.status !== 502) break;
    await new Promise((res) => setTimeout(res, 500));
  }
  assert.equal(r.status, 200);
  assert.equal(await r.text(), 'served by the guest\n');
  assert.equal((await fetch(url)).status, 401);
  const bad = await client.callTool({ name: 'expose_port', arguments: { sandbox_id: sid, port: 70000 } });
  assert.equal(bad.isError, true);
});

test('snapshot and restore', async () => {
  await ok(client, 'write_file', { sandbox_id: sid, path: '/tmp/state', content: 'before' });
  const snap = JSON.parse(await ok(client, 'snapshot', { sandbox_id: sid, name: 'mcp-test' }));
  assert.match(snap.id, /^snap-/);
  const restored = JSON.parse(await ok(client, 'restore', { snapshot_id: snap.id }));
  extra.push(restored.id);
  assert.notEqual(restored.id, sid);
  assert.equal(await ok(client, 'read_file', { sandbox_id: restored.id, path: '/tmp/state' }), 'before');
  assert.match(await ok(client, 'delete_sandbox', { sandbox_id: restored.id }), /deleted/);
});

test('errors: unknown tool is a protocol error, bad arguments and daemon refusals are tool errors', async () => {
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }),
    (e) => e instanceof McpError && e.code === -32602 && /Unknown tool: no_such_tool/.test(e.message));
  // The client negotiated 2025-11-25: invalid arguments are a tool error the model can read.
  let r = await client.callTool({ name: 'read_file', arguments: { sandbox_id: sid } });
  assert.equal(r.isError, true);
  assert.match(text(r), /missing the required argument "path"/);
  r = await client.callTool({ name: 'run_command', arguments: { sandbox_id: sid, command: 'true', timeout_s: 99999 } });
  assert.equal(r.isError, true);
  r = await client.callTool({ name: 'read_file', arguments: { sandbox_id: '../tokens', path: '/x' } });
  assert.equal(r.isError, true);
  r = await client.callTool({ name: 'read_file', arguments: { sandbox_id: sid, path: '/no/such/file' } });
  assert.equal(r.isError, true);
  assert.match(text(r), /HTTP 404/);
});

test("another tenant's sandbox is refused: the token decides", async () => {
  assert.ok(FOREIGN, 'AIRLOCK_MCP_FOREIGN is not set');
  for (const [name, args] of [
    ['run_command', { sandbox_id: FOREIGN, command: 'echo no' }],
    ['read_file', { sandbox_id: FOREIGN, path: '/etc/hostname' }],
    ['delete_sandbox', { sandbox_id: FOREIGN }],
  ]) {
    const r = await client.callTool({ name, arguments: args }, undefined, LONG);
    assert.equal(r.isError, true, `${name}: ${text(r)}`);
    assert.match(text(r), /HTTP 404/);
  }
  const list = JSON.parse(await ok(client, 'list_sandboxes', {}));
  assert.ok(!list.sandboxes.some((s) => s.id === FOREIGN));
  await assert.rejects(client.readResource({ uri: `airlock://sandboxes/${FOREIGN}` }), (e) => e.code === -32002);
});

test('delete_sandbox', async () => {
  assert.match(await ok(client, 'delete_sandbox', { sandbox_id: sid }), /deleted/);
  const list = JSON.parse(await ok(client, 'list_sandboxes', {}));
  assert.ok(!list.sandboxes.some((s) => s.id === sid));
  sid = null;
});
