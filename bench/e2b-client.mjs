// SPDX-License-Identifier: Apache-2.0
// The timing half of bench/e2b: the same operations through E2B's SDK
// (unmodified, from tests/e2b/node_modules) and through Airlock's own API
// (fetch over the TCP listener with a bearer token), in turns, on the same
// host. Prints one JSON object of samples (seconds) on stdout.
// Env: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, AIRLOCK_URL, BENCH_N, BENCH_CREATES.
const { Sandbox } = await import(new URL('../tests/e2b/node_modules/e2b/dist/index.mjs', import.meta.url))

const N = Number(process.env.BENCH_N || 50)
const CREATES = Number(process.env.BENCH_CREATES || 5)
const WARMUP = 3
const api = process.env.AIRLOCK_URL
const auth = { Authorization: `Bearer ${process.env.E2B_API_KEY}` }
const SHAPE = { template: 'base', vcpus: 1, memory_mib: 512 }
// What the SDK runs for commands.run(CMD): bash as a login shell, as `user`
// in its home (envd's default user), so both sides run the same thing.
const BASH = (cmd) => ({
  cmd: ['/bin/bash', '-l', '-c', cmd],
  uid: 1000,
  gid: 1000,
  cwd: '/home/user',
  env: { HOME: '/home/user', USER: 'user' },
})
const now = () => Number(process.hrtime.bigint()) / 1e9

async function native(method, path, body, raw) {
  const headers = { ...auth }
  if (body !== undefined && !raw) headers['Content-Type'] = 'application/json'
  const r = await fetch(api + path, { method, headers, body: raw ? body : body && JSON.stringify(body) })
  const text = await r.text()
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${text}`)
  return text ? (raw ? text : JSON.parse(text)) : null
}

async function timed(n, fn) {
  const out = []
  for (let i = 0; i < WARMUP + n; i++) {
    const t0 = now()
    await fn()
    if (i >= WARMUP) out.push(now() - t0)
  }
  return out
}

const res = {}
// (a) create -> first command's output, in turns; the first of each kind
// (the template snapshot made, the connections opened) is not counted.
res.create_sdk = []
res.create_native = []
for (let i = -1; i < CREATES; i++) {
  let t0 = now()
  const s = await Sandbox.create()
  const r = await s.commands.run('echo ready')
  if (i >= 0) res.create_sdk.push(now() - t0)
  if (r.stdout !== 'ready\n') throw new Error(`sdk create: ${JSON.stringify(r)}`)
  await s.kill()
  t0 = now()
  const sb = await native('POST', '/v1/sandboxes', SHAPE)
  const e = await native('POST', `/v1/sandboxes/${sb.id}/exec`, BASH('echo ready'))
  if (i >= 0) res.create_native.push(now() - t0)
  if (e.stdout !== 'ready\n') throw new Error(`native create: ${JSON.stringify(e)}`)
  await native('DELETE', `/v1/sandboxes/${sb.id}`)
}

// (b) on one sandbox: a command, and a 4 KiB file written and read back.
const s = await Sandbox.create()
try {
  const id = s.sandboxId
  res.run_sdk = await timed(N, async () => {
    const r = await s.commands.run('true')
    if (r.exitCode !== 0) throw new Error('run')
  })
  res.run_native = await timed(N, async () => {
    const r = await native('POST', `/v1/sandboxes/${id}/exec`, BASH('true'))
    if (r.exit_code !== 0) throw new Error('exec')
  })
  const data = 'x'.repeat(4096)
  res.file_sdk = await timed(N, async () => {
    await s.files.write('/tmp/bench.txt', data)
    if ((await s.files.read('/tmp/bench.txt')).length !== 4096) throw new Error('file')
  })
  res.file_native = await timed(N, async () => {
    await native('PUT', `/v1/sandboxes/${id}/files?path=/tmp/bench.txt`, data, true)
    if ((await native('GET', `/v1/sandboxes/${id}/files?path=/tmp/bench.txt`, undefined, true)).length !== 4096)
      throw new Error('file')
  })
} finally {
  await s.kill()
}
console.log(JSON.stringify(res))
