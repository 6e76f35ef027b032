// The status bar item's text and tooltip, from the client's state and the server's statistics. No
// `vscode` import: tested from Node.

import type { Stats } from './protocol';

export type ClientState = 'starting' | 'running' | 'stopped' | 'failed';

export interface StatusInput {
  client: ClientState;
  enabled: boolean; // completion.enable or nextEdit.enable
  stats: Stats | null; // the last diffusionLsp/stats answer
  lastLatencyMs: number | null; // the last inline completion, as the editor waited for it
  error?: string | null; // why the client failed
}

export interface StatusView {
  text: string;
  tooltip: string;
  warning: boolean;
}

const LOADING = new Set(['starting', 'loading']);

export function statusView(s: StatusInput): StatusView {
  const worker = s.stats?.worker;
  const latency = s.lastLatencyMs === null ? '' : ` ${Math.round(s.lastLatencyMs)} ms`;
  const lines: string[] = [];
  let text: string;
  let warning = false;
  if (s.client === 'failed') {
    text = '$(error) diffusion';
    warning = true;
    lines.push(`The server did not start: ${s.error ?? 'see the logs'}`);
  } else if (s.client !== 'running') {
    text = s.client === 'starting' ? '$(sync~spin) diffusion' : '$(circle-slash) diffusion';
    lines.push(s.client === 'starting' ? 'Starting the server…' : 'The server is stopped');
  } else if (!s.enabled) {
    text = '$(circle-slash) diffusion';
    lines.push('Completions and next edits are off (click to turn on)');
  } else if (worker?.state && LOADING.has(worker.state)) {
    text = '$(sync~spin) diffusion: loading model';
    lines.push(`The model is loading (worker ${worker.state})`);
  } else if (worker?.state && worker.state !== 'ready' && worker.state !== 'stopped') {
    text = '$(warning) diffusion';
    warning = true;
    lines.push(`The model is not available (worker ${worker.state}): ${worker.error ?? 'no reason given'}`);
  } else {
    text = `$(sparkle) diffusion${latency}`;
    lines.push(worker?.state === 'ready' ? 'Model loaded' : 'Model loads on the first request');
  }
  if (worker?.pid) {
    lines.push(`Worker process ${worker.pid} (${worker.state})`);
  }
  const counts = s.stats?.counts;
  if (counts) {
    const p50 = s.stats?.latency_ms?.p50;
    lines.push(`Completions: ${counts.requests ?? 0} asked, ${counts.answered ?? 0} answered, `
      + `${counts.accepted ?? 0} accepted` + (p50 != null ? `, p50 ${Math.round(p50)} ms` : ''));
  }
  const ne = s.stats?.next_edit?.counts;
  if (ne) {
    lines.push(`Next edits: ${ne.requests ?? 0} asked, ${ne.answered ?? 0} suggested, ${ne.accepted ?? 0} accepted`);
  }
  if (s.lastLatencyMs !== null) {
    lines.push(`Last completion: ${Math.round(s.lastLatencyMs)} ms`);
  }
  lines.push('Click: turn completions and next edits on or off');
  return { text, tooltip: lines.join('\n'), warning };
}
