// SPDX-License-Identifier: Apache-2.0
// sandbox.pty, unmodified, on envd's process service (docs/e2b.md,
// "Processes (envd)"): a login shell on a PTY, its input, its size, connect
// and kill. One sandbox for the file.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError } from 'e2b'
import { oneSandbox, waitFor } from './util.mjs'

let sbx
const enc = new TextEncoder()
const POLL = { pollMs: 100 }
oneSandbox({ timeoutMs: 900_000 }, (s) => (sbx = s))

// A terminal's output, decoded as it comes.
function screen() {
  const dec = new TextDecoder()
  const s = { text: '' }
  s.onData = (d) => {
    s.text += dec.decode(d, { stream: true })
  }
  return s
}

test('pty: create, sendInput, resize, kill', async () => {
  const s = screen()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: s.onData, timeoutMs: 0 })
  assert.ok(h.pid > 0)
  await sbx.pty.sendInput(h.pid, enc.encode('echo hi$((40+2))\n'))
  await waitFor('the echo', () => s.text.includes('hi42'), POLL)
  await sbx.pty.sendInput(h.pid, enc.encode('stty size; whoami; pwd; echo $TERM\n'))
  await waitFor('the size', () => /24 80\r\nuser\r\n\/home\/user\r\nxterm-256color/.test(s.text), POLL)
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, enc.encode('stty size\n'))
  await waitFor('the new size', () => s.text.includes('30 100'), POLL)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'the PTY is listed')
  assert.equal(await sbx.pty.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
  assert.equal(await sbx.pty.kill(h.pid), false)
})

test('pty: an exit ends it; connect follows one again', async () => {
  const first = screen()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: first.onData, timeoutMs: 0 })
  await h.disconnect()
  const s = screen()
  const again = await sbx.pty.connect(h.pid, { onData: s.onData, timeoutMs: 0 })
  await sbx.pty.sendInput(h.pid, enc.encode('echo back$((1+1)); exit 3\n'))
  await assert.rejects(again.wait(), (e) => e instanceof CommandExitError && e.exitCode === 3)
  assert.ok(s.text.includes('back2'), s.text)
})
