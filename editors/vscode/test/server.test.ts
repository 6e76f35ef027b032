// The extension's client layer against the real server, from Node: the settings the extension sends
// (settings.ts: those the user set) are accepted without a complaint, an inline
// completion comes back, a next edit is asked for with the extension's own parameters, parsed,
// applied and acknowledged as nextEditView.ts does, and turning completions off through
// didChangeConfiguration stops them.
//
// The server and what it answers come from tests/test_vscode_extension.py, which makes checkpoints
// whose answers are known and passes them in DIFFUSION_LSP_TEST_SPEC; without it these tests skip.

import * as assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  createProtocolConnection, type ProtocolConnection, StreamMessageReader, StreamMessageWriter,
} from 'vscode-languageserver-protocol/node';

import { applyEdit } from '../src/nextEdit';
import { DID_SHOW_INLINE_EDIT, EXECUTE_COMMAND, NEXT_EDIT, nextEditParams, parseNextEdit, STATS, type Stats } from '../src/protocol';
import { SECTION, serverKeys, userSettings } from '../src/settings';

interface Case {
  command: string[];
  options: Record<string, Record<string, unknown>>;
  text: string;
}
interface Spec {
  completion: Case & { position: [number, number]; expect: string };
  nextEdit: Case & { change: [number, number, number, number, string]; cursor: [number, number]; expectLine: string };
}

const raw = process.env.DIFFUSION_LSP_TEST_SPEC;
const spec: Spec | null = raw ? JSON.parse(raw) : null;
const SKIP = spec ? false : 'set DIFFUSION_LSP_TEST_SPEC (tests/test_vscode_extension.py does)';
const ROOT = path.join(__dirname, '..', '..');
const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
const URI = 'file:///work/sample.py';

/** The settings the extension sends when the user has set `options` (in the user settings). */
function settings(options: Record<string, Record<string, unknown>>) {
  const set = new Map(Object.entries(options).flatMap(([section, values]) =>
    Object.entries(values).map(([k, v]) => [`${SECTION}.${section}.${k}`, v])));
  const keys = serverKeys(manifest);
  assert.deepEqual([...set.keys()].filter((k) => !keys.includes(k)), [], 'only settings the manifest has');
  return userSettings(keys, (key) => set.has(key) ? { globalValue: set.get(key) } : {});
}

interface Server {
  conn: ProtocolConnection;
  proc: ChildProcess;
  messages: string[];
  close: () => Promise<void>;
}

async function start(c: Case): Promise<Server> {
  const proc = spawn(c.command[0], c.command.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
  const conn = createProtocolConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
  const messages: string[] = [];
  conn.onNotification('window/showMessage', (p: { message: string }) => { messages.push(p.message); });
  conn.onNotification('window/logMessage', (p: { message: string }) => { if (process.env.DIFFUSION_LSP_TEST_LOG) { console.error(p.message); } });
  conn.onNotification('$/progress', () => undefined);
  conn.onRequest('window/workDoneProgress/create', () => null);
  conn.listen();
  const init = await conn.sendRequest('initialize', {
    processId: process.pid, rootUri: null, workspaceFolders: null,
    capabilities: { textDocument: { inlineCompletion: { dynamicRegistration: false } }, window: { workDoneProgress: true } },
    initializationOptions: settings(c.options),
  }) as { capabilities: Record<string, unknown> };
  assert.ok(init.capabilities.inlineCompletionProvider, 'the server advertises inline completion');
  await conn.sendNotification('initialized', {});
  await conn.sendNotification('textDocument/didOpen', { textDocument: { uri: URI, languageId: 'python', version: 1, text: c.text } });
  const close = async () => {
    await conn.sendRequest('shutdown');
    await conn.sendNotification('exit');
    await new Promise((resolve) => proc.once('exit', resolve));
    conn.dispose();
  };
  return { conn, proc, messages, close };
}

async function complete(conn: ProtocolConnection, version: number, [line, character]: [number, number]) {
  return await conn.sendRequest('textDocument/inlineCompletion', {
    textDocument: { uri: URI, version }, position: { line, character }, context: { triggerKind: 2 },
  }) as { items: { insertText: string }[] } | { insertText: string }[] | null;
}

function items(result: Awaited<ReturnType<typeof complete>>): string[] {
  const list = Array.isArray(result) ? result : result?.items ?? [];
  return list.map((i) => i.insertText);
}

/** Ask until the model has loaded and answers (the first requests may come while it loads). */
async function firstCompletion(conn: ProtocolConnection, position: [number, number]): Promise<string[]> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const got = items(await complete(conn, 1, position));
    if (got.length > 0 || Date.now() > deadline) {
      return got;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe('the client layer against the real server', { skip: SKIP }, () => {
  it('accepts the extension settings, completes, and stops completing when turned off', async () => {
    const c = spec!.completion;
    const s = await start(c);
    try {
      assert.deepEqual(await firstCompletion(s.conn, c.position), [c.expect], `server messages: ${s.messages.join(' | ')}`);
      assert.deepEqual(s.messages.filter((m) => /setting/i.test(m)), [], 'the settings drew no complaint');
      const off = settings({ ...c.options, completion: { ...c.options.completion, enable: false } });
      await s.conn.sendNotification('workspace/didChangeConfiguration', { settings: { [SECTION]: off } });
      assert.deepEqual(items(await complete(s.conn, 1, c.position)), []);
      const stats = await s.conn.sendRequest(STATS, {}) as Stats;
      assert.equal(stats.worker?.state, 'ready');
    } finally {
      await s.close();
    }
  });

  it('asks for a next edit, applies it and reports it shown and accepted', async () => {
    const c = spec!.nextEdit;
    const s = await start(c);
    try {
      const [l0, c0, l1, c1, text] = c.change;
      const range = { start: { line: l0, character: c0 }, end: { line: l1, character: c1 } };
      await s.conn.sendNotification('textDocument/didChange', {
        textDocument: { uri: URI, version: 2 }, contentChanges: [{ range, text }] });
      const doc = applyEdit(c.text, { range, text });
      const [line, character] = c.cursor;
      let edit = null;
      const deadline = Date.now() + 90_000;
      while (edit === null && Date.now() < deadline) {  // the first asks may come while the model loads
        edit = parseNextEdit(await s.conn.sendRequest(NEXT_EDIT, nextEditParams(URI, 2, { line, character })), URI, 2);
        if (edit === null) {
          await new Promise((r) => setTimeout(r, 250));
        }
      }
      assert.ok(edit, `a next edit (server messages: ${s.messages.join(' | ')})`);
      assert.equal(parseNextEdit(await s.conn.sendRequest(NEXT_EDIT, nextEditParams(URI, 1, { line, character })), URI, 1),
        null, 'a stale version gets no edit');
      await s.conn.sendNotification(DID_SHOW_INLINE_EDIT, { item: { command: edit.command } });
      const after = applyEdit(doc, edit);
      const changed = after.split('\n').filter((l, i) => l !== doc.split('\n')[i]);
      assert.equal(changed.length, 1, after);
      assert.match(changed[0], new RegExp(c.expectLine));
      assert.ok(edit.command, 'the edit carries its accept command');
      await s.conn.sendRequest(EXECUTE_COMMAND, { command: edit.command.command, arguments: edit.command.arguments });
      const stats = await s.conn.sendRequest(STATS, {}) as Stats;
      assert.equal(stats.next_edit?.counts?.shown, 1);
      assert.equal(stats.next_edit?.counts?.accepted, 1);
    } finally {
      await s.close();
    }
  });
});
