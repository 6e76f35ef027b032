// The extension's own logic, with Node's test runner: settings, next-edit preview and accept,
// status bar text, and the manifest (every contributed command is registered, every server setting
// is in the manifest).

import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import { acceptAction, applyEdit, endOf, preview, textIn, wordChanges } from '../src/nextEdit';
import { instructParams, noNextEditMessage, parseNextEdit, parseProposal, type NextEdit } from '../src/protocol';
import { instructionProblem, linesLabel, proposalTitle, withReplacement } from '../src/proposal';
import {
  adaptCommand, clientSettings, findExecutable, minutesProblem, missingServerMessage, serverKeys, userSettings,
} from '../src/settings';
import { statusView } from '../src/status';

const ROOT = path.join(__dirname, '..', '..');
const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));

function edit(l0: number, c0: number, l1: number, c1: number, text: string): NextEdit {
  return { uri: 'file:///a.py', version: 3, range: { start: { line: l0, character: c0 }, end: { line: l1, character: c1 } }, text };
}

describe('adapt', () => {
  it('runs the server command as adapt on the folder, keeping the model it serves', () => {
    assert.deepEqual(adaptCommand(['diffusion-lsp', 'serve'], '/ws'), ['diffusion-lsp', 'adapt', '/ws']);
    assert.deepEqual(adaptCommand(['/venv/bin/python', '-m', 'diffusion_lsp', 'serve', '--precision', 'fp32', '--model', '/m'],
      '/ws'), ['/venv/bin/python', '-m', 'diffusion_lsp', 'adapt', '/ws', '--model', '/m']);
    assert.deepEqual(adaptCommand(['/opt/dlsp'], '/ws'), ['/opt/dlsp', 'adapt', '/ws']);
    assert.deepEqual(adaptCommand(['diffusion-lsp', 'serve', '--model'], '/ws'), ['diffusion-lsp', 'adapt', '/ws']);
    assert.deepEqual(adaptCommand(['diffusion-lsp', 'serve'], '/ws', 2.5), ['diffusion-lsp', 'adapt', '/ws', '--minutes', '2.5']);
  });

  it('takes a positive number of minutes', () => {
    assert.equal(minutesProblem('10'), null);
    assert.equal(minutesProblem('0.5'), null);
    for (const bad of ['', '0', '-3', 'ten', 'Infinity', '100000']) {
      assert.match(minutesProblem(bad) ?? '', /minutes above 0/, bad);
    }
  });
});

describe('settings', () => {
  const all = {
    server: { command: ['/venv/bin/diffusion-lsp', 'serve'], env: { KEY: 'x', BAD: 3 } },
    client: { languages: ['python'], nextEditOnChange: false, nextEditDelayMs: 50 },
    trace: { server: 'off' },
    completion: { enable: true, debounceMs: 10 },
    nextEdit: { mode: 'full' },
  };

  it('sends the server only the settings the user set, the most specific scope winning', () => {
    const keys = serverKeys(manifest);
    assert.ok(keys.includes('diffusionLsp.completion.enable') && keys.includes('diffusionLsp.nextEdit.mode'));
    assert.ok(!keys.some((k) => /^diffusionLsp\.(server|client|trace)\./.test(k)), 'no extension setting');
    const scopes: Record<string, Record<string, unknown>> = {
      'diffusionLsp.completion.enable': { globalValue: true, workspaceValue: false },
      'diffusionLsp.model.path': { globalValue: null },
      'diffusionLsp.nextEdit.mode': { globalValue: 'full', workspaceValue: 'refine', workspaceFolderValue: 'full' },
      'diffusionLsp.server.command': { globalValue: ['x'] },
    };
    assert.deepEqual(userSettings(keys, (k) => scopes[k]),
      { model: { path: null }, completion: { enable: false }, nextEdit: { mode: 'full' } });
    assert.deepEqual(userSettings(keys, () => undefined), {});
  });

  it('reads the extension settings and defaults bad values', () => {
    assert.deepEqual(clientSettings(all), { command: ['/venv/bin/diffusion-lsp', 'serve'], env: { KEY: 'x' },
      languages: ['python'], nextEditOnChange: false, nextEditDelayMs: 50 });
    const bad = clientSettings({ server: { command: [] }, client: { nextEditDelayMs: -1, nextEditOnChange: 'yes' } });
    assert.deepEqual(bad.command, ['diffusion-lsp', 'serve']);
    assert.equal(bad.nextEditDelayMs, 300);
    assert.equal(bad.nextEditOnChange, true);
  });

  it('defaults as the manifest does', () => {
    const props = manifest.contributes.configuration.properties;
    const fromManifest = clientSettings({
      server: { command: props['diffusionLsp.server.command'].default, env: props['diffusionLsp.server.env'].default },
      client: { languages: props['diffusionLsp.client.languages'].default,
        nextEditOnChange: props['diffusionLsp.client.nextEditOnChange'].default,
        nextEditDelayMs: props['diffusionLsp.client.nextEditDelayMs'].default } });
    assert.deepEqual(clientSettings(undefined), fromManifest);
  });

  it('finds an executable on PATH or by path, and not a missing one', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlsp-'));
    const exe = path.join(dir, 'fake-server');
    fs.writeFileSync(exe, '#!/bin/sh\n', { mode: 0o755 });
    fs.writeFileSync(path.join(dir, 'not-exec'), '', { mode: 0o644 });
    assert.equal(findExecutable('fake-server', `/nonexistent${path.delimiter}${dir}`), exe);
    assert.equal(findExecutable(exe, ''), exe);
    assert.equal(findExecutable('./fake-server', '', dir), exe);
    assert.equal(findExecutable('not-exec', dir), null);
    assert.equal(findExecutable('no-such-server-xyz', dir), null);
    assert.match(missingServerMessage(['dlsp', 'serve']), /"dlsp" was not found.*diffusionLsp\.server\.command/);
  });
});

describe('next edit', () => {
  it('says why the Suggest command found none: off for a model that does not claim them, or none here', () => {
    assert.match(noNextEditMessage({ model: { next_edits: false, languages: ['python'] } }), /off for this model/);
    assert.equal(noNextEditMessage({ model: { next_edits: true } }), 'Diffusion LSP: no next edit here.');
    assert.equal(noNextEditMessage(null), 'Diffusion LSP: no next edit here.');
  });

  const lines = ['def area(width, h):', '    return w * h', ''];

  it('keeps only an edit for this document and version', () => {
    const result = { edits: [{ text: 'width', range: { start: { line: 1, character: 11 }, end: { line: 1, character: 12 } },
      textDocument: { uri: 'file:///a.py', version: 3 }, command: { title: 'a', command: 'diffusionLsp.didAcceptNextEdit' } }] };
    assert.equal(parseNextEdit(result, 'file:///a.py', 3)?.text, 'width');
    assert.equal(parseNextEdit(result, 'file:///a.py', 4), null);
    assert.equal(parseNextEdit(result, 'file:///b.py', 3), null);
    assert.equal(parseNextEdit({ edits: [] }, 'file:///a.py', 3), null);
    assert.equal(parseNextEdit(null, 'file:///a.py', 3), null);
    assert.equal(parseNextEdit({ edits: [{ text: 1, range: result.edits[0].range }] }, 'file:///a.py', 3), null);
    const backwards = { edits: [{ text: 'x', range: { start: { line: 2, character: 0 }, end: { line: 1, character: 0 } } }] };
    assert.equal(parseNextEdit(backwards, 'file:///a.py', 3), null);
  });

  it('draws an edit that keeps its lines word by word: a rename over lines reads as renames', () => {
    const doc = ['def f(result):', '    q._dict = dict(q)', '    return q'];
    const e = edit(1, 4, 2, 12, 'result._dict = dict(result)\n    return result');
    const pos = (line: number, character: number) => ({ line, character });
    assert.deepEqual(wordChanges(e, doc), [
      { removed: { start: pos(1, 4), end: pos(1, 5) }, written: 'result' },
      { removed: { start: pos(1, 19), end: pos(1, 20) }, written: 'result' },
      { removed: { start: pos(2, 11), end: pos(2, 12) }, written: 'result' },
    ]);
    assert.deepEqual(wordChanges(edit(1, 4, 1, 9, 'a +'), ['x', '    b - c']), [
      { removed: { start: pos(1, 4), end: pos(1, 5) }, written: 'a' },
      { removed: { start: pos(1, 6), end: pos(1, 9) }, written: '+' },  // "- c" became "+"
    ]);
    assert.equal(wordChanges(edit(1, 0, 1, 3, 'a\nb'), doc), null);  // a line added: drawn whole
  });

  it('previews a replacement, an insertion and a deletion', () => {
    const r = preview(edit(1, 11, 1, 12, 'width'), lines, 'python');
    assert.equal(r.deletedText, 'w');
    assert.deepEqual(r.deleted, edit(1, 11, 1, 12, '').range);
    assert.equal(r.inline, 'width');
    assert.equal(r.summary, 'replace at line 2');
    assert.match(r.hover, /Removes:\n```python\nw\n```/);
    const ins = preview(edit(2, 0, 2, 0, 'print(area(2, 3))\nprint(1)\n'), lines);
    assert.equal(ins.deleted, null);
    assert.equal(ins.inline, 'print(area(2, 3))  (+2 lines)');
    assert.equal(ins.summary, 'insert at line 3');
    const del = preview(edit(0, 0, 1, 0, ''), lines);
    assert.equal(del.deletedText, 'def area(width, h):\n');
    assert.equal(del.inline, '');
    assert.equal(del.summary, 'delete at line 1');
    // the rest of a signature change over two calls: words added only, on two lines
    const calls = ['x = f(1)', 'y = f(2)'];
    assert.equal(preview(edit(0, 7, 1, 7, ', s)\ny = f(2, s'), calls).summary, 'insert at lines 1–2');
    assert.equal(preview(edit(0, 6, 0, 7, ''), calls).summary, 'delete at line 1');
    assert.equal(preview(edit(0, 6, 1, 7, '1)\ny = f('), ['x = f(1, s)', 'y = f(s, 2)']).summary, 'delete at lines 1–2');
  });

  it('jumps to an edit off the cursor line, then applies it', () => {
    const e = edit(1, 11, 1, 12, 'width');
    assert.equal(acceptAction(e, { line: 0, character: 0 }), 'jump');
    assert.equal(acceptAction(e, { line: 1, character: 0 }), 'apply');
    assert.equal(acceptAction(edit(1, 0, 3, 0, ''), { line: 3, character: 0 }), 'apply');
    assert.equal(acceptAction(e, { line: 5, character: 0 }), 'jump');
  });

  it('applies an edit to text as the editor does', () => {
    const text = lines.join('\n');
    assert.equal(applyEdit(text, edit(1, 11, 1, 12, 'width')), 'def area(width, h):\n    return width * h\n');
    assert.equal(applyEdit(text, edit(0, 0, 1, 0, '')), '    return w * h\n');
    assert.equal(textIn(lines, edit(0, 4, 1, 4, '').range), 'area(width, h):\n    ');
  });

  it('leaves the cursor at the end of the applied text', () => {
    assert.deepEqual(endOf(edit(1, 11, 1, 12, 'width')), { line: 1, character: 16 });
    assert.deepEqual(endOf(edit(2, 4, 2, 4, 'a,\n    b')), { line: 3, character: 5 });
    assert.deepEqual(endOf(edit(0, 0, 1, 0, '')), { line: 0, character: 0 });
  });
});

describe('edit with instruction', () => {
  const uri = 'file:///a.py';
  const range = { start: { line: 1, character: 0 }, end: { line: 3, character: 0 } };
  const versioned = (u: string, version: number | null) => ({ range, newText: 'y\n',
    edit: { documentChanges: [{ textDocument: { uri: u, version }, edits: [{ range, newText: 'y\n' }] }] } });

  it('asks with the document, its version, the range and the instruction', () => {
    assert.deepEqual(instructParams(uri, 4, range, 'make it async'),
      { textDocument: { uri, version: 4 }, range, instruction: 'make it async' });
  });

  it('keeps a proposal for this document and version only', () => {
    assert.deepEqual(parseProposal(versioned(uri, 4), uri, 4), { ...versioned(uri, 4) });
    assert.equal(parseProposal(versioned(uri, 4), uri, 5), null, 'made for another version');
    assert.equal(parseProposal(versioned('file:///b.py', 4), uri, 4), null, 'for another document');
    assert.ok(parseProposal(versioned(uri, null), uri, 4), 'an unversioned document edit');
    const plain = { range, newText: 'y\n', edit: { changes: { [uri]: [{ range, newText: 'y\n' }] } } };
    assert.ok(parseProposal(plain, uri, 4));
    assert.equal(parseProposal({ ...plain, edit: { changes: { 'file:///b.py': [] } } }, uri, 4), null);
    assert.equal(parseProposal({ ...plain, newText: 3 }, uri, 4), null);
    assert.equal(parseProposal({ ...plain, range: { start: range.end, end: range.start } }, uri, 4), null);
    assert.equal(parseProposal({ range, newText: 'y' }, uri, 4), null, 'no edit');
    assert.equal(parseProposal(null, uri, 4), null);
  });

  it('refuses an empty instruction in the input box, names the lines and titles the diff', () => {
    assert.match(instructionProblem('  ') ?? '', /Say what to change/);
    assert.equal(instructionProblem('use a list comprehension'), null);
    assert.equal(linesLabel(2, 2), 'line 3');
    assert.equal(linesLabel(2, 5), 'lines 3–6');
    assert.equal(proposalTitle('a.py', '  use a\n list   comprehension '), 'a.py: as it is ↔ proposed ("use a list comprehension")');
    assert.equal(proposalTitle('a.py', 'x'.repeat(100)).length, 'a.py: as it is ↔ proposed ("")'.length + 60);
  });

  it('shows the file as the proposal would make it', () => {
    const text = 'def f(xs):\n    out = []\n    return out\n';
    assert.equal(withReplacement(text, 11, text.length, '    return list(xs)\n'), 'def f(xs):\n    return list(xs)\n');
    assert.equal(withReplacement('ab', 1, 1, 'X'), 'aXb');
  });
});

describe('status bar', () => {
  const ready = { worker: { pid: 42, state: 'ready' }, counts: { requests: 3, answered: 2, accepted: 1 },
    latency_ms: { p50: 51.2 }, next_edit: { counts: { requests: 1, answered: 1, accepted: 0 } } };

  it('shows the model loading, ready with the last latency, off, failed and a dead worker', () => {
    const loading = statusView({ client: 'running', enabled: true, stats: { worker: { state: 'loading' } }, lastLatencyMs: null });
    assert.match(loading.text, /loading model/);
    const ok = statusView({ client: 'running', enabled: true, stats: ready, lastLatencyMs: 48.6 });
    assert.equal(ok.text, '$(sparkle) diffusion 49 ms');
    assert.match(ok.tooltip, /Worker process 42 \(ready\)/);
    assert.match(ok.tooltip, /Completions: 3 asked, 2 answered, 1 accepted, p50 51 ms/);
    assert.match(ok.tooltip, /Next edits: 1 asked, 1 suggested, 0 accepted/);
    const off = statusView({ client: 'running', enabled: false, stats: ready, lastLatencyMs: 48.6 });
    assert.match(off.text, /circle-slash/);
    assert.match(off.tooltip, /are off/);
    const failed = statusView({ client: 'failed', enabled: true, stats: null, lastLatencyMs: null, error: 'no server' });
    assert.ok(failed.warning && /no server/.test(failed.tooltip));
    const dead = statusView({ client: 'running', enabled: true, stats: { worker: { state: 'failed', error: 'corrupt checkpoint' } },
      lastLatencyMs: null });
    assert.ok(dead.warning && /corrupt checkpoint/.test(dead.tooltip));
  });
});

describe('manifest', () => {
  const source = fs.readFileSync(path.join(ROOT, 'src', 'extension.ts'), 'utf8');

  it('registers every contributed command and binds keys only to them', () => {
    const commands = manifest.contributes.commands.map((c: { command: string }) => c.command);
    for (const c of commands) {
      assert.ok(source.includes(`registerCommand('${c}'`), `${c} is contributed but not registered`);
    }
    for (const k of manifest.contributes.keybindings) {
      assert.ok(commands.includes(k.command), `${k.command} has a key but is not contributed`);
    }
    const instruct = manifest.contributes.keybindings.find((k: { command: string }) => k.command === 'diffusionLsp.editWithInstruction');
    assert.match(instruct.when, /editorHasSelection/);
    const menus = Object.values(manifest.contributes.menus).flat() as { command: string }[];
    for (const m of menus) {
      assert.ok(commands.includes(m.command), `${m.command} is in a menu but is not contributed`);
    }
    assert.ok(manifest.contributes.menus['editor/context'].some((m: { command: string }) => m.command === 'diffusionLsp.editWithInstruction'));
    const accept = manifest.contributes.keybindings.find((k: { command: string }) => k.command === 'diffusionLsp.acceptNextEdit');
    assert.match(accept.when, /diffusionLsp\.nextEditVisible/);
    assert.match(accept.when, /!inlineSuggestionVisible/);
  });

  it('activates on every language it starts the server for', () => {
    const langs = manifest.contributes.configuration.properties['diffusionLsp.client.languages'].default as string[];
    assert.deepEqual(manifest.activationEvents, langs.map((l) => `onLanguage:${l}`));
  });
});
