// SPDX-License-Identifier: Apache-2.0
// Airlock's web console (docs/console.md): sign-in, the tenant's sandboxes
// (live from the events stream), a sandbox's page. Routes are URL hashes:
// #/ the list, #/sandbox/ID a sandbox.
import './style.css';
import '@xterm/xterm/css/xterm.css';
import { ApiError, call, followEvents, setToken, token } from './api.js';
import { age, clear, h, toast, withProgress } from './dom.js';
import { sandboxPage } from './sandbox.js';
import { lifecycleButtons, stateBadge } from './actions.js';

const app = () => document.getElementById('app');
let pageAbort = null; // aborts the page's streams and timers when it is left

function newPage() {
  pageAbort?.abort();
  pageAbort = new AbortController();
  return pageAbort.signal;
}

function signInPage(message) {
  newPage();
  document.getElementById('signout').hidden = true;
  document.getElementById('who').textContent = '';
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true,
    placeholder: 'alk_…', size: 52, 'aria-label': 'API token' });
  const err = h('p', { class: 'error', id: 'signin-error' }, message || '');
  const form = h('form', { id: 'signin', class: 'card narrow' },
    h('h1', {}, 'Sign in'),
    h('p', {}, 'A tenant token of this daemon (', h('code', {}, 'airlock token create --tenant NAME'),
      '). It is kept in this tab only, and sent with every API call.'),
    h('label', {}, 'Token ', input),
    h('button', { type: 'submit' }, 'Sign in'),
    err);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    try {
      await call('GET', '/v1/sandboxes', undefined, { signingIn: true });
      location.hash = '#/';
      route();
    } catch (ex) {
      setToken(null);
      err.textContent = ex instanceof ApiError && ex.status === 401 ? `Refused: ${ex.message}` : ex.message;
    }
  });
  clear(app(), form);
  input.focus();
}

function createForm(refresh) {
  const f = (name, attrs) => h('input', { name, ...attrs });
  const form = h('form', { id: 'create', class: 'card' },
    h('h2', {}, 'New sandbox'),
    h('div', { class: 'row' },
      h('label', {}, 'Template ', f('template', { value: 'minimal', required: true, pattern: '[a-z0-9][a-z0-9_\\-]{0,62}' })),
      h('label', {}, 'vCPUs ', f('vcpus', { type: 'number', min: 1, max: 16, value: 1 })),
      h('label', {}, 'Memory MiB ', f('memory_mib', { type: 'number', min: 128, max: 16384, step: 64, value: 256 })),
      h('label', { class: 'wide' }, 'Egress allow ', f('allow', { placeholder: 'example.com, *.github.com (empty: nothing)' })),
      h('button', { type: 'submit' }, 'Create')));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const d = new FormData(form);
    const allow = String(d.get('allow') || '').split(/[\s,]+/).filter(Boolean);
    const body = { template: d.get('template'), vcpus: Number(d.get('vcpus')), memory_mib: Number(d.get('memory_mib')),
      network: { allow, deny: [] } };
    try {
      await withProgress(`Create (${body.template}, ${body.vcpus} vCPU, ${body.memory_mib} MiB)`, async () => {
        setTimeout(refresh, 300); // it is listed as creating while it boots
        return call('POST', '/v1/sandboxes', body);
      });
    } catch {
      // the progress line said why
    }
    refresh();
  });
  return form;
}

function snapshotsCard(snaps, refresh) {
  return h('section', { class: 'card', id: 'snapshots' },
    h('h2', {}, `Snapshots (${snaps.length})`),
    snaps.length === 0 ? h('p', { class: 'muted' }, 'None yet: "Snapshot" on a running or paused sandbox makes one.')
      : h('table', {},
        h('thead', {}, h('tr', {}, ['Snapshot', 'Of', 'Template', 'Size', 'Age', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, snaps.map((s) => h('tr', {},
          h('td', {}, h('code', {}, s.id), s.name && s.name !== s.sandbox_id ? ` ${s.name}` : ''),
          h('td', {}, h('a', { href: `#/sandbox/${s.sandbox_id}` }, s.sandbox_id)),
          h('td', {}, `${s.template} · ${s.vcpus} vCPU · ${s.memory_mib} MiB`),
          h('td', {}, s.size_bytes ? `${Math.round(s.size_bytes / 1048576)} MiB` : ''),
          h('td', {}, age(s.created_at)),
          h('td', { class: 'actions' },
            h('button', { type: 'button', onclick: async () => {
              try {
                await withProgress(`Restore of ${s.id}`, () => call('POST', '/v1/sandboxes', { snapshot: s.id }));
              } catch { /* said */ }
              refresh();
            } }, 'Restore'),
            h('button', { type: 'button', class: 'danger', onclick: async () => {
              if (!confirm(`Delete snapshot ${s.id}?`)) return;
              try { await call('DELETE', `/v1/snapshots/${s.id}`); } catch (e) { toast(e.message, 'error'); }
              refresh();
            } }, 'Delete')))))));
}

async function listPage() {
  const signal = newPage();
  const table = h('tbody', { id: 'sandboxes' });
  const live = h('span', { class: 'live', id: 'live' }, 'connecting');
  const snapBox = h('div');
  let timer = null;
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(load, 150);
  };
  async function load() {
    if (signal.aborted) return;
    try {
      const [{ sandboxes }, { snapshots }] = await Promise.all([call('GET', '/v1/sandboxes', undefined, { signal }),
        call('GET', '/v1/snapshots', undefined, { signal })]);
      clear(table, sandboxes.length === 0
        ? h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No sandboxes. Create one above.'))
        : sandboxes.map((sb) => h('tr', { 'data-id': sb.id, 'data-state': sb.state },
          h('td', {}, h('a', { href: `#/sandbox/${sb.id}` }, sb.id)),
          h('td', {}, stateBadge(sb.state)),
          h('td', {}, sb.template),
          h('td', { title: sb.created_at }, age(sb.created_at)),
          h('td', {}, `${sb.vcpus} vCPU`),
          h('td', {}, `${sb.memory_mib} MiB`),
          h('td', { class: 'actions' }, lifecycleButtons(sb, refresh)))));
      clear(snapBox, snapshotsCard(snapshots, refresh));
    } catch (e) {
      if (!signal.aborted) toast(`Listing: ${e.message}`, 'error');
    }
  }
  clear(app(),
    createForm(refresh),
    h('section', { class: 'card' },
      h('h2', {}, 'Sandboxes ', live),
      h('table', {},
        h('thead', {}, h('tr', {}, ['Sandbox', 'State', 'Template', 'Age', 'CPU', 'Memory', ''].map((t) => h('th', {}, t)))),
        table)),
    snapBox);
  await load();
  followEvents({ type: 'sandbox.' }, () => refresh(), signal, (s) => { live.textContent = s; });
  const tick = setInterval(refresh, 30000); // ages move on
  signal.addEventListener('abort', () => { clearInterval(tick); clearTimeout(timer); });
}

async function route() {
  if (!token()) return signInPage();
  const tenantEl = document.getElementById('who');
  const out = document.getElementById('signout');
  out.hidden = false;
  tenantEl.textContent = 'signed in';
  const m = location.hash.match(/^#\/sandbox\/([A-Za-z0-9_-]{1,64})$/);
  if (m) return sandboxPage(app(), m[1], newPage());
  return listPage();
}

window.addEventListener('airlock:unauthorized', (e) => {
  setToken(null);
  signInPage(`Signed out: ${e.detail}`);
});
window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', () => {
  document.getElementById('signout').addEventListener('click', () => {
    setToken(null);
    location.hash = '#/';
    signInPage('Signed out.');
  });
  route();
});
