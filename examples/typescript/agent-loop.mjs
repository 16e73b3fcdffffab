#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// A small agent loop with Airlock's TypeScript SDK: an "agent" writes code
// into a sandbox, runs it, reads the result, and fixes its code until the
// result is right. The "model" here is a list of attempts, so the loop runs
// without a network; put an LLM call in nextAttempt() for a real agent.
//
//   AIRLOCK_HOST=tcp://127.0.0.1:7070 AIRLOCK_TOKEN=alk_… node agent-loop.mjs
//   (or, on the daemon's host, with no variables: the unix socket)
//
// Run by tests/integration/test_sdk_typescript.py. Outside this repository,
// import from "@airlock/sdk" instead of the relative path.
import { withSandbox } from "../../sdk/typescript/src/index.js";

const TASK = "print the sum of the squares of 1..10";
const EXPECTED = "385";

// What a model would answer, one attempt after another (the first is wrong).
const ATTEMPTS = [
  "i=1; s=0; while [ $i -lt 10 ]; do s=$((s + i * i)); i=$((i + 1)); done; echo $s",
  "i=1; s=0; while [ $i -le 10 ]; do s=$((s + i * i)); i=$((i + 1)); done; echo $s",
];

function nextAttempt(history) {
  return ATTEMPTS[history.length] ?? null;
}

await withSandbox({ template: process.env.AIRLOCK_EXAMPLE_TEMPLATE || "minimal", vcpus: 1, memoryMib: 256, timeout: 600 }, async (sb) => {
  console.log(`sandbox ${sb.id}: ${TASK}`);
  await sb.files.mkdir("/work");
  const history = [];
  for (;;) {
    const code = nextAttempt(history);
    if (code === null) throw new Error(`no attempt got ${EXPECTED}: ${JSON.stringify(history)}`);
    await sb.files.writeText("/work/solution.sh", `${code}\n`, { mode: 0o755 });
    const r = await sb.exec(["sh", "/work/solution.sh"], { cwd: "/work", timeout: 30 });
    const answer = r.stdout.trim();
    history.push({ code, exitCode: r.exitCode, stdout: answer, stderr: r.stderr.trim() });
    console.log(`attempt ${history.length}: exit ${r.exitCode}, output ${JSON.stringify(answer)}`);
    if (r.exitCode === 0 && answer === EXPECTED) break;
  }
  const saved = await sb.files.readText("/work/solution.sh");
  console.log(`solution after ${history.length} attempts:\n${saved.trim()}`);
});
console.log("agent loop: done");
