// What a next-edit suggestion looks like on screen and what the accept key does, with no `vscode`
// import (tested from Node; nextEditView.ts draws it).

import type { NextEdit, Position, Range } from './protocol';

/** How an edit is drawn: the text it deletes (struck through), what it inserts (after the range, its
 * first line inline and the rest counted, all of it in the hover), and a one-line summary. */
export interface Preview {
  deleted: Range | null;
  deletedText: string;
  insertedLines: string[];
  inline: string;
  summary: string;
  hover: string;
}

const INLINE_MAX = 80;

/** The text of `range` in a document given as its lines (UTF-16 columns, as LSP's default). */
export function textIn(lines: string[], range: Range): string {
  const { start, end } = range;
  if (start.line === end.line) {
    return (lines[start.line] ?? '').slice(start.character, end.character);
  }
  const parts = [(lines[start.line] ?? '').slice(start.character)];
  for (let l = start.line + 1; l < end.line; l++) {
    parts.push(lines[l] ?? '');
  }
  parts.push((lines[end.line] ?? '').slice(0, end.character));
  return parts.join('\n');
}

function clip(s: string, n: number): string {
  return s.length <= n ? s : s.slice(0, n - 1) + '…';
}

export function preview(edit: NextEdit, lines: string[], languageId = ''): Preview {
  const deletedText = textIn(lines, edit.range);
  const empty = edit.range.start.line === edit.range.end.line
    && edit.range.start.character === edit.range.end.character;
  const insertedLines = edit.text === '' ? [] : edit.text.split('\n');
  let inline = '';
  if (insertedLines.length > 0) {
    const first = insertedLines.find((l) => l.trim() !== '') ?? '';
    const more = insertedLines.length - 1;
    inline = clip(first.trim() === '' ? '⏎' : first, INLINE_MAX) + (more > 0 ? `  (+${more} line${more > 1 ? 's' : ''})` : '');
  }
  const line = edit.range.start.line + 1;
  const { end } = edit.range;
  const last = end.character === 0 && end.line > edit.range.start.line ? end.line : end.line + 1;
  const where = last > line ? `lines ${line}–${last}` : `line ${line}`;
  // what the edit does, word by word: an edit over several sites that only adds words is an insertion
  const changes = empty || insertedLines.length === 0 ? [] : wordDiff(words(deletedText), words(edit.text));
  const kind = insertedLines.length === 0 || (changes.length > 0 && changes.every(([, , w]) => w.length === 0)) ? 'delete'
    : empty || (changes.length > 0 && changes.every(([, n]) => n === 0)) ? 'insert' : 'replace';
  const summary = `${kind} at ${where}`;
  const fence = '```';
  const hover = [`**Next edit** (${summary}) — Tab: accept, Esc: dismiss`, '',
    ...(empty ? [] : ['Removes:', `${fence}${languageId}`, deletedText, fence]),
    ...(insertedLines.length ? ['Inserts:', `${fence}${languageId}`, edit.text, fence] : [])].join('\n');
  return { deleted: empty ? null : edit.range, deletedText, insertedLines, inline, summary, hover };
}

/** A word, or one character: what a word-by-word preview compares. */
function words(line: string): string[] {
  return line.match(/[\p{L}\p{N}_]+|[^]/gu) ?? [];
}

/** The changes that turn words `a` into words `b`: [first word of a, words removed, words of b written]
 * (a longest common subsequence; lines are short). */
function wordDiff(a: string[], b: string[]): [number, number, string[]][] {
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out: [number, number, string[]][] = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      i++; j++;
      continue;
    }
    const start = i, written: string[] = [];
    while ((i < n || j < m) && !(i < n && j < m && a[i] === b[j])) {
      if (j < m && (i >= n || lcs[i][j + 1] >= lcs[i + 1][j])) {
        written.push(b[j++]);
      } else {
        i++;
      }
    }
    out.push([start, i - start, written]);
  }
  return out;
}

/** Where a change is drawn: the range it removes (maybe empty) and what it writes there. */
export interface WordChange {
  removed: Range;
  written: string;
}

/** An edit that keeps its number of lines, as changes of words on each line it changes (a rename's
 * sites drawn as renames, not as a rewritten block); null when the line counts differ. */
export function wordChanges(edit: Pick<NextEdit, 'range' | 'text'>, lines: string[]): WordChange[] | null {
  const before = textIn(lines, edit.range).split('\n');
  const after = edit.text.split('\n');
  if (before.length !== after.length || edit.text === '') {
    return null;
  }
  const out: WordChange[] = [];
  before.forEach((old, k) => {
    if (old === after[k]) {
      return;
    }
    const line = edit.range.start.line + k;
    const base = k === 0 ? edit.range.start.character : 0;
    const a = words(old);
    const col = (n: number) => base + a.slice(0, n).join('').length;
    for (const [first, removed, written] of wordDiff(a, words(after[k]))) {
      out.push({ removed: { start: { line, character: col(first) }, end: { line, character: col(first + removed) } },
        written: written.join('') });
    }
  });
  return out;
}

/** The accept key jumps to an edit whose lines the cursor is not on (so the user sees it before it
 * lands), else applies it. */
export function acceptAction(edit: NextEdit, cursor: Position): 'jump' | 'apply' {
  return cursor.line < edit.range.start.line || cursor.line > edit.range.end.line ? 'jump' : 'apply';
}

/** Where the cursor goes once the edit is applied: the end of its new text (Copilot's next edits
 * leave it there too), so the next suggestion is asked from where the change ended. */
export function endOf(edit: Pick<NextEdit, 'range' | 'text'>): Position {
  const lines = edit.text.split('\n');
  const last = lines[lines.length - 1];
  return lines.length === 1
    ? { line: edit.range.start.line, character: edit.range.start.character + last.length }
    : { line: edit.range.start.line + lines.length - 1, character: last.length };
}

/** A document's text after the edit (what VS Code's TextEditorEdit.replace does), for tests and
 * clients without an editor. */
export function applyEdit(text: string, edit: Pick<NextEdit, 'range' | 'text'>): string {
  const offset = (p: Position) => {
    let at = 0;
    for (let l = 0; l < p.line; l++) {
      const nl = text.indexOf('\n', at);
      if (nl < 0) {
        return text.length;
      }
      at = nl + 1;
    }
    const eol = text.indexOf('\n', at);
    return Math.min(at + p.character, eol < 0 ? text.length : eol);
  };
  return text.slice(0, offset(edit.range.start)) + edit.text + text.slice(offset(edit.range.end));
}
