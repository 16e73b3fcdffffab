// SPDX-License-Identifier: Apache-2.0
// The node half of bench/sdk: exec `true` on one sandbox through Airlock's
// TypeScript SDK (sdk/typescript, Sandbox.connect then sb.exec) and, in turns
// in the same process, through a raw request (node:http over the same unix
// socket, a new connection each, as the SDK makes one) so that node's own
// cost is visible. Prints one JSON object of samples (seconds) on stdout.
// Env: AIRLOCK_SOCKET, BENCH_ID, BENCH_N, BENCH_WARMUP.
import http from 'node:http'

const { Sandbox } = await import(new URL('../sdk/typescript/src/index.js', import.meta.url))

const N = Number(process.env.BENCH_N || 50)
const WARMUP = Number(process.env.BENCH_WARMUP || 3)
const socketPath = process.env.AIRLOCK_SOCKET
const id = process.env.BENCH_ID
const now = () => Number(process.hrtime.bigint()) / 1e9

function raw(method, path, body) {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body))
    const req = http.request({
      socketPath, method, path, agent: false,
      headers: { Host: 'airlock', 'Content-Type': 'application/json', 'Content-Length': String(data.length) },
    }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        if (res.statusCode !== 200) reject(new Error(`${method} ${path}: ${res.statusCode} ${text}`))
        else resolve(JSON.parse(text))
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(data)
  })
}

const sb = await Sandbox.connect(id, { socketPath })
const res = { ts_sdk: [], node_raw: [] }
for (let i = 0; i < WARMUP + N; i++) {
  let t0 = now()
  const r = await sb.exec(['true'])
  const dtSdk = now() - t0
  if (r.exitCode !== 0) throw new Error(`sdk exec: ${JSON.stringify(r)}`)
  t0 = now()
  const e = await raw('POST', `/v1/sandboxes/${encodeURIComponent(id)}/exec`, { cmd: ['true'] })
  const dtRaw = now() - t0
  if (e.exit_code !== 0) throw new Error(`raw exec: ${JSON.stringify(e)}`)
  if (i >= WARMUP) {
    res.ts_sdk.push(dtSdk)
    res.node_raw.push(dtRaw)
  }
}
console.log(JSON.stringify(res))
