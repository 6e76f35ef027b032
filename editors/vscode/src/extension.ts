// The Diffusion LSP extension: starts `diffusion-lsp serve` (diffusionLsp.server.command) with
// vscode-languageclient, which asks for inline completions natively (LSP 3.18
// textDocument/inlineCompletion); next edits are drawn by nextEditView.ts; a status bar item shows
// the model's state and the last completion's latency and turns the product on and off.

import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification, LanguageClient, type LanguageClientOptions, type ServerOptions, State,
} from 'vscode-languageclient/node';

import { InstructEdits } from './instruct';
import { NextEditView, VISIBLE_KEY } from './nextEditView';
import { noNextEditMessage, STATS, type Stats } from './protocol';
import {
  adaptCommand, clientSettings, findExecutable, minutesProblem, missingServerMessage, SECTION, serverKeys, userSettings,
} from './settings';
import { type ClientState, statusView } from './status';

const POLL_MS = 3000;

class Extension implements vscode.Disposable {
  client: LanguageClient | undefined;
  private state: ClientState = 'stopped';
  private error: string | null = null;
  private stats: Stats | null = null;
  private lastLatencyMs: number | null = null;
  private poll: NodeJS.Timeout | undefined;
  readonly log = vscode.window.createOutputChannel('Diffusion LSP', { log: true });
  private readonly status = vscode.window.createStatusBarItem('diffusionLsp.status', vscode.StatusBarAlignment.Right, 100);
  readonly nextEdits: NextEditView;

  constructor(private readonly keys: string[]) {
    this.status.name = 'Diffusion LSP';
    this.status.command = 'diffusionLsp.toggle';
    this.status.show();
    this.nextEdits = new NextEditView(() => this.client, () => this.settings(), this.log);
    this.render();
  }

  private raw(): unknown {
    return vscode.workspace.getConfiguration().get(SECTION);
  }

  /** The server settings the user has set (the others keep the server command line's values). */
  private serverSettings() {
    const config = vscode.workspace.getConfiguration();
    return userSettings(this.keys, (key) => config.inspect(key));
  }

  settings() {
    return clientSettings(this.raw());
  }

  private enabled(): boolean {
    const c = vscode.workspace.getConfiguration(SECTION);
    return c.get<boolean>('completion.enable', true) || c.get<boolean>('nextEdit.enable', true);
  }

  private render(): void {
    const v = statusView({ client: this.state, enabled: this.enabled(), stats: this.stats,
      lastLatencyMs: this.lastLatencyMs, error: this.error });
    this.status.text = v.text;
    this.status.tooltip = v.tooltip;
    this.status.backgroundColor = v.warning ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
  }

  async start(): Promise<void> {
    const s = this.settings();
    const env = { ...process.env, ...s.env };
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    if (findExecutable(s.command[0], env.PATH, cwd) === null) {
      this.fail(missingServerMessage(s.command));
      return;
    }
    // stdio with no `transport`: TransportKind.stdio would make vscode-languageclient append `--stdio`
    // to the command line, which `diffusion-lsp serve` rejects (it speaks stdio without being asked)
    const serverOptions: ServerOptions = { command: s.command[0], args: s.command.slice(1), options: { env, cwd } };
    const clientOptions: LanguageClientOptions = {
      documentSelector: s.languages.flatMap((language) => [{ scheme: 'file', language }, { scheme: 'untitled', language }]),
      initializationOptions: this.serverSettings(),
      outputChannel: this.log,
      middleware: {
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          const t0 = Date.now();
          const items = await next(document, position, context, token);
          if (!token.isCancellationRequested) {
            this.lastLatencyMs = Date.now() - t0;
            this.render();
          }
          return items;
        },
      },
    };
    const client = new LanguageClient('diffusionLsp', 'Diffusion LSP', serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((e) => {
      this.state = e.newState === State.Running ? 'running' : e.newState === State.Starting ? 'starting' : 'stopped';
      this.render();
    });
    this.state = 'starting';
    this.error = null;
    this.render();
    try {
      await client.start();
      this.state = 'running';
      this.startPolling();
    } catch (e) {
      this.fail(`Diffusion LSP: the server did not start: ${e instanceof Error ? e.message : String(e)}`);
    }
    this.render();
  }

  private fail(message: string): void {
    this.state = 'failed';
    this.error = message;
    this.log.error(message);
    this.render();
    void vscode.window.showErrorMessage(message, 'Open Settings', 'Open Logs').then((choice) => {
      if (choice === 'Open Settings') {
        void vscode.commands.executeCommand('workbench.action.openSettings', 'diffusionLsp.server');
      } else if (choice === 'Open Logs') {
        this.log.show();
      }
    });
  }

  private startPolling(): void {
    clearInterval(this.poll);
    this.poll = setInterval(() => void this.refresh(), POLL_MS);
    void this.refresh();
  }

  async refresh(): Promise<Stats | null> {
    const client = this.client;
    if (!client?.isRunning()) {
      return null;
    }
    try {
      this.stats = await client.sendRequest(STATS, {}) as Stats;
    } catch {
      this.stats = null;
    }
    this.render();
    return this.stats;
  }

  async stop(): Promise<void> {
    clearInterval(this.poll);
    this.nextEdits.clear();
    const client = this.client;
    this.client = undefined;
    this.stats = null;
    if (client) {
      try {
        await client.stop(5000);
      } catch (e) {
        this.log.warn(`stopping the server: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    this.state = 'stopped';
    this.render();
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  async onConfiguration(e: vscode.ConfigurationChangeEvent): Promise<void> {
    if (!e.affectsConfiguration(SECTION)) {
      return;
    }
    if (['server', 'client.languages'].some((k) => e.affectsConfiguration(`${SECTION}.${k}`))) {
      await this.restart();
      return;
    }
    this.render();
    if (this.client?.isRunning()) {
      await this.client.sendNotification(DidChangeConfigurationNotification.type,
        { settings: { [SECTION]: this.serverSettings() } });
    }
  }

  /** The Suggest command: the next edit at the cursor, or a word on why there is none. */
  async suggestNextEdit(): Promise<void> {
    if (!vscode.window.activeTextEditor || (await this.nextEdits.request())) {
      return;
    }
    void vscode.window.showInformationMessage(noNextEditMessage(await this.refresh()));
  }

  /** The Adapt command: `diffusion-lsp adapt` on the workspace folder as a task (its progress in a
   * terminal); once it has written the adapted model, the server is told to look again and answers
   * with it from then on. */
  async adapt(): Promise<void> {
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!folder) {
      void vscode.window.showWarningMessage('Diffusion LSP: open a folder first: adapting learns from its files.');
      return;
    }
    const minutes = await vscode.window.showInputBox({
      title: 'Diffusion LSP: adapt the model to this repository',
      prompt: `Minutes of training on ${folder.name}'s own code, on this machine (its held-out files measure the gain)`,
      value: '10', validateInput: minutesProblem,
    });
    if (minutes === undefined) {
      return;
    }
    const s = this.settings();
    const [command, ...args] = adaptCommand(s.command, folder.uri.fsPath, Number(minutes));
    const task = new vscode.Task({ type: 'diffusionLsp.adapt' }, folder, 'adapt the model to this repository',
      'Diffusion LSP', new vscode.ProcessExecution(command, args, { env: { ...process.env, ...s.env } as Record<string, string>,
        cwd: folder.uri.fsPath }));
    const execution = await vscode.tasks.executeTask(task);
    const done = vscode.tasks.onDidEndTaskProcess(async (e) => {
      if (e.execution !== execution) {
        return;
      }
      done.dispose();
      if (e.exitCode !== 0) {
        void vscode.window.showErrorMessage(`Diffusion LSP: adapting failed (exit ${e.exitCode}); see its terminal.`);
        return;
      }
      if (this.client?.isRunning()) {
        await this.client.sendNotification(DidChangeConfigurationNotification.type,
          { settings: { [SECTION]: this.serverSettings() } });
      }
      void vscode.window.showInformationMessage(
        `Diffusion LSP: adapted to ${folder.name}; completions now come from the adapted model `
        + '(its figures: .diffusion-lsp/model/adapt.json).');
    });
  }

  async toggle(): Promise<void> {
    const on = !this.enabled();
    const c = vscode.workspace.getConfiguration(SECTION);
    await c.update('completion.enable', on, vscode.ConfigurationTarget.Global);
    // on: back to the default (null: next edits only for a model that claims them), not forced on
    await c.update('nextEdit.enable', on ? undefined : false, vscode.ConfigurationTarget.Global);
    if (!on) {
      this.nextEdits.clear();
    }
    void vscode.window.setStatusBarMessage(`Diffusion LSP: completions and next edits ${on ? 'on' : 'off'}`, 3000);
  }

  async showStatistics(): Promise<void> {
    const stats = await this.refresh();
    if (!stats) {
      void vscode.window.showWarningMessage('Diffusion LSP: the server is not running.');
      return;
    }
    const doc = await vscode.workspace.openTextDocument({ language: 'json', content: JSON.stringify(stats, null, 2) });
    await vscode.window.showTextDocument(doc, { preview: true });
  }

  dispose(): void {
    clearInterval(this.poll);
    void this.client?.stop();
    for (const d of [this.nextEdits, this.status, this.log]) {
      d.dispose();
    }
  }
}

let extension: Extension | undefined;

/** What the extension gives other extensions and its tests. */
export interface Api {
  client: () => LanguageClient | undefined;
  stats: () => Promise<Stats | null>;
}

export async function activate(context: vscode.ExtensionContext): Promise<Api> {
  const ext = (extension = new Extension(serverKeys(context.extension.packageJSON)));
  const instruct = new InstructEdits(() => ext.client, () => ext.settings().languages, ext.log);
  void vscode.commands.executeCommand('setContext', VISIBLE_KEY, false);
  context.subscriptions.push(
    ext,
    instruct,
    vscode.workspace.onDidChangeConfiguration((e) => void ext.onConfiguration(e)),
    vscode.commands.registerCommand('diffusionLsp.toggle', () => ext.toggle()),
    vscode.commands.registerCommand('diffusionLsp.restartServer', () => ext.restart()),
    vscode.commands.registerCommand('diffusionLsp.showStatistics', () => ext.showStatistics()),
    vscode.commands.registerCommand('diffusionLsp.openLogs', () => ext.log.show()),
    vscode.commands.registerCommand('diffusionLsp.suggestNextEdit', () => ext.suggestNextEdit()),
    vscode.commands.registerCommand('diffusionLsp.acceptNextEdit', () => ext.nextEdits.accept()),
    vscode.commands.registerCommand('diffusionLsp.dismissNextEdit', () => ext.nextEdits.clear()),
    vscode.commands.registerCommand('diffusionLsp.adapt', () => ext.adapt()),
    // an instruction as the argument skips the input box (a keybinding's args); the context menu passes a uri
    vscode.commands.registerCommand('diffusionLsp.editWithInstruction',
      (instruction?: unknown) => instruct.edit(undefined, typeof instruction === 'string' ? instruction : undefined)),
    vscode.commands.registerCommand('diffusionLsp.acceptProposal', () => instruct.decide(true)),
    vscode.commands.registerCommand('diffusionLsp.rejectProposal', () => instruct.decide(false)),
  );
  await ext.start();
  return { client: () => ext.client, stats: () => ext.refresh() };
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}
