// The extension's settings: which belong to the extension (how to start the server, when to ask for
// next edits) and which are the server's own (those the user has set are sent as
// initializationOptions and with workspace/didChangeConfiguration). No `vscode` import: tested from
// Node.

import * as fs from 'fs';
import * as path from 'path';

export const SECTION = 'diffusionLsp';
/** Sections of `diffusionLsp.*` that are the extension's; every other section is the server's. */
export const OWN_SECTIONS = ['server', 'client', 'trace'];
export const DEFAULT_COMMAND = ['diffusion-lsp', 'serve'];
export const DEFAULT_LANGUAGES = ['python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'rust', 'go',
  'java', 'c', 'cpp'];

export interface ClientSettings {
  command: string[];
  env: Record<string, string>;
  languages: string[];
  nextEditOnChange: boolean;
  nextEditDelayMs: number;
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The server's settings keys among a package.json's contributed ones ("diffusionLsp.completion.enable"). */
export function serverKeys(manifest: unknown): string[] {
  const props = (manifest as { contributes?: { configuration?: { properties?: Json } } })
    ?.contributes?.configuration?.properties ?? {};
  return Object.keys(props).filter((k) => k.split('.')[0] === SECTION && !OWN_SECTIONS.includes(k.split('.')[1]));
}

/** Where VS Code has a setting's value (`WorkspaceConfiguration.inspect`). */
export interface Inspected {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** The server settings the user has set (the most specific scope wins), nested as the server reads
 * them ({"completion": {"enable": false}}). Defaults are not sent: a setting the user has not set
 * keeps the value of the server's command line (`diffusion-lsp serve --model ...`). */
export function userSettings(keys: string[], inspect: (key: string) => Inspected | undefined): Json {
  const out: Json = {};
  for (const key of keys) {
    const i = inspect(key);
    const value = i?.workspaceFolderValue !== undefined ? i.workspaceFolderValue
      : i?.workspaceValue !== undefined ? i.workspaceValue : i?.globalValue;
    if (value === undefined) {
      continue;
    }
    const parts = key.split('.').slice(1);
    let node = out;
    for (const part of parts.slice(0, -1)) {
      node = (node[part] = isObject(node[part]) ? node[part] : {}) as Json;
    }
    node[parts[parts.length - 1]] = value;
  }
  return out;
}

/** The extension's part, each value checked and defaulted. */
export function clientSettings(all: unknown): ClientSettings {
  const root = isObject(all) ? all : {};
  const server = isObject(root.server) ? root.server : {};
  const client = isObject(root.client) ? root.client : {};
  const strings = (v: unknown) => Array.isArray(v) && v.every((s) => typeof s === 'string');
  const command = strings(server.command) && (server.command as string[]).length > 0
    ? server.command as string[] : DEFAULT_COMMAND;
  const env: Record<string, string> = {};
  if (isObject(server.env)) {
    for (const [k, v] of Object.entries(server.env)) {
      if (typeof v === 'string') {
        env[k] = v;
      }
    }
  }
  const delay = client.nextEditDelayMs;
  return {
    command,
    env,
    languages: strings(client.languages) ? client.languages as string[] : DEFAULT_LANGUAGES,
    nextEditOnChange: typeof client.nextEditOnChange === 'boolean' ? client.nextEditOnChange : true,
    nextEditDelayMs: typeof delay === 'number' && delay >= 0 && delay <= 5000 ? delay : 300,
  };
}

/** Where `command` runs from: a path as given (relative to `cwd`), or the first match on PATH; null
 * when it is not there or not executable. */
export function findExecutable(command: string, envPath: string | undefined, cwd = process.cwd()): string | null {
  const executable = (p: string) => {
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return fs.statSync(p).isFile();
    } catch {
      return false;
    }
  };
  if (command.includes('/') || command.includes(path.sep)) {
    const full = path.resolve(cwd, command);
    return executable(full) ? full : null;
  }
  const exts = process.platform === 'win32' ? ['', '.exe', '.cmd', '.bat'] : [''];
  for (const dir of (envPath ?? '').split(path.delimiter)) {
    for (const ext of exts) {
      const full = path.join(dir || '.', command + ext);
      if (dir && executable(full)) {
        return full;
      }
    }
  }
  return null;
}

/** The message shown when the server command cannot be found. */
export function missingServerMessage(command: string[]): string {
  return `Diffusion LSP: the server command "${command[0]}" was not found. Install the server `
    + '(pip install -e . in a diffusion-lsp checkout) or set diffusionLsp.server.command to its full path, '
    + 'e.g. ["/path/to/venv/bin/diffusion-lsp", "serve"].';
}

/** The command line that adapts the model to the repository at `folder` for `minutes`: the server's
 * command with `serve` and what follows it replaced by `adapt FOLDER` (a `--model DIR` of the
 * server's stays: the model to adapt). */
export function adaptCommand(command: string[], folder: string, minutes?: number): string[] {
  const serve = command.indexOf('serve');
  const head = serve < 0 ? command.slice(0, 1) : command.slice(0, serve);
  const model = serve < 0 ? -1 : command.indexOf('--model', serve);
  return [...head, 'adapt', folder, ...(model >= 0 && model + 1 < command.length ? ['--model', command[model + 1]] : []),
    ...(minutes === undefined ? [] : ['--minutes', String(minutes)])];
}

/** Why a typed number of minutes is not one adapt takes, or null when it is. */
export function minutesProblem(text: string): string | null {
  const n = Number(text);
  return text.trim() !== '' && Number.isFinite(n) && n > 0 && n <= 24 * 60 ? null
    : 'a number of minutes above 0 (10 by default; more minutes adapt better)';
}
