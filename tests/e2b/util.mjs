// SPDX-License-Identifier: Apache-2.0
// What the SDK test files share. Not a test file itself: test_e2b_sdk.py
// runs each *.test.mjs, and this is imported by them.
import { before, after } from 'node:test'
import { Sandbox } from 'e2b'

// The one sandbox of a test file: created before its tests (from the template
// test_e2b_sdk.py names, with opts) and handed to set, killed after them.
// Call it at the top level of the file.
export function oneSandbox(opts, set, template = process.env.AIRLOCK_E2B_TEMPLATE) {
  let sbx
  before(async () => {
    sbx = await Sandbox.create(template, opts)
    set(sbx)
  })
  after(async () => {
    await sbx?.kill()
  })
}

// Polls fn (which may be async) every pollMs until it holds; throws after timeoutMs.
export async function waitFor(what, fn, { timeoutMs = 30_000, pollMs = 200 } = {}) {
  const end = Date.now() + timeoutMs
  for (;;) {
    if (await fn()) return
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, pollMs))
  }
}
