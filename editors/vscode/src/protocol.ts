// The server's messages beyond LSP 3.18 that the extension uses, with no `vscode` import, so that
// the tests drive the real server through the same code from Node.

export const NEXT_EDIT = 'textDocument/copilotInlineEdit';
export const DID_SHOW_INLINE_EDIT = 'textDocument/didShowInlineEdit';
export const STATS = 'diffusionLsp/stats';
export const EXECUTE_COMMAND = 'workspace/executeCommand';

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface Command {
  title: string;
  command: string;
  arguments?: unknown[];
}

/** One next-edit suggestion: replace `range` of document `uri` at `version` with `text`. */
export interface NextEdit {
  uri: string;
  version: number;
  range: Range;
  text: string;
  command?: Command;
}

/** The parameters of textDocument/copilotInlineEdit. */
export function nextEditParams(uri: string, version: number, position: Position) {
  return { textDocument: { uri, version }, position };
}

function isPosition(p: unknown): p is Position {
  const q = p as Position;
  return typeof q === 'object' && q !== null && Number.isInteger(q.line) && Number.isInteger(q.character)
    && q.line >= 0 && q.character >= 0;
}

function isRange(r: unknown): r is Range {
  const q = r as Range;
  return typeof q === 'object' && q !== null && isPosition(q.start) && isPosition(q.end)
    && (q.start.line < q.end.line || (q.start.line === q.end.line && q.start.character <= q.end.character));
}

/** The first edit of a copilotInlineEdit result for this document and version, or null: an empty or
 * malformed result, another document, or an edit made for a version the document has left. */
export function parseNextEdit(result: unknown, uri: string, version: number): NextEdit | null {
  const edits = (result as { edits?: unknown })?.edits;
  if (!Array.isArray(edits) || edits.length === 0) {
    return null;
  }
  const e = edits[0] as { text?: unknown; range?: unknown; textDocument?: { uri?: unknown; version?: unknown };
    command?: Command };
  if (typeof e?.text !== 'string' || !isRange(e.range)) {
    return null;
  }
  const doc = e.textDocument ?? {};
  if ((doc.uri !== undefined && doc.uri !== uri) || (doc.version !== undefined && doc.version !== version)) {
    return null;
  }
  const command = e.command && typeof e.command.command === 'string' ? e.command : undefined;
  return { uri, version, range: e.range, text: e.text, command };
}

/** What diffusionLsp/stats reports that the status bar shows. */
export interface Stats {
  counts?: Record<string, number>;
  latency_ms?: { p50?: number | null; p95?: number | null };
  timings?: { total_ms: number; source: string }[];
  worker?: { pid?: number | null; state?: string; error?: string | null };
  next_edit?: { counts?: Record<string, number>; latency_ms?: { p50?: number | null } };
  // what the model claims, and the defaults the server took from it (completion.languages, nextEdit.enable)
  model?: { next_edits?: boolean; languages?: string[] | null };
}

/** What the Suggest command says when no next edit came back. */
export function noNextEditMessage(stats: Stats | null): string {
  if (stats?.model?.next_edits === false) {
    return 'Diffusion LSP: next edits are off for this model (it does not claim them); '
      + 'the diffusionLsp.nextEdit.enable setting turns them on.';
  }
  return 'Diffusion LSP: no next edit here.';
}

export const EDIT_WITH_INSTRUCTION = 'diffusionLsp/editWithInstruction';

/** The parameters of diffusionLsp/editWithInstruction: rewrite `range` of the document at `version` as
 * `instruction` says. */
export function instructParams(uri: string, version: number, range: Range, instruction: string) {
  return { textDocument: { uri, version }, range, instruction };
}

/** A proposal from diffusionLsp/editWithInstruction: `newText` for `range`, and the server's
 * WorkspaceEdit (applied as it is on accept). */
export interface Proposal {
  range: Range;
  newText: string;
  edit: unknown;
}

/** The result as a Proposal, or null when it is malformed or its edit is for another document or
 * version (a versioned edit says which). */
export function parseProposal(result: unknown, uri: string, version: number): Proposal | null {
  const r = result as { range?: unknown; newText?: unknown; edit?: { documentChanges?: unknown; changes?: unknown } };
  if (typeof r?.newText !== 'string' || !isRange(r.range) || typeof r.edit !== 'object' || r.edit === null) {
    return null;
  }
  const changes = r.edit.documentChanges;
  if (Array.isArray(changes)) {
    const doc = (changes as { textDocument?: { uri?: unknown; version?: unknown } }[]).map((c) => c?.textDocument);
    if (doc.length !== 1 || doc[0]?.uri !== uri || (doc[0]?.version != null && doc[0].version !== version)) {
      return null;
    }
  } else if (typeof r.edit.changes !== 'object' || r.edit.changes === null
      || Object.keys(r.edit.changes).join() !== uri) {
    return null;
  }
  return { range: r.range, newText: r.newText, edit: r.edit };
}
