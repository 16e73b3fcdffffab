// SPDX-License-Identifier: Apache-2.0
// Elements built from data: text always goes in as text (textContent), never
// as markup, so nothing a sandbox, a file name or an event says can run here.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

export function age(iso) {
  const ms = Date.now() - Date.parse(iso);
  if (!(ms >= 0)) return '';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function bytes(n) {
  if (typeof n !== 'number') return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${u[i]}`;
}

export function toast(text, kind = 'info') {
  const box = document.getElementById('toasts');
  const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
  box.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 12000 : 5000);
}

// A long action (create, snapshot, fork, restore): a progress line with the
// seconds it has taken, then a toast with the outcome. Returns fn's result.
export async function withProgress(label, fn) {
  const box = document.getElementById('toasts');
  const started = Date.now();
  const secs = h('span', { class: 'secs' }, '0 s');
  const line = h('div', { class: 'toast progress', role: 'status', 'data-progress': label },
    h('span', { class: 'spinner', 'aria-hidden': 'true' }), `${label}… `, secs);
  box.append(line);
  const timer = setInterval(() => { secs.textContent = `${Math.round((Date.now() - started) / 1000)} s`; }, 500);
  try {
    const r = await fn();
    toast(`${label}: done in ${((Date.now() - started) / 1000).toFixed(1)} s`, 'ok');
    return r;
  } catch (e) {
    toast(`${label} failed: ${e.message}`, 'error');
    throw e;
  } finally {
    clearInterval(timer);
    line.remove();
  }
}
