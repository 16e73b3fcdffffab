// SPDX-License-Identifier: Apache-2.0
// sandbox.commands, unmodified, on envd's process service (docs/e2b.md,
// "Processes (envd)"): foreground runs with their callbacks, exit codes,
// envs, cwd and users; background commands, list, connect, kill, stdin,
// disconnect and timeoutMs. One sandbox for the file.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, TimeoutError } from 'e2b'
import { oneSandbox, waitFor } from './util.mjs'

let sbx
oneSandbox({ timeoutMs: 900_000, envs: { SANDBOX_WIDE: 'everywhere', OVERRIDDEN: 'sandbox' } }, (s) => (sbx = s))

async function pids() {
  return (await sbx.commands.list()).map((p) => p.pid)
}

test('run: stdout and stderr, as callbacks and in the result', async () => {
  const out = []
  const err = []
  const r = await sbx.commands.run('echo hello; echo oops >&2; echo again', {
    onStdout: (d) => out.push(d),
    onStderr: (d) => err.push(d),
  })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\nagain\n')
  assert.equal(r.stderr, 'oops\n')
  assert.equal(r.error, undefined)
  assert.equal(out.join(''), 'hello\nagain\n')
  assert.equal(err.join(''), 'oops\n')
})

test('a non-zero exit is a CommandExitError with the output', async () => {
  await assert.rejects(sbx.commands.run('echo partial; exit 7'), (e) => {
    assert.ok(e instanceof CommandExitError, e)
    assert.equal(e.exitCode, 7)
    assert.equal(e.stdout, 'partial\n')
    assert.equal(e.error, 'exit status 7')
    return true
  })
})

test('envs and cwd', async () => {
  const r = await sbx.commands.run('echo "$FOO $BAR"; pwd', { envs: { FOO: 'foo', BAR: 'b a r' }, cwd: '/tmp' })
  assert.equal(r.stdout, 'foo b a r\n/tmp\n')
  // The default cwd is the user's home; a relative one is under it.
  assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n')
  await sbx.commands.run('mkdir -p sub')
  assert.equal((await sbx.commands.run('pwd', { cwd: 'sub' })).stdout, '/home/user/sub\n')
})

test("the sandbox's envs, under the command's own", async () => {
  const r = await sbx.commands.run('echo $SANDBOX_WIDE $OVERRIDDEN', { envs: { OVERRIDDEN: 'command' } })
  assert.equal(r.stdout, 'everywhere command\n')
})

test('user: the default user, or root', async () => {
  assert.equal((await sbx.commands.run('whoami; echo $HOME')).stdout, 'user\n/home/user\n')
  assert.equal((await sbx.commands.run('whoami; echo $HOME', { user: 'root' })).stdout, 'root\n/root\n')
})

test('background: list, connect, kill', async () => {
  const h = await sbx.commands.run('echo started; sleep 600', {
    background: true,
    timeoutMs: 0,
    cwd: '/tmp',
    envs: { MARK: 'm1' },
  })
  assert.ok(h.pid > 0)
  const p = (await sbx.commands.list()).find((x) => x.pid === h.pid)
  assert.ok(p, 'the command is listed')
  assert.equal(p.cmd, '/bin/bash')
  assert.deepEqual(p.args, ['-l', '-c', 'echo started; sleep 600'])
  assert.equal(p.cwd, '/tmp')
  assert.equal(p.envs.MARK, 'm1')
  await waitFor('its first output', () => h.stdout === 'started\n')

  const again = await sbx.commands.connect(h.pid, { timeoutMs: 0 })
  assert.equal(again.pid, h.pid)
  assert.equal(await sbx.commands.kill(h.pid), true)
  for (const handle of [h, again]) {
    await assert.rejects(handle.wait(), (e) => {
      assert.ok(e instanceof CommandExitError, e)
      assert.equal(e.exitCode, -1)
      assert.equal(e.error, 'signal: killed')
      return true
    })
  }
  assert.ok(!(await pids()).includes(h.pid))
  // An ended command is not found: kill says so.
  assert.equal(await sbx.commands.kill(h.pid), false)
})

test('stdin: sendStdin, closeStdin', async () => {
  const h = await sbx.commands.run('cat; echo end', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'hello\n')
  await h.sendStdin(new TextEncoder().encode('bytes\n'))
  await waitFor('the echo', () => h.stdout === 'hello\nbytes\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.stdout, 'hello\nbytes\nend\n')
  // Without stdin: true there is no input to send.
  const plain = await sbx.commands.run('sleep 30', { background: true })
  await assert.rejects(sbx.commands.sendStdin(plain.pid, 'x'))
  await plain.kill()
})

test('disconnect leaves the command running', async () => {
  const h = await sbx.commands.run('sleep 4; echo finished', { background: true })
  await h.disconnect()
  await new Promise((r) => setTimeout(r, 500))
  assert.ok((await pids()).includes(h.pid), 'still running after disconnect')
  const again = await sbx.commands.connect(h.pid)
  const r = await again.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'finished\n')
})

test('timeoutMs ends the command', async () => {
  let pid
  await assert.rejects(
    sbx.commands.run('echo $$ > /tmp/timeout.pid; sleep 60', { timeoutMs: 3000 }),
    (e) => e instanceof TimeoutError || e instanceof CommandExitError
  )
  pid = Number((await sbx.commands.run('cat /tmp/timeout.pid')).stdout)
  assert.ok(pid > 0)
  // The command itself is killed (envd ends it when the call's timeout passes).
  await waitFor('the command to end', async () => (await sbx.commands.run(`kill -0 ${pid} 2>/dev/null || echo gone`)).stdout === 'gone\n')
})
