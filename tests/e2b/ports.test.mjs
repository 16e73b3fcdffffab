// SPDX-License-Identifier: Apache-2.0
// A sandbox's ports through airlockd's proxy, from the SDK, unmodified
// (docs/e2b.md, "getHost"; docs/api.md, "The proxy"): `python3 -m
// http.server` started with commands.run({background: true}), reached at
// sandbox.getHost(8000) with the sandbox's trafficAccessToken, refused
// without it, and a sandbox created with lifecycle {onTimeout: 'pause',
// autoResume: true} resumed by a request after sandbox.pause().
//
// getHost(8000) is `8000-<id>.localhost:<proxy port>` (the proxy's default
// domain). Browsers and curl resolve *.localhost to the loopback; Node's
// fetch asks the system resolver, which here (glibc, no nss-myhostname)
// does not, so requests go to 127.0.0.1 with getHost as their Host.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox } from 'e2b'
import { waitFor } from './util.mjs'

const TEMPLATE = process.env.AIRLOCK_E2B_TEMPLATE || 'base'
const made = []

after(async () => {
  for (const sb of made) await Sandbox.kill(sb.sandboxId).catch(() => undefined)
})

// GET http://HOST/PATH, dialled at 127.0.0.1 on HOST's port.
function get(host, path = '/', headers = {}) {
  const m = host.match(/^([^:]+):(\d+)$/)
  assert.ok(m, `getHost answered ${host}: no port (is airlockd's proxy on?)`)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: Number(m[2]), path, headers: { ...headers, Host: host }, timeout: 180_000 },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }))
        res.on('error', reject)
      },
    )
    req.on('timeout', () => req.destroy(new Error(`no answer from ${host}${path}`)))
    req.on('error', reject)
    req.end()
  })
}

const tokenHeader = (sbx) => ({ 'e2b-traffic-access-token': sbx.trafficAccessToken })

async function startServer(sbx) {
  await sbx.commands.run('mkdir -p /tmp/www && echo hello-from-the-guest > /tmp/www/hello.txt')
  await sbx.commands.run('python3 -m http.server 8000', { background: true, cwd: '/tmp/www' })
  await waitFor('http.server on 8000', async () => (await get(sbx.getHost(8000), '/', tokenHeader(sbx))).status === 200, {
    timeoutMs: 120_000,
    pollMs: 1000,
  })
}

test('getHost and trafficAccessToken reach a server in the sandbox', async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 600_000 })
  made.push(sbx)
  assert.match(sbx.trafficAccessToken, /^att_[0-9a-f]{64}$/)
  assert.equal(sbx.getHost(8000).split(':')[0], `8000-${sbx.sandboxId}.localhost`)
  await startServer(sbx)

  const listing = await get(sbx.getHost(8000), '/', tokenHeader(sbx))
  assert.equal(listing.status, 200)
  assert.match(listing.body, /Directory listing for \//)
  assert.match(listing.body, /hello\.txt/)
  const file = await get(sbx.getHost(8000), '/hello.txt', tokenHeader(sbx))
  assert.deepEqual(file, { status: 200, body: 'hello-from-the-guest\n' })

  const refused = await get(sbx.getHost(8000), '/')
  assert.equal(refused.status, 401)
  assert.doesNotMatch(refused.body, /hello\.txt/)
  const wrong = await get(sbx.getHost(8000), '/', { 'e2b-traffic-access-token': 'att_' + '0'.repeat(64) })
  assert.equal(wrong.status, 401)

  // connect (and getInfo's answer behind it) hands out the same token and domain.
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.trafficAccessToken, sbx.trafficAccessToken)
  assert.equal(again.getHost(8000), sbx.getHost(8000))
})

test('a request through getHost resumes a paused sandbox with autoResume', async () => {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 600_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  made.push(sbx)
  const info = await sbx.getInfo()
  assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
  await startServer(sbx)

  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const r = await get(sbx.getHost(8000), '/hello.txt', tokenHeader(sbx))
  assert.deepEqual(r, { status: 200, body: 'hello-from-the-guest\n' })
  assert.equal((await sbx.getInfo()).state, 'running')
})
