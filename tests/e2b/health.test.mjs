// SPDX-License-Identifier: Apache-2.0
// The frame every other file relies on: the SDK reaches airlockd's E2B
// endpoints with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, AuthenticationError } from 'e2b'

test('a wrong key is an AuthenticationError, not a crash', async () => {
  await assert.rejects(
    Sandbox.create(process.env.AIRLOCK_E2B_TEMPLATE, { apiKey: 'alk_' + 'x'.repeat(43) }),
    AuthenticationError
  )
})
