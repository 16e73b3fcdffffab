// SPDX-License-Identifier: Apache-2.0
// A sandbox's page: its state and actions, a terminal, its network policy
// and live egress decisions, exposed ports, processes and files.
import { ApiError, call, download, enc, followEvents, upload } from './api.js';
import { lifecycleButtons, stateBadge } from './actions.js';
import { age, bytes, clear, h, toast } from './dom.js';
import { openTerminal } from './terminal.js';

const EGRESS_ROWS_MAX = 200;

function section(id, title, ...body) {
  return h('section', { class: 'card', id }, h('h2', {}, title), ...body);
}

function lines(text) {
  return String(text || '').split(/[\s,]+/).filter(Boolean);
}

export async function sandboxPage(root, id, signal) {
  const head = h('div', { id: 'sandbox-head', class: 'card' }, h('p', {}, 'Loading…'));
  const termBox = h('div', { id: 'terminal', class: 'terminal', hidden: true });
  const termStatus = h('span', { class: 'muted', id: 'terminal-status' });
  const termButton = h('button', { type: 'button', id: 'open-terminal' }, 'Open terminal');
  const allow = h('textarea', { id: 'policy-allow', rows: 4, spellcheck: 'false', placeholder: 'one rule a line: example.com, *.github.com, 203.0.113.0/24:5432' });
  const deny = h('textarea', { id: 'policy-deny', rows: 3, spellcheck: 'false' });
  const egress = h('tbody', { id: 'egress' });
  const egressLive = h('span', { class: 'live' }, 'connecting');
  const ports = h('div', { id: 'ports' }, h('p', { class: 'muted' }, 'Loading…'));
  const exposePort = h('input', { id: 'expose-port', type: 'number', min: 1, max: 65535, required: true, placeholder: '8000' });
  const exposePublic = h('input', { id: 'expose-public', type: 'checkbox' });
  const exposeForm = h('form', { class: 'row', id: 'expose', hidden: true, onsubmit: async (e) => {
    e.preventDefault();
    try {
      await call('PUT', `/v1/sandboxes/${id}/ports/${Number(exposePort.value)}`, { public: exposePublic.checked });
      exposePort.value = '';
    } catch (ex) {
      toast(`Expose: ${ex.message}`, 'error');
    }
    loadPorts();
  } }, h('label', {}, 'Port', exposePort), h('label', {}, 'Public', exposePublic), h('button', { type: 'submit' }, 'Expose'));
  const procs = h('tbody', { id: 'processes' });
  const filePath = h('input', { id: 'file-path', value: '/', spellcheck: 'false', size: 40 });
  const files = h('tbody', { id: 'files' });
  const uploadInput = h('input', { type: 'file', id: 'file-upload', multiple: true });
  let sb = null;

  async function loadHead() {
    try {
      sb = await call('GET', `/v1/sandboxes/${id}`, undefined, { signal });
    } catch (e) {
      if (!signal.aborted) clear(head, h('p', { class: 'error' }, e.message), h('a', { href: '#/' }, 'Back to the list'));
      return;
    }
    let metrics = null;
    if (sb.state === 'running') metrics = await call('GET', `/v1/sandboxes/${id}/metrics`, undefined, { signal }).catch(() => null);
    const memUsed = metrics && metrics.mem_total_kib ? (metrics.mem_total_kib - metrics.mem_available_kib) * 1024 : null;
    clear(head,
      h('div', { class: 'row spread' },
        h('h1', {}, h('a', { href: '#/' }, 'Sandboxes'), ' / ', h('code', {}, sb.id), ' ', stateBadge(sb.state)),
        h('div', { class: 'actions' }, lifecycleButtons(sb, () => {
          if (location.hash === `#/sandbox/${id}`) loadHead();
        }))),
      h('dl', { class: 'facts' },
        h('dt', {}, 'Template'), h('dd', {}, sb.template),
        h('dt', {}, 'Size'), h('dd', {}, `${sb.vcpus} vCPU · ${sb.memory_mib} MiB${sb.disk_mib ? ` · ${sb.disk_mib} MiB disk` : ''}`),
        h('dt', {}, 'Age'), h('dd', { title: sb.created_at }, age(sb.created_at)),
        h('dt', {}, 'Boot'), h('dd', {}, sb.boot_ms ? `${sb.boot ?? ''} in ${sb.boot_ms} ms` : ''),
        metrics && [h('dt', {}, 'Memory used'), h('dd', {}, `${bytes(memUsed)} of ${bytes(metrics.mem_total_kib * 1024)}`),
          h('dt', {}, 'CPU time'), h('dd', {}, `${(metrics.cpu_usage_usec / 1e6).toFixed(1)} s`)],
        sb.error && [h('dt', {}, 'Error'), h('dd', { class: 'error' }, sb.error)]));
    if (sb.state === 'deleted') termButton.disabled = true;
  }

  async function loadPolicy() {
    try {
      const n = await call('GET', `/v1/sandboxes/${id}/network`, undefined, { signal });
      allow.value = (n.policy.allow || []).join('\n');
      deny.value = (n.policy.deny || []).join('\n');
    } catch (e) {
      if (!signal.aborted) allow.placeholder = `(${e.message})`;
    }
  }

  async function savePolicy(e) {
    e.preventDefault();
    try {
      await call('PUT', `/v1/sandboxes/${id}/network`, { allow: lines(allow.value), deny: lines(deny.value) });
      toast('Network policy saved: connections from now on use it', 'ok');
    } catch (ex) {
      toast(`Network policy refused: ${ex.message}`, 'error');
    }
  }

  function egressRow(ev) {
    const d = ev.data || {};
    const kind = ev.type.slice('network.'.length);
    if (!['allow', 'deny', 'close', 'dns'].includes(kind)) return;
    const verdict = kind === 'close' ? 'closed' : kind === 'dns' ? `dns ${d.verdict || ''}` : kind;
    const moved = kind === 'close' ? `↑ ${bytes(d.bytes_up)} ↓ ${bytes(d.bytes_down)}` : '';
    const row = h('tr', { class: `egress-${kind}`, 'data-verdict': kind, 'data-host': d.host || '' },
      h('td', { title: ev.time }, new Date(ev.time).toLocaleTimeString()),
      h('td', {}, h('span', { class: `verdict verdict-${kind}` }, verdict)),
      h('td', {}, h('code', {}, `${d.host || d.dst || ''}${d.port ? ':' + d.port : ''}`)),
      h('td', {}, d.proto || d.qtype || ''),
      h('td', {}, moved),
      h('td', { class: 'muted' }, [d.rule && `rule ${d.rule}`, d.reason, d.count > 1 && `×${d.count}`].filter(Boolean).join(' · ')));
    if (egress.firstChild?.dataset.empty) egress.replaceChildren();
    egress.prepend(row);
    while (egress.children.length > EGRESS_ROWS_MAX) egress.lastChild.remove();
  }

  async function loadPorts() {
    try {
      const p = await call('GET', `/v1/sandboxes/${id}/ports`, undefined, { signal });
      const list = p.ports || [];
      exposeForm.hidden = false;
      const unexpose = (port) => h('button', { type: 'button', onclick: async () => {
        try { await call('DELETE', `/v1/sandboxes/${id}/ports/${port}`); } catch (e) { toast(e.message, 'error'); }
        loadPorts();
      } }, 'Unexpose');
      // A private port's link carries the traffic token once: the proxy turns
      // it into a cookie of that origin and sends the browser on without it.
      const withToken = (url, x) => (x.public || !p.traffic_token ? url
        : `${url}${url.includes('?') ? '&' : '?'}airlock_token=${encodeURIComponent(p.traffic_token)}`);
      clear(ports, list.length === 0 ? h('p', { class: 'muted' }, 'No port exposed: expose one a server in the guest listens on.')
        : h('table', {}, h('thead', {}, h('tr', {}, ['Port', 'Link', 'By path', 'Public', 'Requests', ''].map((t) => h('th', {}, t)))),
          h('tbody', {}, list.map((x) => h('tr', { 'data-port': x.port },
            h('td', {}, String(x.port)),
            h('td', {}, x.url ? h('a', { href: withToken(x.url, x), target: '_blank', rel: 'noopener noreferrer' }, x.url) : h('span', { class: 'muted', title: 'this daemon runs no ports proxy' }, '—')),
            h('td', {}, x.path_url ? h('a', { href: withToken(x.path_url, x), target: '_blank', rel: 'noopener noreferrer' }, x.path_url) : h('span', { class: 'muted' }, '—')),
            h('td', {}, x.public ? 'yes' : 'no: the traffic token'),
            h('td', {}, String(x.requests ?? '')),
            h('td', { class: 'actions' }, unexpose(x.port)))))),
        p.traffic_token && h('details', {}, h('summary', {}, 'Traffic token of the private ports'),
          h('p', { class: 'muted' }, 'A request through the proxy to a private port carries it (see docs/api.md, "Ports"):'),
          h('code', { id: 'traffic-token' }, p.traffic_token)));
    } catch (e) {
      if (signal.aborted) return;
      clear(ports, h('p', { class: 'muted' }, e instanceof ApiError && e.status === 404 && /no such endpoint/.test(e.message)
        ? 'This daemon does not serve exposed ports yet.' : e.message));
    }
  }

  async function loadProcs() {
    try {
      const { processes } = await call('GET', `/v1/sandboxes/${id}/processes`, undefined, { signal });
      clear(procs, processes.length === 0 ? h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'None.'))
        : processes.slice().reverse().map((p) => h('tr', { 'data-pid': p.id },
          h('td', {}, h('code', {}, p.id)),
          h('td', {}, h('code', {}, (p.cmd || []).join(' ')), p.pty ? h('span', { class: 'tag' }, 'pty') : '', p.tag ? h('span', { class: 'tag' }, p.tag) : ''),
          h('td', {}, p.state === 'running' ? 'running' : `exited ${p.exit_code ?? (p.signal ? 'by ' + p.signal : '')}`),
          h('td', { title: p.started_at }, age(p.started_at)),
          h('td', { class: 'actions' }, p.state === 'running' && h('button', { type: 'button', onclick: async () => {
            try { await call('POST', `/v1/sandboxes/${id}/processes/${p.id}/signal`, { signal: 'TERM' }); } catch (e) { toast(e.message, 'error'); }
            loadProcs();
          } }, 'Stop')))));
    } catch (e) {
      if (!signal.aborted) clear(procs, h('tr', {}, h('td', { colspan: 5, class: 'muted' }, e.message)));
    }
  }

  const joinPath = (dir, name) => (dir.endsWith('/') ? dir : dir + '/') + name;
  async function loadFiles(path) {
    filePath.value = path;
    try {
      const { entries } = await call('GET', `/v1/sandboxes/${id}/files/list?path=${enc(path)}`, undefined, { signal });
      entries.sort((a, b) => (a.type === 'dir') === (b.type === 'dir') ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1);
      const parent = path === '/' ? null : path.replace(/\/+[^/]*\/?$/, '') || '/';
      clear(files,
        parent && h('tr', {}, h('td', { colspan: 4 }, h('a', { href: '#', onclick: (e) => { e.preventDefault(); loadFiles(parent); } }, '..'))),
        entries.map((f) => {
          const full = joinPath(path, f.name);
          return h('tr', { 'data-name': f.name },
            h('td', {}, f.type === 'dir'
              ? h('a', { href: '#', onclick: (e) => { e.preventDefault(); loadFiles(full); } }, f.name + '/')
              : f.name, f.target ? ` → ${f.target}` : ''),
            h('td', {}, f.type),
            h('td', {}, f.type === 'file' ? bytes(f.size) : ''),
            h('td', { class: 'actions' }, f.type === 'file' && h('button', { type: 'button', onclick: () => save(full, f.name) }, 'Download')));
        }));
    } catch (e) {
      if (!signal.aborted) clear(files, h('tr', {}, h('td', { colspan: 4, class: 'error' }, e.message)));
    }
  }

  async function save(path, name) {
    try {
      const blob = await download(`/v1/sandboxes/${id}/files?path=${enc(path)}`);
      const a = h('a', { href: URL.createObjectURL(blob), download: name });
      document.body.append(a);
      a.click();
      setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
    } catch (e) {
      toast(`Download of ${path}: ${e.message}`, 'error');
    }
  }

  uploadInput.addEventListener('change', async () => {
    const dir = filePath.value;
    for (const f of uploadInput.files) {
      try {
        await upload(`/v1/sandboxes/${id}/files?path=${enc(joinPath(dir, f.name))}`, f);
        toast(`Uploaded ${f.name} (${bytes(f.size)}) to ${dir}`, 'ok');
      } catch (e) {
        toast(`Upload of ${f.name}: ${e.message}`, 'error');
      }
    }
    uploadInput.value = '';
    loadFiles(dir);
  });

  termButton.addEventListener('click', async () => {
    termButton.disabled = true;
    termBox.hidden = false;
    try {
      await openTerminal(termBox, id, signal, (s) => { termStatus.textContent = s; });
      loadProcs();
    } catch (e) {
      termStatus.textContent = `cannot open a terminal: ${e.message}`;
      termButton.disabled = false;
      termBox.hidden = true;
    }
  });

  clear(root,
    head,
    section('terminal-card', 'Terminal', h('div', { class: 'row' }, termButton, termStatus), termBox),
    h('div', { class: 'grid' },
      section('network', 'Network policy',
        h('form', { onsubmit: savePolicy },
          h('label', {}, 'Allow', allow), h('label', {}, 'Deny', deny),
          h('button', { type: 'submit', id: 'policy-save' }, 'Save policy'),
          h('p', { class: 'muted' }, 'Deny wins; an empty allow lets nothing out (docs/api.md, "Network").'))),
      section('ports-card', 'Exposed ports', ports, exposeForm)),
    section('egress-card', h('span', {}, 'Egress, live ', egressLive),
      h('table', {}, h('thead', {}, h('tr', {}, ['Time', 'Verdict', 'Destination', 'Proto', 'Bytes', 'Why'].map((t) => h('th', {}, t)))),
        egress)),
    h('div', { class: 'grid' },
      section('processes-card', 'Processes', h('button', { type: 'button', onclick: loadProcs }, 'Refresh'),
        h('table', {}, h('thead', {}, h('tr', {}, ['Id', 'Command', 'State', 'Age', ''].map((t) => h('th', {}, t)))), procs)),
      section('files-card', 'Files',
        h('form', { class: 'row', onsubmit: (e) => { e.preventDefault(); loadFiles(filePath.value || '/'); } },
          filePath, h('button', { type: 'submit' }, 'Open'), h('label', { class: 'button' }, 'Upload here', uploadInput)),
        h('table', {}, h('thead', {}, h('tr', {}, ['Name', 'Type', 'Size', ''].map((t) => h('th', {}, t)))), files))));
  clear(egress, h('tr', { dataset: { empty: '1' } }, h('td', { colspan: 6, class: 'muted' }, 'No egress yet: decisions of the gateway appear here as they happen.')));

  await loadHead();
  loadPolicy();
  loadPorts();
  loadProcs();
  if (sb && sb.state === 'running') loadFiles('/');
  else clear(files, h('tr', {}, h('td', { colspan: 4, class: 'muted' }, 'Files are browsable while the sandbox runs.')));
  let procTimer = null;
  followEvents({ sandbox: id }, (ev) => {
    if (ev.type.startsWith('network.')) egressRow(ev);
    else if (ev.type === 'sandbox.state') loadHead();
    else if (ev.type.startsWith('exec.')) {
      clearTimeout(procTimer);
      procTimer = setTimeout(loadProcs, 300);
    }
  }, signal, (s) => { egressLive.textContent = s; });
  const tick = setInterval(() => { if (sb?.state === 'running') loadHead(); loadPorts(); }, 10000);
  signal.addEventListener('abort', () => { clearInterval(tick); clearTimeout(procTimer); });
}
