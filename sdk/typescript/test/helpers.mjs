// SPDX-License-Identifier: Apache-2.0
// What the integration tests share: run by tests/integration/test_sdk_typescript.py
// with AIRLOCK_HOST + AIRLOCK_TOKEN (a tenant's token on the daemon's TCP
// listener) and AIRLOCK_SOCKET (its unix socket, the operator's).
import assert from "node:assert/strict";
import fs from "node:fs";
import { Airlock } from "../src/index.js";
import { Connection } from "../src/http.js";

// Every route the tests send, appended to $AIRLOCK_SDK_ROUTE_LOG at exit: the
// pytest wrapper checks that each route of the SDK's table was called for real.
const called = new Set();
const resolve = Connection.prototype.resolve;
Connection.prototype.resolve = function (route, ...rest) {
  called.add(route);
  return resolve.call(this, route, ...rest);
};
process.on("exit", () => {
  if (process.env.AIRLOCK_SDK_ROUTE_LOG && called.size) fs.appendFileSync(process.env.AIRLOCK_SDK_ROUTE_LOG, [...called].map((r) => `${r}\n`).join(""));
});

export const TEMPLATE = process.env.AIRLOCK_SDK_TEMPLATE || "minimal";
export const SMALL = { template: TEMPLATE, vcpus: 1, memoryMib: 256 };

export function requireDaemon() {
  assert.ok(process.env.AIRLOCK_HOST && process.env.AIRLOCK_TOKEN && process.env.AIRLOCK_SOCKET,
    "run through tests/integration/test_sdk_typescript.py (it sets AIRLOCK_HOST, AIRLOCK_TOKEN and AIRLOCK_SOCKET)");
}

/** The operator's client: the unix socket, no token. */
export function admin() {
  return new Airlock({ socketPath: process.env.AIRLOCK_SOCKET, token: null, host: null });
}

export async function collectText(it) {
  let s = "";
  for await (const ev of it) if (ev.type === "stdout" || ev.type === "stderr") s += ev.data.toString("utf8");
  return s;
}
