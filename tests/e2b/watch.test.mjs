// SPDX-License-Identifier: Apache-2.0
// sandbox.files.watchDir, unmodified, on envd's WatchDir (docs/e2b.md,
// "Watching directories (envd)"): the events of a watched directory
// (create, write, remove, rename), recursive watches, a missing directory,
// handle.stop() ending the watch in the guest. One sandbox for the file.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { FilesystemEventType, NotFoundError } from 'e2b'
import { oneSandbox, waitFor } from './util.mjs'

let sbx
oneSandbox({ timeoutMs: 900_000 }, (s) => (sbx = s))

const has = (events, name, type) => events.some((e) => e.name === name && e.type === type)

test('watchDir: create, write, rename, remove in the watched directory', async () => {
  await sbx.commands.run('rm -rf /home/user/w && mkdir -p /home/user/w')
  const events = []
  let exited = false
  const handle = await sbx.files.watchDir('/home/user/w', (e) => events.push(e), {
    onExit: () => {
      exited = true
    },
  })
  try {
    await sbx.files.write('/home/user/w/a.txt', 'hello')
    await sbx.commands.run('cd /home/user/w && echo more >> a.txt && mv a.txt b.txt && rm b.txt')
    await waitFor('the remove event', () => has(events, 'b.txt', FilesystemEventType.REMOVE))
    assert.ok(has(events, 'a.txt', FilesystemEventType.CREATE), JSON.stringify(events))
    assert.ok(has(events, 'a.txt', FilesystemEventType.WRITE), JSON.stringify(events))
    assert.ok(has(events, 'a.txt', FilesystemEventType.RENAME), JSON.stringify(events))
  } finally {
    await handle.stop()
  }
  assert.equal(typeof exited, 'boolean')
})

test('watchDir: a relative path is under the home; recursive sees new subdirectories', async () => {
  await sbx.commands.run('rm -rf ~/rw && mkdir -p ~/rw/old')
  const events = []
  const handle = await sbx.files.watchDir('rw', (e) => events.push(e), { recursive: true })
  try {
    await sbx.commands.run('mkdir -p ~/rw/new/deep && echo 1 > ~/rw/new/deep/f && echo 2 > ~/rw/old/g')
    await waitFor('events in the subdirectories', () =>
      has(events, 'new/deep/f', FilesystemEventType.CREATE) && has(events, 'old/g', FilesystemEventType.CREATE)
    )
    assert.ok(has(events, 'new', FilesystemEventType.CREATE), JSON.stringify(events))
  } finally {
    await handle.stop()
  }
})

test('watchDir: includeEntry gives the EntryInfo of a created file', async () => {
  await sbx.commands.run('rm -rf /home/user/we && mkdir -p /home/user/we')
  const events = []
  const handle = await sbx.files.watchDir('/home/user/we', (e) => events.push(e), { includeEntry: true })
  try {
    await sbx.files.write('/home/user/we/e.txt', 'hello')
    // The upload is made by root and then given to the user (a chmod
    // event): the entry is the path as it was when each event was sent.
    const owned = (e) => e.name === 'e.txt' && e.entry?.owner === 'user'
    await waitFor('an event with the entry of the user\'s file', () => events.some(owned))
    const { entry } = events.find(owned)
    assert.equal(entry.name, 'e.txt')
    assert.equal(entry.path, '/home/user/we/e.txt')
    assert.equal(entry.type, 'file')
    assert.equal(entry.owner, 'user')
    assert.ok(entry.modifiedTime instanceof Date, JSON.stringify(entry))
  } finally {
    await handle.stop()
  }
})

test('watchDir: a missing directory is a NotFoundError', async () => {
  await assert.rejects(sbx.files.watchDir('/no/such/dir', () => {}), NotFoundError)
})

test('handle.stop() ends the watch in the guest', async () => {
  await sbx.commands.run('mkdir -p /tmp/ws')
  const inotify = async () =>
    Number((await sbx.commands.run('ls -l /proc/1/fd | grep -c inotify || true', { user: 'root' })).stdout.trim())
  await waitFor('no watch left from the tests before', async () => (await inotify()) === 0)
  const handle = await sbx.files.watchDir('/tmp/ws', () => {})
  assert.equal(await inotify(), 1)
  await handle.stop()
  await waitFor('the guest watch to end', async () => (await inotify()) === 0)
})
