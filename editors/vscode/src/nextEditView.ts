// Next-edit suggestions in the editor: asked for after a change (textDocument/copilotInlineEdit),
// drawn as a decorated preview (the text to delete struck through, the text to insert after it, all
// of it in the hover), reported as shown (textDocument/didShowInlineEdit), and cleared when the text
// changes or the cursor moves. Showing one closes the word-suggestion list (it would take Tab). The
// accept key (Tab while `diffusionLsp.nextEditVisible`) jumps to an edit the cursor is not on, then
// applies it and leaves the cursor at its end. Stable API only: decorations and a context key.

import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';

import { acceptAction, endOf, preview, wordChanges } from './nextEdit';
import { DID_SHOW_INLINE_EDIT, EXECUTE_COMMAND, NEXT_EDIT, type NextEdit, nextEditParams, type Range, parseNextEdit } from './protocol';
import type { ClientSettings } from './settings';

export const VISIBLE_KEY = 'diffusionLsp.nextEditVisible';

interface Shown {
  editor: vscode.TextEditor;
  edit: NextEdit;
  range: vscode.Range;
  jumping: boolean;
}

export class NextEditView implements vscode.Disposable {
  private shown: Shown | null = null;
  private timer: NodeJS.Timeout | undefined;
  private pending: vscode.CancellationTokenSource | undefined;
  private readonly removed = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor('diffEditor.removedTextBackground'),
    textDecoration: 'line-through',
  });
  private readonly inserted = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor('editorGhostText.foreground'), fontStyle: 'italic', margin: '0 0 0 1em' },
    backgroundColor: new vscode.ThemeColor('diffEditor.insertedLineBackground'),
  });
  private readonly hint = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor('editorGhostText.foreground'), margin: '0 0 0 2em' },
  });
  private readonly subscriptions: vscode.Disposable[];

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly settings: () => ClientSettings,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.subscriptions = [
      vscode.workspace.onDidChangeTextDocument((e) => this.onChange(e)),
      vscode.window.onDidChangeTextEditorSelection((e) => this.onSelection(e)),
      vscode.window.onDidChangeActiveTextEditor(() => this.clear()),
    ];
  }

  get visible(): NextEdit | null {
    return this.shown?.edit ?? null;
  }

  private wanted(doc: vscode.TextDocument): boolean {
    return this.settings().languages.includes(doc.languageId) && (doc.uri.scheme === 'file' || doc.uri.scheme === 'untitled');
  }

  private onChange(e: vscode.TextDocumentChangeEvent): void {
    if (e.contentChanges.length === 0) {
      return;
    }
    if (this.shown && e.document === this.shown.editor.document) {
      this.clear();
    }
    const editor = vscode.window.activeTextEditor;
    const s = this.settings();
    if (editor && editor.document === e.document && s.nextEditOnChange && this.wanted(e.document)) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => void this.request(editor), s.nextEditDelayMs);
    }
  }

  private onSelection(e: vscode.TextEditorSelectionChangeEvent): void {
    if (!this.shown || e.textEditor !== this.shown.editor) {
      return;
    }
    if (this.shown.jumping) {
      this.shown.jumping = false;
      this.draw();
      return;
    }
    // typing moves the cursor too, but the change that moved it has already cleared the suggestion
    this.clear();
  }

  /** Ask the server for a next edit at the cursor of `editor` and show it (the Suggest command). */
  async request(editor: vscode.TextEditor | undefined = vscode.window.activeTextEditor): Promise<NextEdit | null> {
    const client = this.client();
    if (!editor || !client || !client.isRunning() || !this.wanted(editor.document)) {
      return null;
    }
    clearTimeout(this.timer);
    this.pending?.cancel();
    const pending = (this.pending = new vscode.CancellationTokenSource());
    const doc = editor.document;
    const version = doc.version;
    const at = editor.selection.active;
    try {
      const result = await client.sendRequest(NEXT_EDIT,
        nextEditParams(doc.uri.toString(), version, { line: at.line, character: at.character }), pending.token);
      const edit = parseNextEdit(result, doc.uri.toString(), version);
      if (pending.token.isCancellationRequested || !edit || doc.version !== version
          || vscode.window.activeTextEditor !== editor) {
        return null;
      }
      this.show(editor, edit, client);
      return edit;
    } catch (e) {
      if (!pending.token.isCancellationRequested) {
        this.log.warn(`next edit: ${e instanceof Error ? e.message : String(e)}`);
      }
      return null;
    } finally {
      if (this.pending === pending) {
        this.pending = undefined;
      }
      pending.dispose();
    }
  }

  private show(editor: vscode.TextEditor, edit: NextEdit, client: LanguageClient): void {
    this.clear();
    this.shown = { editor, edit, range: client.protocol2CodeConverter.asRange(edit.range), jumping: false };
    this.draw();
    // the word-suggestion list a rename's typing opened would take Tab and Esc (Tab there put the old
    // name back: a user trial): once typing has paused and a next edit is shown, it is closed
    void vscode.commands.executeCommand('hideSuggestWidget');
    void vscode.commands.executeCommand('setContext', VISIBLE_KEY, true);
    void client.sendNotification(DID_SHOW_INLINE_EDIT, { item: { command: edit.command } });
  }

  private draw(): void {
    const s = this.shown;
    if (!s) {
      return;
    }
    const lines = Array.from({ length: s.editor.document.lineCount }, (_, i) => s.editor.document.lineAt(i).text);
    const p = preview(s.edit, lines, s.editor.document.languageId);
    const hover = new vscode.MarkdownString(p.hover);
    const changes = wordChanges(s.edit, lines);
    if (changes) {  // word by word: only what changes is struck, what replaces it follows it
      const asRange = (r: Range) => new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
      s.editor.setDecorations(this.removed, changes.filter((c) => c.removed.start.character !== c.removed.end.character)
        .map((c) => ({ range: asRange(c.removed), hoverMessage: hover })));
      s.editor.setDecorations(this.inserted, changes.filter((c) => c.written !== '').map((c) => ({
        range: asRange({ start: c.removed.end, end: c.removed.end }), hoverMessage: hover,
        renderOptions: { after: { contentText: c.written } } })));
    } else {
      s.editor.setDecorations(this.removed, p.deleted ? [{ range: s.range, hoverMessage: hover }] : []);
      const end = new vscode.Range(s.range.end, s.range.end);
      s.editor.setDecorations(this.inserted, p.inline ? [{ range: end, hoverMessage: hover,
        renderOptions: { after: { contentText: p.inline } } }] : []);
    }
    const cursor = s.editor.selection.active;
    const away = acceptAction(s.edit, { line: cursor.line, character: cursor.character }) === 'jump';
    const where = new vscode.Range(cursor.line, Number.MAX_SAFE_INTEGER, cursor.line, Number.MAX_SAFE_INTEGER);
    s.editor.setDecorations(this.hint, away ? [{ range: where, hoverMessage: hover,
      renderOptions: { after: { contentText: `⇥ Tab: next edit (${p.summary})` } } }] : []);
  }

  /** The accept key: jump to the edit when the cursor is not on its lines, else apply it. */
  async accept(): Promise<'jump' | 'apply' | null> {
    const s = this.shown;
    if (!s) {
      return null;
    }
    const doc = s.editor.document;
    if (doc.version !== s.edit.version) {
      this.clear();
      return null;
    }
    const cursor = s.editor.selection.active;
    if (acceptAction(s.edit, { line: cursor.line, character: cursor.character }) === 'jump') {
      s.jumping = true;
      s.editor.selection = new vscode.Selection(s.range.start, s.range.start);
      s.editor.revealRange(s.range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      return 'jump';
    }
    this.clear();
    const ok = await s.editor.edit((b) => b.replace(s.range, s.edit.text));
    if (ok) {
      const end = endOf(s.edit);
      s.editor.selection = new vscode.Selection(end.line, end.character, end.line, end.character);
    }
    const command = s.edit.command;
    if (ok && command) {
      void this.client()?.sendRequest(EXECUTE_COMMAND, { command: command.command, arguments: command.arguments });
    }
    return ok ? 'apply' : null;
  }

  clear(): void {
    const s = this.shown;
    this.shown = null;
    if (s) {
      for (const d of [this.removed, this.inserted, this.hint]) {
        s.editor.setDecorations(d, []);
      }
      void vscode.commands.executeCommand('setContext', VISIBLE_KEY, false);
    }
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.pending?.cancel();
    this.clear();
    for (const d of [this.removed, this.inserted, this.hint, ...this.subscriptions]) {
      d.dispose();
    }
  }
}
