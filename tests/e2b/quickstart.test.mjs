// SPDX-License-Identifier: Apache-2.0
// The definition of done: an unmodified E2B script (quickstart.mjs:
// create, run, stream, files, pty, pause/connect, kill) passes against
// Airlock with only the E2B environment variables set.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

test('an unmodified E2B script runs against Airlock', () => {
  const env = {}
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('E2B_') && !k.startsWith('AIRLOCK_')) env[k] = v
  for (const k of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) env[k] = process.env[k]
  const r = spawnSync(process.execPath, [fileURLToPath(new URL('./quickstart.mjs', import.meta.url))], {
    env,
    encoding: 'utf8',
    timeout: 600_000,
  })
  const out = `${r.stdout}\n${r.stderr}`
  assert.equal(r.status, 0, out)
  for (const step of ['run', 'files', 'pty', 'pause-connect', 'killed'])
    assert.match(r.stdout, new RegExp(`^ok ${step}`, 'm'), out)
})
