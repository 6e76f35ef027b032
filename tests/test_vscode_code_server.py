"""The VS Code extension (editors/vscode) in a real VS Code: code-server (VS Code in the browser,
from npm) with the extension's .vsix installed, driven through headless Debian Chromium by
Playwright (tests/vscode/drive.py, run as a subprocess so its sync API keeps out of
pytest-asyncio's loop).

- inline completion: with the scripted checkpoint of test_server_range.py (after "self." it writes
  "foo(value) + 1"), typing "." shows that ghost text, Tab accepts it, the status bar item says
  "diffusion" with the model loaded and the completion's latency;
- next edit: a parameter renamed (w -> width) is followed to its use on the next line (the scope's
  site, whatever the model: test_server_e2e's echo checkpoint): renaming it draws the next edit by itself; dismissed (Esc) and asked again away from the
  edit (Suggest next edit), it shows the "Tab: next edit" hint, Tab jumps to it and Tab applies it.

Every code-server process runs with its config file, user data, extensions and its own log and
state folders in the test's tmp_path, and with HOME there too, so nothing lands in the user's
~/.config/code-server or ~/.local/share/code-server; a test checks that a session writes nothing
under that HOME.

Screenshots of every stage go to the test's tmp_path and, when DIFFUSION_LSP_SHOTS names a folder,
there too. Needs code-server ($DIFFUSION_LSP_CODE_SERVER, else editors/vscode/.code-server, else
PATH; editors/vscode/scripts/install-code-server.sh installs it, Chromium and playwright), Chromium
and the `playwright` Python package; without any of them the tests skip with the reason."""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_neovim_plugin import AREA, OPTIONS, serve
from test_server_e2e import echo_checkpoint  # noqa: F401 (a fixture)
from test_server_range import SCRIPT, scripted_checkpoint
from test_vscode_extension import EXTENSION, NPM, node_modules, npm  # noqa: F401 (node_modules: a fixture)

DRIVER = Path(__file__).parent / "vscode" / "drive.py"
INSTALL = "editors/vscode/scripts/install-code-server.sh"
LISTENING = re.compile(r"HTTP server listening on (http://127\.0\.0\.1:\d+)/")
DRIVER_TIMEOUT_S = 150
# VS Code settings of every run: no welcome page, trust prompt, telemetry or update checks; ghost
# text on; no auto-save (the web build's default is afterDelay: the test saves with Ctrl+S itself)
SETTINGS = {
    "editor.inlineSuggest.enabled": True,
    "workbench.startupEditor": "none",
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "update.mode": "none",
    "workbench.tips.enabled": False,
    "workbench.enableExperiments": False,
    "extensions.ignoreRecommendations": True,
    "chat.commandCenter.enabled": False,
    "workbench.welcomePage.walkthroughs.openOnInstall": False,
    "files.autoSave": "off",
}


def code_server_binary() -> str | None:
    env = os.environ.get("DIFFUSION_LSP_CODE_SERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    local = EXTENSION / ".code-server" / "node_modules" / ".bin" / "code-server"
    if os.access(local, os.X_OK):
        return str(local)
    return shutil.which("code-server")


def chromium_binary() -> str | None:
    env = os.environ.get("DIFFUSION_LSP_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing() -> list[str]:
    out = []
    if NPM is None or shutil.which("node") is None:
        out.append("node and npm (Debian: apt-get install nodejs npm)")
    if code_server_binary() is None:
        where = os.environ.get("DIFFUSION_LSP_CODE_SERVER")
        out.append(f"code-server ($DIFFUSION_LSP_CODE_SERVER={where} is not executable)" if where else
                   "code-server (not in $DIFFUSION_LSP_CODE_SERVER, editors/vscode/.code-server or PATH: "
                   f"run {INSTALL})")
    if chromium_binary() is None:
        where = os.environ.get("DIFFUSION_LSP_CHROMIUM")
        out.append(f"Chromium ($DIFFUSION_LSP_CHROMIUM={where} is not executable)" if where else
                   f"Chromium (apt-get install chromium, or run {INSTALL})")
    if importlib.util.find_spec("playwright") is None:
        out.append(f"the playwright Python package (pip install playwright, or run {INSTALL})")
    return out


MISSING = missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MISSING), reason="real VS Code test needs " + "; ".join(MISSING))]


@pytest.fixture(scope="module")
def vsix(node_modules, tmp_path_factory) -> Path:  # noqa: F811
    done = npm("run", "package")
    assert done.returncode == 0, done.stdout + done.stderr
    copy = tmp_path_factory.mktemp("vsix") / "diffusion-lsp.vsix"
    shutil.copy(EXTENSION / "diffusion-lsp.vsix", copy)
    return copy


# Where code-server writes by default (env-paths): its config.yaml (written on the first run, even by
# --version), and coder-logs/ and heartbeat in its data folder.
HOME_PATHS = (".config/code-server", ".local/share/code-server")


def private(root: Path) -> tuple[list[str], dict[str, str]]:
    """code-server's flags and environment that keep it under root. The config file and the user data
    (settings, logs, state) are given by flag; its own data folder (coder-logs/, heartbeat) and
    config folder by XDG_DATA_HOME and XDG_CONFIG_HOME. HOME is root/home, so whatever it would still write in a home lands there, where
    code_server_wrote_in_home looks."""
    (root / "home").mkdir(parents=True, exist_ok=True)
    flags = ["--config", str(root / "config.yaml"), "--user-data-dir", str(root / "data")]
    env = {**os.environ, "HOME": str(root / "home"), "XDG_CONFIG_HOME": str(root / "xdg-config"),
           "XDG_DATA_HOME": str(root / "xdg-data")}
    return flags, env


def code_server_wrote_in_home(root: Path) -> list[str]:
    """The paths of HOME_PATHS that a code-server run with private(root) created in its HOME."""
    return [p for p in HOME_PATHS if (root / "home" / p).exists()]


def code_server_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    flags, env = private(root)
    return subprocess.run([code_server_binary(), *flags, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def extensions_dir(vsix, tmp_path_factory) -> Path:
    """An extensions folder (root/extensions) with the .vsix installed by code-server itself."""
    root = tmp_path_factory.mktemp("cs")
    ext = root / "extensions"
    done = code_server_cli(root, "--extensions-dir", str(ext), "--install-extension", str(vsix))
    assert done.returncode == 0 and "successfully installed" in done.stdout, done.stdout + done.stderr
    listed = code_server_cli(root, "--extensions-dir", str(ext), "--list-extensions", "--show-versions")
    assert "diffusion-lsp.diffusion-lsp@" in listed.stdout, listed.stdout + listed.stderr
    return ext


def descendants(pid: int) -> list[int]:
    """Every process below pid (from /proc), children first found first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def ended(ends: dict[int, int], timeout_s: float) -> dict[int, int]:
    """ends ({pidfd: pid}) less the processes that end within timeout_s: a pidfd is readable once its
    process has ended."""
    left, deadline = dict(ends), time.monotonic() + timeout_s
    while left and (remaining := deadline - time.monotonic()) > 0:
        for fd in select.select(list(left), [], [], remaining)[0]:
            left.pop(fd)
    return left


def _signal(pidfd: int, sig: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:  # it has ended
        pass


class CodeServer:
    """code-server on a free port of 127.0.0.1 (--bind-addr :0; the port read from its output, which
    goes on to its log file), kept under root (private(root): config, user data with settings.json,
    logs, HOME) with the shared extensions folder; stop() ends it and every process below it (the
    extension host, the language server, the model worker)."""

    def __init__(self, binary: str, root: Path, extensions: Path, workspace: Path, settings: dict):
        self.root, self.workspace = root, workspace
        flags, env = private(root)
        self.data = root / "data"
        (self.data / "User").mkdir(parents=True)
        (self.data / "User" / "settings.json").write_text(json.dumps(settings, indent=1))
        self.log_path = root / "code-server.log"
        self.stopped = False
        self.proc = subprocess.Popen(
            [binary, *flags, "--auth", "none", "--bind-addr", "127.0.0.1:0", "--disable-telemetry",
             "--disable-update-check", "--disable-workspace-trust", "--extensions-dir", str(extensions),
             str(workspace)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=env, text=True, errors="replace")
        self.heard: queue.Queue[str | None] = queue.Queue()  # the listening line's URL; None: the output ended
        self.copying = threading.Thread(target=self._copy_output, daemon=True)
        self.copying.start()
        self.base = self._wait_listening(60)

    def _copy_output(self) -> None:
        """code-server's output, each line into its log file as it comes; the URL of the line saying
        where it listens is handed to _wait_listening."""
        with self.log_path.open("w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                m = LISTENING.search(line)
                if m:
                    self.heard.put(m.group(1))
        self.heard.put(None)

    def _wait_listening(self, timeout_s: float) -> str:
        try:
            if (base := self.heard.get(timeout=timeout_s)) is not None:
                return base
        except queue.Empty:  # it is still running, and has not said where it listens
            pass
        self.stop()
        raise AssertionError(f"code-server did not start: {self.log_path.read_text()[-3000:]}")

    @property
    def url(self) -> str:
        return f"{self.base}/?folder={self.workspace}"

    def logs(self) -> str:
        """The tail of code-server's log and of the extension's output channel."""
        parts = [f"--- code-server.log\n{self.log_path.read_text()[-3000:]}"]
        for f in sorted(self.data.glob("logs/**/Diffusion LSP.log")):
            parts.append(f"--- {f.relative_to(self.data)}\n{f.read_text()[-4000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        below: dict[int, int] = {}  # {pidfd: pid} of every process below it, each readable once it has ended
        for pid in descendants(self.proc.pid):
            try:
                below[os.pidfd_open(pid)] = pid
            except ProcessLookupError:
                pass
        try:
            for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    pass
                for fd in below:  # also those in a session of their own (the model worker)
                    _signal(fd, sig)
                try:
                    self.proc.wait(wait_s)
                    if sig == signal.SIGTERM:
                        break
                except subprocess.TimeoutExpired:
                    continue
            for fd in ended(below, 5):  # whatever ignored SIGTERM
                _signal(fd, signal.SIGKILL)
        finally:
            for fd in below:
                os.close(fd)
        self.copying.join(5)  # its output ends once every process that held it has



@pytest.fixture
def code_server(extensions_dir, tmp_path):
    """start(server_command, files, extra settings) -> a running CodeServer on tmp_path/ws; all
    stopped at the end of the test."""
    started: list[CodeServer] = []

    def start(command: list[str], files: dict[str, str], extra: dict | None = None) -> CodeServer:
        ws = tmp_path / "ws"
        ws.mkdir()
        for name, text in files.items():
            (ws / name).write_text(text)
        settings = {**SETTINGS, "diffusionLsp.server.command": command, **{
            f"diffusionLsp.{section}.{key}": value for section, values in OPTIONS.items()
            for key, value in values.items()}, **(extra or {})}
        cs = CodeServer(code_server_binary(), tmp_path / "cs", extensions_dir, ws, settings)
        started.append(cs)
        return cs

    (tmp_path / "cs").mkdir()
    yield start
    for cs in started:
        cs.stop()


def drive(cs: CodeServer, tmp_path: Path, name: str, **scenario) -> dict:
    """Run tests/vscode/drive.py against cs -> its result (asserted to have run to its end); the
    screenshots are copied to $DIFFUSION_LSP_SHOTS when set, whatever the outcome."""
    shots = tmp_path / "shots"
    spec = {"url": cs.url, "folder": str(cs.workspace), "shots": str(shots), "result": str(tmp_path / "result.json"),
            "chromium": chromium_binary(), "ready_s": 90, **scenario}
    (tmp_path / "spec.json").write_text(json.dumps(spec, indent=1))
    # Chromium's own files (~/.config/chromium/Crash Reports, caches) go to a HOME of its own too
    home = tmp_path / "browser-home"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache")}
    t0 = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(DRIVER), str(tmp_path / "spec.json")], capture_output=True,
                              text=True, timeout=DRIVER_TIMEOUT_S, env=env)
        out = done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        text = [t.decode(errors="replace") if isinstance(t, bytes) else (t or "") for t in (e.stdout, e.stderr)]
        out = f"the driver ran past {DRIVER_TIMEOUT_S} s: {''.join(text)}"
    finally:
        target = os.environ.get("DIFFUSION_LSP_SHOTS")
        if target and shots.is_dir():
            Path(target).mkdir(parents=True, exist_ok=True)
            for png in shots.glob("*.png"):
                shutil.copy(png, Path(target) / png.name)
    print(f"{name}: the driver took {time.monotonic() - t0:.1f} s\n{out}")
    result_path = tmp_path / "result.json"
    assert result_path.exists(), f"{out[-4000:]}\n{cs.logs()}"
    result = json.loads(result_path.read_text())
    assert result["ok"], f"{result.get('error')}\n{out[-4000:]}\n{cs.logs()}"
    return result


def test_code_server_writes_nothing_in_home(extensions_dir, code_server, tmp_path):
    """Installing the .vsix, and a session in the browser from start to stop, create none of
    HOME_PATHS in the HOME code-server runs with; what it would have put there is in the private
    folders instead (so the check has something to miss)."""
    cs = code_server(["diffusion-lsp", "serve"], {"notes.txt": "nothing to complete\n"})
    drive(cs, tmp_path, "workbench only")  # loads the workbench: the extension host and a connection
    cs.stop()
    for root in (extensions_dir.parent, cs.root):
        written = sorted(str(p.relative_to(root)) for p in (root / "home").rglob("*"))
        assert code_server_wrote_in_home(root) == [], (root, written)
        assert (root / "config.yaml").is_file() and (root / "xdg-data" / "code-server" / "coder-logs").is_dir()
    assert (cs.data / "logs").is_dir() and (cs.data / "User" / "globalStorage").is_dir()
    assert (cs.root / "xdg-data" / "code-server" / "heartbeat").is_file()


def test_inline_completion_ghost_text_accepted_with_tab(code_server, tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    (tmp_path / "sock").mkdir(mode=0o700)  # the worker's socket folder must be private
    text = "def f(self):\n    y = self\n"
    # no time budget for the one-line fill: on a slow machine, under the browser, a fill past it
    # commits the rest at once and the scripted model's text comes out cut
    cs = code_server(serve(model, tmp_path / "sock"), {"sample.py": text},
                     {"diffusionLsp.completion.lineBudgetMs": None})
    c = drive(cs, tmp_path, "completion", completion={
        "file": "sample.py", "line": 1, "type": ".", "expect": SCRIPT[1:], "timeout_s": 30})["completion"]
    # the extension activated on the Python file, started the server, and says the model is loaded
    assert c["ready"]["status"].startswith("diffusion"), c["ready"]
    assert "Model loaded" in c["ready"]["statusLabel"], c["ready"]
    assert "".join(c["ghost"]) == "foo(value) + 1", c  # SCRIPT after "."
    assert c["line_with_ghost"] == "    y = self.foo(value) + 1", c
    assert c["line_after_tab"] == "    y = self.foo(value) + 1" and c["ghost_after_tab"] == [], c
    assert c["saved"] == "def f(self):\n    y = self.foo(value) + 1\n", c
    assert re.fullmatch(r"diffusion \d+ ms", c["status_after"]), c  # the last completion's latency
    assert Path(c["shot_ghost"]).stat().st_size > 10_000


def test_a_next_edit_is_drawn_jumped_to_and_applied(code_server, echo_checkpoint, tmp_path):  # noqa: F811
    (tmp_path / "sock").mkdir(mode=0o700)
    # next edits on explicitly: not every model enables them by default
    cs = code_server(serve(echo_checkpoint, tmp_path / "sock"), {"area.py": AREA},
                     {"diffusionLsp.nextEdit.enable": True})
    n = drive(cs, tmp_path, "next edit", next_edit={
        "file": "area.py", "select": [0, 9, 0, 10], "text": "width", "cursor": [2, 0], "timeout_s": 60})["next_edit"]
    renamed = AREA.replace("area(w,", "area(width,")
    assert n["after_change"] == renamed.split("\n"), n["after_change"]
    # asked for by itself after the change: the rest of the rename, drawn as struck-through "w" and "width"
    auto = n["auto"]
    assert auto["struck"] and any("width" in a for a in auto["after"]), auto
    assert not any(n["dismissed"][k] for k in ("after", "struck")), n["dismissed"]  # Esc
    # asked again from line 3 (Suggest next edit): the edit is elsewhere, so a hint names it
    hints = [a for a in n["shown"]["after"] if "Tab: next edit" in a]
    assert len(hints) == 1, n["shown"]
    m = re.search(r"⇥ Tab: next edit \((?:replace|insert|delete) at lines? (\d+)(?:–\d+)?\)", hints[0])
    assert m, hints
    assert n["shown"]["cursor"] == "Ln 3, Col 1" and any("width" in a for a in n["shown"]["after"])
    # Tab: the cursor jumps to the edit's line; the edit stays drawn, without the hint
    assert n["jumped"]["cursor"].startswith(f"Ln {m.group(1)},"), n["jumped"]
    assert n["jumped"]["struck"] and any("width" in a for a in n["jumped"]["after"]), n["jumped"]
    # Tab again: applied; the parameter's use renamed too, and nothing else changed
    before, after = renamed.split("\n"), n["saved"].split("\n")
    changed = [(i, a) for i, (b, a) in enumerate(zip(before, after)) if a != b]
    assert len(after) == len(before) and changed == [(1, "    return width * h")], (before, after)
    assert int(m.group(1)) == 2
    assert after[0] == "def area(width, h):"
