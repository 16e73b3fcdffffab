// SPDX-License-Identifier: Apache-2.0
// The daemon's API (docs/api.md) as the console uses it: every call carries
// the tenant token as a Bearer header; the token lives in sessionStorage
// (this tab only, gone when it closes).
const KEY = 'airlock.token';

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t);
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(extra) {
  return { Authorization: `Bearer ${token()}`, ...extra };
}

async function failure(r, signingIn = false) {
  let code = 'http_' + r.status;
  let message = `${r.status} ${r.statusText}`;
  try {
    const j = await r.json();
    if (j && j.error) {
      code = j.error.code;
      message = j.error.message;
    }
  } catch {
    // not JSON: the status says enough
  }
  if (r.status === 401 && !signingIn) window.dispatchEvent(new CustomEvent('airlock:unauthorized', { detail: message }));
  return new ApiError(r.status, code, message);
}

// A JSON call: the answer's JSON, null for 204; throws ApiError.
export async function call(method, path, body, { signal, signingIn } = {}) {
  const init = { method, headers: headers(), signal };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (!r.ok) throw await failure(r, signingIn);
  if (r.status === 204) return null;
  const text = await r.text();
  return text ? JSON.parse(text) : null;
}

// Raw bytes: a file's download (a Blob).
export async function download(path, { signal } = {}) {
  const r = await fetch(path, { headers: headers(), signal });
  if (!r.ok) throw await failure(r);
  return r.blob();
}

export async function upload(path, blob) {
  const r = await fetch(path, {
    method: 'PUT',
    headers: headers({ 'Content-Type': 'application/octet-stream' }),
    body: blob,
  });
  if (!r.ok) throw await failure(r);
  return r.json();
}

// A JSON-lines answer read as it arrives (the events stream, a process's
// output): onLine(object) for each line until the answer ends or signal
// aborts. Resolves when it ended; throws ApiError for an error answer.
export async function streamLines(path, onLine, signal) {
  const r = await fetch(path, { headers: headers(), signal });
  if (!r.ok) throw await failure(r);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        try {
          onLine(JSON.parse(line));
        } catch (e) {
          console.error('a line of', path, e);
        }
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  }
}

// Follows the events stream (GET /v1/events?follow=true) and comes back after
// a cut (from the last seq seen) until signal aborts.
export function followEvents(query, onEvent, signal, onState) {
  // From now on: the history is not replayed (a page refreshes itself once
  // when it opens); after a cut, from the last seq seen.
  let since = 'now';
  const loop = async () => {
    while (!signal.aborted) {
      const q = new URLSearchParams({ ...query, follow: 'true' });
      q.set('since', String(since));
      try {
        onState?.('live');
        await streamLines(`/v1/events?${q}`, (ev) => {
          if (typeof ev.seq === 'number') since = ev.seq;
          onEvent(ev);
        }, signal);
      } catch (e) {
        if (signal.aborted) return;
        onState?.('cut: ' + e.message);
      }
      if (signal.aborted) return;
      onState?.('reconnecting');
      await new Promise((res) => setTimeout(res, 2000));
    }
  };
  loop();
}

export const enc = encodeURIComponent;
