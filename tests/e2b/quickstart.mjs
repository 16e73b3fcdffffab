// SPDX-License-Identifier: Apache-2.0
// An agent's script written for E2B, unchanged: it runs against Airlock with
// only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set (docs/e2b.md).
// Each step prints one line "ok STEP ..." so a test can follow it; any failure
// throws and exits non-zero.
import { Sandbox } from 'e2b'

const sbx = await Sandbox.create({ metadata: { purpose: 'quickstart' }, envs: { GREETING: 'hello' } })
try {
  // Run a command and stream its output.
  const seen = []
  const r = await sbx.commands.run('echo "$GREETING from $(whoami)"; python3 -c "print(6*7)"', {
    onStdout: (d) => seen.push(d),
  })
  if (r.exitCode !== 0 || !r.stdout.includes('hello from user') || !r.stdout.includes('42'))
    throw new Error(`run: ${JSON.stringify(r)}`)
  console.log(`ok run ${JSON.stringify(r.stdout)} streamed=${seen.length > 0}`)

  // Files: write code, run it, read its result.
  await sbx.files.write('work/main.py', 'open("out.txt","w").write(str(sum(range(10))))\n')
  await sbx.commands.run('cd work && python3 main.py')
  const out = await sbx.files.read('work/out.txt')
  if (out !== '45') throw new Error(`files: ${out}`)
  const names = (await sbx.files.list('work')).map((e) => e.name).sort()
  console.log(`ok files ${out} ${names.join(',')}`)

  // A terminal.
  let screen = ''
  const decoder = new TextDecoder()
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (screen += decoder.decode(d)) })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo pty-$((20+22))\n'))
  for (let i = 0; i < 100 && !screen.includes('pty-42'); i++) await new Promise((res) => setTimeout(res, 100))
  if (!screen.includes('pty-42')) throw new Error(`pty: ${JSON.stringify(screen)}`)
  await sbx.pty.kill(pty.pid)
  console.log('ok pty')

  // A background process survives a pause and the connect that resumes it.
  const bg = await sbx.commands.run('sleep 600', { background: true })
  await sbx.pause()
  const again = await Sandbox.connect(sbx.sandboxId)
  const listed = await again.commands.list()
  if (!listed.some((p) => p.pid === bg.pid)) throw new Error(`list: ${JSON.stringify(listed)}`)
  const kept = await again.files.read('work/out.txt')
  if (kept !== '45') throw new Error(`after connect: ${kept}`)
  await again.commands.kill(bg.pid)
  console.log(`ok pause-connect ${listed.length}`)
} finally {
  await sbx.kill()
}
console.log('ok killed')
