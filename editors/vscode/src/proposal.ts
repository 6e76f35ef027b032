// What the Edit Selection with Instruction command shows, with no `vscode` import (tested from Node;
// instruct.ts drives it): the input box's check, the diff's title, and the file as the proposal
// would make it (the diff's right side).

/** Why the input box cannot send `value` (shown under it), or null. The server has the last word (it
 * also refuses an overlong instruction, with its limit in the message). */
export function instructionProblem(value: string): string | null {
  return value.trim() === '' ? 'Say what to change, e.g. "use a list comprehension"' : null;
}

/** The diff editor's title: the file, and the instruction (clipped). */
export function proposalTitle(fileName: string, instruction: string): string {
  const said = instruction.trim().replace(/\s+/g, ' ');
  return `${fileName}: as it is ↔ proposed ("${said.length > 60 ? said.slice(0, 59) + '…' : said}")`;
}

/** `text` with [start, end) (offsets, as TextDocument.offsetAt gives them) replaced by `newText`. */
export function withReplacement(text: string, start: number, end: number, newText: string): string {
  return text.slice(0, start) + newText + text.slice(end);
}

/** "line 3" or "lines 3–6" (1-based, as the editor numbers them) for a range's start and end lines. */
export function linesLabel(startLine: number, endLine: number): string {
  return startLine === endLine ? `line ${startLine + 1}` : `lines ${startLine + 1}–${endLine + 1}`;
}
