// SPDX-License-Identifier: Apache-2.0
// A terminal into a sandbox: a PTY process (POST /v1/sandboxes/{id}/processes
// with "pty") attached through a WebSocket (GET …/processes/{pid}/attach,
// subprotocols airlock.pty.v1 and airlock.bearer.<token>: a browser cannot
// set Authorization on a WebSocket). Binary frames are the PTY's bytes both
// ways; text frames are JSON control: {"type":"resize"} from here,
// {"type":"exit"} from the daemon before it closes (docs/console.md).
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { call, token } from './api.js';

const SHELL = ['/bin/sh', '-c', 'if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi'];

export async function openTerminal(box, sandboxId, signal, onStatus) {
  const term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace' });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  onStatus('starting a shell');
  const proc = await call('POST', `/v1/sandboxes/${sandboxId}/processes`, {
    cmd: SHELL, pty: { rows: term.rows, cols: term.cols }, env: { TERM: 'xterm-256color' }, tag: 'console',
  });
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const url = `${scheme}://${location.host}/v1/sandboxes/${sandboxId}/processes/${proc.id}/attach`;
  const ws = new WebSocket(url, ['airlock.pty.v1', `airlock.bearer.${token()}`]);
  ws.binaryType = 'arraybuffer';
  const encoder = new TextEncoder();
  let exited = false;
  let opened = false;
  const hangUp = () => call('POST', `/v1/sandboxes/${sandboxId}/processes/${proc.id}/signal`, { signal: 'HUP' }).catch(() => {});
  const send = (data) => { if (ws.readyState === WebSocket.OPEN) ws.send(data); };
  const resize = () => send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
  ws.onopen = () => {
    opened = true;
    onStatus(`attached to ${proc.id}`);
    resize();
    term.focus();
  };
  ws.onmessage = (m) => {
    if (typeof m.data === 'string') {
      let msg = {};
      try { msg = JSON.parse(m.data); } catch { /* ignored: not ours */ }
      if (msg.type === 'exit') {
        exited = true;
        term.write(`\r\n[the shell exited${msg.exit_code !== undefined && msg.exit_code !== null ? ` with ${msg.exit_code}` : ''}]\r\n`);
        onStatus('exited');
      }
      return;
    }
    term.write(new Uint8Array(m.data));
  };
  ws.onerror = () => onStatus('the terminal\'s connection failed (does this daemon serve the PTY WebSocket?)');
  ws.onclose = (e) => {
    if (exited) return;
    onStatus(`disconnected (${e.code}${e.reason ? ': ' + e.reason : ''})`);
    if (!opened) hangUp(); // never attached: the shell would wait for nobody
  };
  term.onData((d) => send(encoder.encode(d)));
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
  term.onResize(resize);
  const ro = new ResizeObserver(() => { try { fit.fit(); } catch { /* hidden */ } });
  ro.observe(box);
  const close = () => {
    ro.disconnect();
    ws.close();
    if (!exited) hangUp();
    term.dispose();
  };
  signal.addEventListener('abort', close);
  return { term, close, process: proc };
}
