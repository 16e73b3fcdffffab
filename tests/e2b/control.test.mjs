// SPDX-License-Identifier: Apache-2.0
// E2B's control API through the SDK, unmodified (docs/e2b.md, "Control
// API"): create with metadata and envs, getInfo, isRunning, setTimeout, list
// with pages and a metadata filter, pause and connect (resume), kill, and
// the errors the SDK maps. Two sandboxes, killed in `after`.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import {
  Sandbox,
  ALL_TRAFFIC,
  AuthenticationError,
  NotFoundError,
  SandboxError,
  SandboxNotFoundError,
} from 'e2b'

const TEMPLATE = process.env.AIRLOCK_E2B_TEMPLATE || 'base'
const UNKNOWN_ID = 'sb-0123456789abcdef'
const RUN = `control-${process.pid}-${Date.now()}`
const made = []
let first, second

before(async () => {
  first = await Sandbox.create(TEMPLATE, {
    metadata: { run: RUN, which: 'first', 'odd key': 'a&b=c+d %' },
    envs: { GREETING: 'hi' },
    timeoutMs: 600_000,
  })
  made.push(first)
  // No template: the SDK's default, `base`, which Airlock has.
  const opts = { metadata: { run: RUN, which: 'second' } }
  second = await (TEMPLATE === 'base' ? Sandbox.create(opts) : Sandbox.create(TEMPLATE, opts))
  made.push(second)
})

after(async () => {
  for (const sb of made) await Sandbox.kill(sb.sandboxId).catch(() => undefined)
})

test('create answers an id, envd version and token', () => {
  for (const sb of [first, second]) {
    assert.match(sb.sandboxId, /^sb-[0-9a-f]{16}$/)
  }
  assert.notEqual(first.sandboxId, second.sandboxId)
})

test('getInfo shows what create asked', async () => {
  const info = await first.getInfo()
  assert.equal(info.sandboxId, first.sandboxId)
  assert.equal(info.templateId, TEMPLATE)
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { run: RUN, which: 'first', 'odd key': 'a&b=c+d %' })
  assert.equal(info.cpuCount, 1)
  assert.equal(info.memoryMB, 512)
  assert.equal(info.envdVersion, '0.6.4')
  assert.ok(info.startedAt instanceof Date && !isNaN(info.startedAt))
  const left = info.endAt.getTime() - Date.now()
  assert.ok(left > 500_000 && left <= 600_000, `endAt ${info.endAt.toISOString()} is not about 600 s away`)
  const same = await Sandbox.getInfo(first.sandboxId)
  assert.equal(same.sandboxId, first.sandboxId)
})

test('isRunning', async () => {
  assert.equal(await first.isRunning(), true)
})

test('setTimeout moves endAt', async () => {
  await first.setTimeout(1_200_000)
  const left = (await first.getInfo()).endAt.getTime() - Date.now()
  assert.ok(left > 1_100_000 && left <= 1_200_000, `endAt is ${left} ms away`)
  await Sandbox.setTimeout(first.sandboxId, 900_000)
  const again = (await first.getInfo()).endAt.getTime() - Date.now()
  assert.ok(again > 800_000 && again <= 900_000, `endAt is ${again} ms away`)
})

test('list: pages of one, and a metadata filter', async () => {
  const ids = []
  const pager = Sandbox.list({ limit: 1, query: { metadata: { run: RUN } } })
  let pages = 0
  while (pager.hasNext) {
    const items = await pager.nextItems()
    assert.ok(items.length <= 1, `a page of ${items.length}`)
    ids.push(...items.map((s) => s.sandboxId))
    assert.ok(++pages <= 3, 'pagination does not end')
  }
  assert.deepEqual(ids.sort(), [first.sandboxId, second.sandboxId].sort())

  const all = await Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems()
  assert.equal(all.length, 2)
  for (const s of all) {
    assert.equal(s.templateId, TEMPLATE)
    assert.equal(s.state, 'running')
    assert.equal(s.metadata.run, RUN)
  }
  const odd = await Sandbox.list({ query: { metadata: { 'odd key': 'a&b=c+d %' } } }).nextItems()
  assert.deepEqual(odd.map((s) => s.sandboxId), [first.sandboxId])
  const none = await Sandbox.list({ query: { metadata: { run: 'no-such-run' } } }).nextItems()
  assert.deepEqual(none, [])
})

test('getMetrics: one sample, now', async () => {
  const metrics = await Sandbox.getMetrics(first.sandboxId)
  assert.equal(metrics.length, 1)
  const [m] = metrics
  assert.equal(m.cpuCount, 1)
  assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpuUsedPct ${m.cpuUsedPct}`)
  assert.ok(m.memUsed > 0 && m.memUsed < m.memTotal && m.diskUsed > 0 && m.diskUsed < m.diskTotal)
  assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp))
})

test('network: a closed world maps, an open one is refused', async () => {
  await Sandbox.updateNetwork(first.sandboxId, { allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] })
  const info = await first.getInfo()
  assert.deepEqual(info.network.allowOut, ['example.com'])
  assert.deepEqual(info.network.denyOut, [ALL_TRAFFIC])
  const refused = (e) => {
    assert.ok(e instanceof SandboxError, `${e}`)
    assert.match(e.message, /^400: .*whole internet/)
    return true
  }
  await assert.rejects(Sandbox.create(TEMPLATE, { allowInternetAccess: true }), refused)
  await assert.rejects(Sandbox.create(TEMPLATE, { network: { allowOut: ['example.com'] } }), refused)
  await assert.rejects(
    Sandbox.updateNetwork(first.sandboxId, { allowInternetAccess: true }),
    refused
  )
  await assert.rejects(
    Sandbox.create(TEMPLATE, { network: { allowOut: ['10.0.0.0/8'], denyOut: [ALL_TRAFFIC] } }),
    /^SandboxError: 400: .*ceiling/
  )
})

test('pause, then connect resumes it', async () => {
  assert.equal(await second.pause(), true)
  assert.equal(await Sandbox.pause(second.sandboxId), false, 'a paused sandbox pauses no more')
  assert.equal((await second.getInfo()).state, 'paused')
  assert.equal(await second.isRunning(), false, 'isRunning of a paused sandbox')
  const paused = await Sandbox.list({ query: { metadata: { run: RUN }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [second.sandboxId])

  const back = await Sandbox.connect(second.sandboxId, { timeoutMs: 300_000 })
  assert.equal(back.sandboxId, second.sandboxId)
  assert.equal((await back.getInfo()).state, 'running')
  assert.equal(await back.isRunning(), true)
  // Connecting to a running one answers it as it is.
  const again = await Sandbox.connect(second.sandboxId)
  assert.equal(again.sandboxId, second.sandboxId)
})

test('kill', async () => {
  assert.equal(await second.kill(), true)
  assert.equal(await Sandbox.kill(second.sandboxId), false, 'a killed sandbox is not found')
  await assert.rejects(second.getInfo(), SandboxNotFoundError)
  assert.equal(await second.isRunning(), false, 'isRunning of a killed sandbox')
  const left = await Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems()
  assert.deepEqual(left.map((s) => s.sandboxId), [first.sandboxId])
})

test('unknown sandboxes are not found', async () => {
  await assert.rejects(Sandbox.getInfo(UNKNOWN_ID), SandboxNotFoundError)
  await assert.rejects(Sandbox.getInfo(UNKNOWN_ID), NotFoundError)
  await assert.rejects(Sandbox.connect(UNKNOWN_ID), SandboxNotFoundError)
  await assert.rejects(Sandbox.setTimeout(UNKNOWN_ID, 60_000), SandboxNotFoundError)
  await assert.rejects(Sandbox.pause(UNKNOWN_ID), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(UNKNOWN_ID), false)
})

test("another tenant's key sees none of them", async () => {
  const apiKey = process.env.AIRLOCK_E2B_OTHER_KEY
  assert.ok(apiKey, 'AIRLOCK_E2B_OTHER_KEY is set by test_e2b_sdk.py')
  await assert.rejects(Sandbox.getInfo(first.sandboxId, { apiKey }), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(first.sandboxId, { apiKey }), false)
  assert.deepEqual(await Sandbox.list({ apiKey }).nextItems(), [])
  assert.equal((await first.getInfo()).state, 'running')
})

test('a bad key is an AuthenticationError', async () => {
  const apiKey = 'alk_' + 'x'.repeat(43)
  await assert.rejects(Sandbox.list({ apiKey }).nextItems(), AuthenticationError)
  await assert.rejects(Sandbox.getInfo(first.sandboxId, { apiKey }), AuthenticationError)
  await assert.rejects(Sandbox.kill(first.sandboxId, { apiKey }), AuthenticationError)
})

test('an unknown template is a clear error', async () => {
  await assert.rejects(Sandbox.create('no-such-template'), (e) => {
    assert.match(e.message, /unknown template "no-such-template"/)
    return true
  })
})
