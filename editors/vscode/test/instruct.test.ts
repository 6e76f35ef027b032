// Edit Selection with Instruction's client layer against the real server, from Node: the request
// built as instruct.ts builds it, its proposal parsed and applied as the diff's right side shows it
// and as Accept applies it, and the server's refusals as the errors the command shows.
//
// tests/test_vscode_instruct.py runs this file alone with DIFFUSION_LSP_TEST_INSTRUCT (the server's
// command line; its model is the echo checkpoint, whose every answer is "foo"s) and checks that its
// tests passed. Without it the file registers no test: the whole suite's run (npm test,
// tests/test_vscode_extension.py) counts no skip for it.

import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import {
  createProtocolConnection, type ProtocolConnection, ResponseError, StreamMessageReader, StreamMessageWriter,
} from 'vscode-languageserver-protocol/node';

import { applyEdit } from '../src/nextEdit';
import { EDIT_WITH_INSTRUCTION, instructParams, parseProposal } from '../src/protocol';

const raw = process.env.DIFFUSION_LSP_TEST_INSTRUCT;
const command: string[] | null = raw ? JSON.parse(raw) : null;
const URI = 'file:///work/double.py';
const TEXT = 'def double(xs):\n    out = []  # é😀\n    for x in xs:\n        out.append(2 * x)\n    return out\n';

async function start(cmd: string[]): Promise<{ conn: ProtocolConnection; close: () => Promise<void> }> {
  const proc = spawn(cmd[0], cmd.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
  const conn = createProtocolConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
  conn.onNotification('window/logMessage', () => undefined);
  conn.onNotification('window/showMessage', () => undefined);
  conn.onNotification('$/progress', () => undefined);
  conn.onRequest('window/workDoneProgress/create', () => null);
  conn.listen();
  await conn.sendRequest('initialize', {  // what vscode-languageclient says it takes: UTF-16, documentChanges
    processId: process.pid, rootUri: null, workspaceFolders: null, initializationOptions: { worker: { idleExitS: 0 } },
    capabilities: { workspace: { workspaceEdit: { documentChanges: true } }, window: { workDoneProgress: true } },
  });
  await conn.sendNotification('initialized', {});
  await conn.sendNotification('textDocument/didOpen',
    { textDocument: { uri: URI, languageId: 'python', version: 1, text: TEXT } });
  const close = async () => {
    await conn.sendRequest('shutdown');
    await conn.sendNotification('exit');
    await new Promise((resolve) => proc.once('exit', resolve));
    conn.dispose();
  };
  return { conn, close };
}

if (command) {
  describe('edit with instruction against the real server', () => {
    it('proposes an edit for the selection that applies, and refuses bad requests with their reason', async () => {
      const s = await start(command);
      try {
        // lines 2-4 whole, the first ending after an emoji (two UTF-16 units): the selection as VS Code sends it
        const range = { start: { line: 1, character: 0 }, end: { line: 4, character: 0 } };
        const proposal = parseProposal(await s.conn.sendRequest(EDIT_WITH_INSTRUCTION,
          instructParams(URI, 1, range, 'use a list comprehension')), URI, 1);
        assert.ok(proposal, 'a well-formed proposal for this document and version');
        assert.deepEqual(proposal.range, range);
        assert.match(proposal.newText, /^(foo)+\n$/);
        const after = applyEdit(TEXT, { range: proposal.range, text: proposal.newText });
        assert.equal(after, `def double(xs):\n${proposal.newText}    return out\n`);
        const edits = (proposal.edit as { documentChanges: { edits: { newText: string }[] }[] }).documentChanges;
        assert.equal(edits[0].edits[0].newText, proposal.newText, 'Accept applies what the diff shows');

        await assert.rejects(s.conn.sendRequest(EDIT_WITH_INSTRUCTION, instructParams(URI, 1, range, ' ')),
          (e: ResponseError<unknown>) => e.code === -32602 && /the instruction is empty/.test(e.message));
        await assert.rejects(s.conn.sendRequest(EDIT_WITH_INSTRUCTION, instructParams(URI, 2, range, 'x')),
          (e: ResponseError<unknown>) => e.code === -32801 && /at version 1, not 2/.test(e.message));
        const past = { start: range.start, end: { line: 40, character: 0 } };
        await assert.rejects(s.conn.sendRequest(EDIT_WITH_INSTRUCTION, instructParams(URI, 1, past, 'x')),
          (e: ResponseError<unknown>) => e.code === -32602 && /past the end/.test(e.message));
      } finally {
        await s.close();
      }
    });
  });
}
