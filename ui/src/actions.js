// SPDX-License-Identifier: Apache-2.0
// The lifecycle buttons of a sandbox (list and sandbox page alike).
import { call } from './api.js';
import { h, toast, withProgress } from './dom.js';

export function stateBadge(state) {
  return h('span', { class: `state state-${state}` }, state);
}

// Buttons of the lifecycle actions a sandbox in its state allows.
export function lifecycleButtons(sb, after) {
  const act = (label, fn, opts = {}) => h('button', {
    type: 'button', class: opts.danger ? 'danger' : '', 'data-action': label.toLowerCase(),
    onclick: async (e) => {
      e.stopPropagation();
      if (opts.confirm && !confirm(opts.confirm)) return;
      try {
        await fn();
        after?.();
      } catch (ex) {
        if (!opts.long) toast(`${label} ${sb.id}: ${ex.message}`, 'error');
      }
    },
  }, label);
  const live = sb.state === 'running' || sb.state === 'paused';
  return [
    sb.state === 'running' && act('Pause', () => call('POST', `/v1/sandboxes/${sb.id}/pause`)),
    sb.state === 'paused' && act('Resume', () => call('POST', `/v1/sandboxes/${sb.id}/resume`)),
    live && act('Snapshot', () => withProgress(`Snapshot of ${sb.id}`,
      () => call('POST', `/v1/sandboxes/${sb.id}/snapshots`, {})), { long: true }),
    live && act('Fork', () => withProgress(`Fork of ${sb.id}`,
      () => call('POST', `/v1/sandboxes/${sb.id}/fork`, { count: 1 })), { long: true }),
    sb.state !== 'deleted' && act('Delete', () => call('DELETE', `/v1/sandboxes/${sb.id}`),
      { danger: true, confirm: `Delete ${sb.id}? Its VM and disk are gone for good.` }),
  ];
}
