// SPDX-License-Identifier: Apache-2.0
// sandbox.files through E2B's SDK, unmodified (docs/e2b.md "Files (envd)"):
// write (string, ArrayBuffer, Blob, a stream; nested paths; several files),
// read (text, bytes, blob, stream), list with depth, exists, getInfo,
// makeDir, rename, remove, the errors of a missing file, and who owns what
// is written. One sandbox for the file.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { FileNotFoundError, InvalidArgumentError, NotFoundError } from 'e2b'
import { oneSandbox } from './util.mjs'

const TEMPLATE = process.env.AIRLOCK_E2B_TEMPLATE ?? 'base'
let sbx
oneSandbox({ timeoutMs: 600_000 }, (s) => (sbx = s), TEMPLATE)

async function streamText(stream) {
  const chunks = []
  for await (const c of stream) chunks.push(Buffer.from(c))
  return Buffer.concat(chunks).toString()
}

test('write a string and read it as text, bytes, blob and stream', async () => {
  const info = await sbx.files.write('/tmp/hello.txt', 'hello e2b\n')
  assert.equal(info.path, '/tmp/hello.txt')
  assert.equal(info.name, 'hello.txt')
  assert.equal(await sbx.files.read('/tmp/hello.txt'), 'hello e2b\n')
  const bytes = await sbx.files.read('/tmp/hello.txt', { format: 'bytes' })
  assert.ok(bytes instanceof Uint8Array)
  assert.equal(Buffer.from(bytes).toString(), 'hello e2b\n')
  const blob = await sbx.files.read('/tmp/hello.txt', { format: 'blob' })
  assert.equal(await blob.text(), 'hello e2b\n')
  const stream = await sbx.files.read('/tmp/hello.txt', { format: 'stream' })
  assert.equal(await streamText(stream), 'hello e2b\n')
})

test('write an ArrayBuffer, a Blob and a stream', async () => {
  const data = new Uint8Array(200_000)
  for (let i = 0; i < data.length; i++) data[i] = (i * 7) & 0xff
  await sbx.files.write('/tmp/buf.bin', data.buffer)
  const back = await sbx.files.read('/tmp/buf.bin', { format: 'bytes' })
  assert.deepEqual(Buffer.from(back), Buffer.from(data))

  await sbx.files.write('/tmp/blob.txt', new Blob(['from ', 'a blob']))
  assert.equal(await sbx.files.read('/tmp/blob.txt'), 'from a blob')

  const rs = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode('streamed '))
      c.enqueue(new TextEncoder().encode('upload'))
      c.close()
    },
  })
  await sbx.files.write('/tmp/stream.txt', rs)
  assert.equal(await sbx.files.read('/tmp/stream.txt'), 'streamed upload')
})

test('an empty file', async () => {
  await sbx.files.write('/tmp/empty', '')
  assert.equal(await sbx.files.read('/tmp/empty'), '')
  assert.equal((await sbx.files.read('/tmp/empty', { format: 'bytes' })).length, 0)
})

test('a nested path creates its parents; writeFiles writes several', async () => {
  await sbx.files.write('/tmp/deep/er/still/file.txt', 'deep')
  assert.equal(await sbx.files.read('/tmp/deep/er/still/file.txt'), 'deep')
  const infos = await sbx.files.writeFiles([
    { path: '/tmp/multi/a.txt', data: 'A' },
    { path: '/tmp/multi/b.txt', data: new Blob(['B']) },
    { path: '/tmp/multi/sub/c.txt', data: 'C' },
  ])
  assert.deepEqual(
    infos.map((i) => i.path),
    ['/tmp/multi/a.txt', '/tmp/multi/b.txt', '/tmp/multi/sub/c.txt']
  )
  assert.equal(await sbx.files.read('/tmp/multi/sub/c.txt'), 'C')
})

test('list with depth 1 and 2', async () => {
  const one = await sbx.files.list('/tmp/multi')
  assert.deepEqual(one.map((e) => e.name).sort(), ['a.txt', 'b.txt', 'sub'])
  const sub = one.find((e) => e.name === 'sub')
  assert.equal(sub.type, 'dir')
  assert.equal(sub.path, '/tmp/multi/sub')
  const file = one.find((e) => e.name === 'a.txt')
  assert.equal(file.type, 'file')
  assert.equal(file.size, 1)
  const two = await sbx.files.list('/tmp/multi', { depth: 2 })
  assert.deepEqual(two.map((e) => e.path).sort(), [
    '/tmp/multi/a.txt',
    '/tmp/multi/b.txt',
    '/tmp/multi/sub',
    '/tmp/multi/sub/c.txt',
  ])
})

test('exists and getInfo', async () => {
  assert.equal(await sbx.files.exists('/tmp/hello.txt'), true)
  assert.equal(await sbx.files.exists('/tmp/not-there'), false)
  const info = await sbx.files.getInfo('/tmp/hello.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.size, 10)
  assert.equal(info.permissions, '-rw-r--r--')
  assert.ok(info.modifiedTime instanceof Date && !isNaN(info.modifiedTime))
  const dir = await sbx.files.getInfo('/tmp')
  assert.equal(dir.type, 'dir')
})

test('a written file is owned by user; a relative path lands in /home/user', async () => {
  const info = await sbx.files.write('relative/note.txt', 'mine')
  assert.equal(info.path, '/home/user/relative/note.txt')
  const st = await sbx.files.getInfo('/home/user/relative/note.txt')
  assert.equal(st.owner, 'user')
  assert.equal(st.group, 'user')
  assert.equal((await sbx.files.getInfo('/home/user/relative')).owner, 'user')
  assert.equal((await sbx.files.getInfo('/tmp/hello.txt')).owner, 'user')
  assert.equal(await sbx.files.read('relative/note.txt'), 'mine')
  const asRoot = await sbx.files.write('/tmp/root-file', 'r', { user: 'root' })
  assert.equal(asRoot.path, '/tmp/root-file')
  assert.equal((await sbx.files.getInfo('/tmp/root-file')).owner, 'root')
})

test('makeDir is true, then false', async () => {
  assert.equal(await sbx.files.makeDir('/tmp/made/here'), true)
  assert.equal(await sbx.files.makeDir('/tmp/made/here'), false)
  assert.equal((await sbx.files.getInfo('/tmp/made/here')).type, 'dir')
  assert.equal((await sbx.files.getInfo('/tmp/made/here')).owner, 'user')
})

test('rename and remove', async () => {
  await sbx.files.write('/tmp/old-name', 'x')
  const moved = await sbx.files.rename('/tmp/old-name', '/tmp/new-name')
  assert.equal(moved.path, '/tmp/new-name')
  assert.equal(moved.name, 'new-name')
  assert.equal(await sbx.files.exists('/tmp/old-name'), false)
  assert.equal(await sbx.files.read('/tmp/new-name'), 'x')
  await sbx.files.remove('/tmp/new-name')
  assert.equal(await sbx.files.exists('/tmp/new-name'), false)
  await sbx.files.remove('/tmp/multi')
  assert.equal(await sbx.files.exists('/tmp/multi'), false)
})

test('a missing file is a FileNotFoundError', async () => {
  await assert.rejects(sbx.files.read('/tmp/nope/missing.txt'), FileNotFoundError)
  await assert.rejects(sbx.files.getInfo('/tmp/nope'), FileNotFoundError)
  await assert.rejects(sbx.files.list('/tmp/nope'), NotFoundError)
  await assert.rejects(sbx.files.rename('/tmp/nope', '/tmp/nope2'), FileNotFoundError)
})

test('useOctetStream writes files in parallel requests', async () => {
  const infos = await sbx.files.writeFiles(
    [
      { path: '/tmp/oct/1', data: 'one' },
      { path: '/tmp/oct/2', data: new Uint8Array([0, 1, 2, 255]).buffer },
    ],
    { useOctetStream: true }
  )
  assert.deepEqual(infos.map((i) => i.path), ['/tmp/oct/1', '/tmp/oct/2'])
  assert.equal(await sbx.files.read('/tmp/oct/1'), 'one')
  assert.deepEqual([...(await sbx.files.read('/tmp/oct/2', { format: 'bytes' }))], [0, 1, 2, 255])
})

test('gzip: a read asking for it gets the bytes; a gzip upload is refused', async () => {
  assert.equal(await sbx.files.read('/tmp/hello.txt', { gzip: true }), 'hello e2b\n')
  await assert.rejects(sbx.files.write('/tmp/gz.txt', 'zipped', { gzip: true }), InvalidArgumentError)
  assert.equal(await sbx.files.exists('/tmp/gz.txt'), false)
})

test('16 MiB both ways, streamed', async () => {
  const size = 16 << 20
  const data = new Uint8Array(size)
  for (let i = 0; i < size; i += 4096) data[i] = (i >> 12) & 0xff
  await sbx.files.write('/tmp/big.bin', new Blob([data]))
  assert.equal((await sbx.files.getInfo('/tmp/big.bin')).size, size)
  const stream = await sbx.files.read('/tmp/big.bin', { format: 'stream' })
  const chunks = []
  for await (const c of stream) chunks.push(Buffer.from(c))
  assert.ok(Buffer.concat(chunks).equals(Buffer.from(data)))
  await sbx.files.remove('/tmp/big.bin')
})
