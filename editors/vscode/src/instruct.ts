// Edit from an instruction (the Edit Selection with Instruction command): ask what to change in an
// input box, ask the server (diffusionLsp/editWithInstruction) under a cancellable progress
// notification, show the proposal as a diff between two read-only virtual documents (the file as it
// is and as the proposal would make it), and apply the server's WorkspaceEdit on Accept, only while
// the document is still at the version the proposal was made for. Reject, or a newer request, leaves
// the file as it is. Accept and Reject are a notification's buttons and the diff editor's title
// actions (diffusionLsp.acceptProposal / rejectProposal).

import * as path from 'path';
import * as vscode from 'vscode';
import { type LanguageClient, ResponseError, type WorkspaceEdit } from 'vscode-languageclient/node';

import { EDIT_WITH_INSTRUCTION, instructParams, parseProposal, type Proposal } from './protocol';
import { instructionProblem, linesLabel, proposalTitle, withReplacement } from './proposal';

export const PROPOSAL_SCHEME = 'diffusion-lsp-proposal';
const CANCELLED = -32800; // LSP RequestCancelled: this request was superseded or cancelled
const ACCEPT = 'Accept';
const REJECT = 'Reject';

export type Outcome = 'accepted' | 'rejected' | 'stale' | null;

interface Shown {
  doc: vscode.TextDocument;
  version: number;
  proposal: Proposal;
  proposed: vscode.Uri;
  decide: (accept: boolean) => void;
}

export class InstructEdits implements vscode.Disposable {
  private readonly texts = new Map<string, string>(); // virtual document -> its text
  private readonly subscriptions: vscode.Disposable[];
  private shown: Shown | null = null;
  private count = 0;

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly languages: () => string[],
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.subscriptions = [vscode.workspace.registerTextDocumentContentProvider(PROPOSAL_SCHEME, {
      provideTextDocumentContent: (uri) => this.texts.get(uri.toString()) ?? '',
    })];
  }

  /** The command: the selection of `editor` (the cursor's line when nothing is selected) rewritten as
   * `instruction` says (asked for when not given), shown, and applied when accepted. */
  async edit(editor = vscode.window.activeTextEditor, instruction?: string): Promise<Outcome> {
    const client = this.client();
    if (!editor || !client?.isRunning() || !this.languages().includes(editor.document.languageId)) {
      void vscode.window.showWarningMessage('Diffusion LSP: the server is not running for this file.');
      return null;
    }
    const doc = editor.document;
    const sel = editor.selection.isEmpty ? doc.lineAt(editor.selection.active.line).range : editor.selection;
    const where = linesLabel(sel.start.line, sel.end.line);
    const said = instruction ?? await vscode.window.showInputBox({
      title: `Diffusion LSP: edit ${where}`, prompt: 'What should change?',
      placeHolder: 'e.g. use a list comprehension', validateInput: instructionProblem,
    });
    if (said === undefined || instructionProblem(said) !== null) {
      return null;
    }
    const version = doc.version;
    const uri = client.code2ProtocolConverter.asUri(doc.uri);
    const params = instructParams(uri, version, client.code2ProtocolConverter.asRange(sel), said);
    let result: unknown;
    try {
      result = await vscode.window.withProgress({
        location: vscode.ProgressLocation.Notification, cancellable: true,
        title: `Diffusion LSP: rewriting ${where}…`,
      }, (_, token) => client.sendRequest(EDIT_WITH_INSTRUCTION, params, token));
    } catch (e) {
      if (!(e instanceof ResponseError && e.code === CANCELLED)) {
        const message = e instanceof Error ? e.message : String(e);
        this.log.warn(`edit with instruction: ${message}`);
        void vscode.window.showErrorMessage(`Diffusion LSP: ${message}`);
      }
      return null;
    }
    const proposal = parseProposal(result, uri, version);
    if (!proposal) {
      void vscode.window.showErrorMessage('Diffusion LSP: the server answered the edit request with something else.');
      return null;
    }
    if (doc.version !== version) {
      void vscode.window.showWarningMessage('Diffusion LSP: the file changed while the model worked; nothing to show.');
      return 'stale';
    }
    const range = client.protocol2CodeConverter.asRange(proposal.range);
    if (doc.getText(range) === proposal.newText) {
      void vscode.window.showInformationMessage('Diffusion LSP: the model proposes no change here.');
      return 'rejected';
    }
    return await this.show(doc, version, proposal, range, said, client);
  }

  private async show(doc: vscode.TextDocument, version: number, proposal: Proposal, range: vscode.Range,
    instruction: string, client: LanguageClient): Promise<Outcome> {
    this.shown?.decide(false);
    const n = ++this.count;
    const name = path.basename(doc.uri.path) || 'untitled';
    const text = doc.getText();
    const original = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: `/${n}/as-it-is/${name}` });
    const proposed = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: `/${n}/proposed/${name}` });
    this.texts.set(original.toString(), text);
    this.texts.set(proposed.toString(),
      withReplacement(text, doc.offsetAt(range.start), doc.offsetAt(range.end), proposal.newText));
    let mine: Shown | undefined;
    const decided = new Promise<boolean>((resolve) => {
      mine = this.shown = { doc, version, proposal, proposed, decide: resolve };
    });
    await vscode.commands.executeCommand('vscode.diff', original, proposed, proposalTitle(name, instruction),
      { preview: true });
    void vscode.window.showInformationMessage(`Diffusion LSP: apply the proposed edit to ${name}?`, ACCEPT, REJECT)
      .then((choice) => {
        if (this.shown?.proposed === proposed) { // not one the title actions or a newer request decided
          this.decide(choice === ACCEPT);
        }
      });
    const accept = await decided;
    const superseded = this.shown !== mine; // a newer proposal is on screen: leave the focus to it
    if (!superseded) {
      this.shown = null;
    }
    await this.closeDiff(proposed);
    this.texts.delete(original.toString());
    this.texts.delete(proposed.toString());
    if (!accept) {
      if (!superseded) {
        await vscode.window.showTextDocument(doc, { selection: range });
      }
      return 'rejected';
    }
    if (doc.version !== version) {
      void vscode.window.showWarningMessage(
        `Diffusion LSP: ${name} changed since the proposal; nothing applied (ask again).`);
      return 'stale';
    }
    const applied = await vscode.workspace.applyEdit(
      await client.protocol2CodeConverter.asWorkspaceEdit(proposal.edit as WorkspaceEdit));
    if (!applied) {
      void vscode.window.showErrorMessage(`Diffusion LSP: VS Code did not apply the edit to ${name}.`);
      return 'stale';
    }
    const start = doc.offsetAt(range.start);
    await vscode.window.showTextDocument(doc, {
      selection: new vscode.Range(range.start, doc.positionAt(start + proposal.newText.length)) });
    return 'accepted';
  }

  /** Accept (true) or reject the shown proposal: the notification's buttons, the title actions. */
  decide(accept: boolean): void {
    this.shown?.decide(accept);
  }

  private async closeDiff(proposed: vscode.Uri): Promise<void> {
    const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter((t) =>
      t.input instanceof vscode.TabInputTextDiff && t.input.modified.toString() === proposed.toString());
    if (tabs.length > 0) {
      await vscode.window.tabGroups.close(tabs);
    }
  }

  dispose(): void {
    this.decide(false);
    for (const d of this.subscriptions) {
      d.dispose();
    }
  }
}
