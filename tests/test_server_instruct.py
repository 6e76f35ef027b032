"""diffusionLsp/editWithInstruction: the pure steps (the params, the order over the document's window,
the answer fitted to the selection), then end to end through the real server and worker processes
driven by pytest-lsp over stdio. The model is test_server_e2e's echo checkpoint (every masked position
predicts "foo"), so each answer's shape is known: the selection comes back as "foo"s. The client
offers UTF-16 positions only, LSP's default, so a column counts an emoji as two."""

from __future__ import annotations

import re

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from conftest import loads_ended, open_doc, start_server, stop_server, within
from diffusion_lsp.server.instruct import Asked, answer, fitted, parse, select, window
from test_server_e2e import OPTIONS, WORD, echo_checkpoint  # noqa: F401 (a fixture)

METHOD = "diffusionLsp/editWithInstruction"
REQUEST_FAILED = -32803
SOURCE = "def double(xs):\n    out = []\n    for x in xs:\n        out.append(2 * x)\n    return out\n"
CAPS = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=["utf-16"]),
    window=types.WindowClientCapabilities(work_done_progress=True),
    workspace=types.WorkspaceClientCapabilities(
        workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True)))


def utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def asked(l0: int, c0: int, l1: int, c1: int, instruction: str = "use a list comprehension") -> Asked:
    return Asked("file:///a.py", None, (l0, c0), (l1, c1), instruction)


# ---- the pure steps ----

def test_params_are_checked_for_shape():
    ok = {"textDocument": {"uri": "file:///a.py", "version": 3}, "instruction": "x",
          "range": {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 4}}}
    assert parse(ok) == Asked("file:///a.py", 3, (1, 0), (2, 4), "x")
    def rng(l0, c0, l1, c1):
        return {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}
    bad = [({**ok, "textDocument": {}}, "textDocument.uri"),
           ({**ok, "textDocument": {"uri": "u", "version": True}}, "textDocument.version"),
           ({**ok, "range": None}, "range is missing"),
           ({**ok, "range": rng(-1, 0, 0, 0)}, "range.start"),
           ({**ok, "range": rng(2, 0, 1, 9)}, "after its end"),
           ({**ok, "instruction": None}, "instruction must be a string")]
    for params, why in bad:
        with pytest.raises(ValueError, match=re.escape(why)):
            parse(params)


@pytest.mark.parametrize("encoding, column", [("utf-16", utf16), ("utf-8", lambda s: len(s.encode()))])
def test_the_region_is_found_by_lsp_columns_after_non_ascii_text(encoding, column):
    text = "# é😀\nname = '😀😀'; total = a + b\nprint(total)\n"
    before = "name = '😀😀'; "
    s = select(text, asked(1, column(before), 1, column(before + "total = a + b")), encoding, "#")
    assert s.order.region == "total = a + b"
    assert s.order.prefix == "# é😀\n" + before and s.order.suffix == "\nprint(total)\n"
    assert s.range == ((1, column(before)), (1, column(before + "total = a + b")))


def test_crlf_is_seen_as_lf_and_the_answer_gets_the_documents_line_ends():
    text = "def f(xs):\r\n    out = []\r\n    return out\r\n"
    s = select(text, asked(1, 0, 3, 0), "utf-16", "#")
    assert s.order.region == "    out = []\n    return out\n" and s.order.prefix == "def f(xs):\n"
    assert s.line_end == "\r\n"
    assert fitted(s.order.region, "    return list(xs)", s.line_end) == "    return list(xs)\r\n"


def test_the_answer_keeps_the_selections_trailing_line_breaks():
    assert fitted("    a = 1\n", "    b = 2") == "    b = 2\n"  # whole lines: the next line keeps its own
    assert fitted("    a = 1\n\n", "    b = 2\n") == "    b = 2\n\n"
    assert fitted("a + 1", "b + 2\n") == "b + 2"  # part of a line: no line break gained
    assert fitted("x\n", "") == "\n"


def test_refusals_name_the_problem():
    cases = [("a\x00b\n", asked(0, 0, 0, 1), "binary content"),
             ("x = 1\n", asked(0, 0, 5, 0), "position 5:0 is past the end"),
             ("x = 1\n", asked(0, 0, 0, 9), "position 0:9 is past the end"),
             ("x = 1\n", asked(0, 0, 0, 5, "   "), "the instruction is empty"),
             ("x = 1\n", asked(0, 0, 0, 5, "y" * 2001), "longer than 2000 characters"),
             ("x = 1\n" * 400, asked(0, 0, 400, 0), "select less")]
    for text, a, why in cases:
        with pytest.raises(ValueError, match=re.escape(why)):
            select(text, a, "utf-16", "#")


def test_the_model_sees_a_window_of_a_large_document_cut_at_line_starts():
    text = "x = 1\n" * 100_000
    start = 50_000 * 6
    lo, hi = window(text, start, start + 6, chars=600)
    assert 0 < start - lo <= 600 and 0 < hi - start - 6 <= 600
    assert text[lo - 1] == "\n" and text[hi - 1] == "\n"
    s = select(text, asked(50_000, 0, 50_001, 0), "utf-16", "#")
    assert s.order.region == "x = 1\n" and len(s.order.prefix) + len(s.order.suffix) < 13_000


def test_the_answer_is_a_versioned_edit_for_a_client_that_takes_document_changes():
    rng = ((1, 0), (2, 0))
    r = answer("file:///a.py", 4, rng, "y\n", versioned=True)
    want = {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}}
    assert r["range"] == want and r["newText"] == "y\n"
    assert r["edit"] == {"documentChanges": [{"textDocument": {"uri": "file:///a.py", "version": 4},
                                              "edits": [{"range": want, "newText": "y\n"}]}]}
    assert answer("file:///a.py", 4, rng, "y\n", versioned=False)["edit"] == {
        "changes": {"file:///a.py": [{"range": want, "newText": "y\n"}]}}


# ---- through the real server ----

@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(echo_checkpoint, tmp_path_factory):  # noqa: F811
    client = await start_server(echo_checkpoint, tmp_path_factory.mktemp("sock") / "worker.sock", CAPS, OPTIONS)
    open_doc(client, "file:///warmup.py", "x = 1\n")
    await loads_ended(client, 1)
    yield client
    await stop_server(client)


def params(uri: str, l0: int, c0: int, l1: int, c1: int, instruction: str = "use a list comprehension") -> dict:
    return {"textDocument": {"uri": uri}, "instruction": instruction,
            "range": {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}}


async def ask(client, p: dict):
    return await within(client.protocol.send_request_async(METHOD, p))


def apply_utf16(text: str, rng, new_text: str) -> str:
    """An LSP edit with UTF-16 columns: positions to str offsets, independently of the server's code."""
    lines = text.split("\n")

    def offset(pos) -> int:
        line, units, i = lines[pos.line], 0, 0
        while units < pos.character:
            units += 2 if ord(line[i]) > 0xFFFF else 1
            i += 1
        assert units == pos.character, "a column inside a character"
        return sum(len(s) + 1 for s in lines[:pos.line]) + i
    return text[:offset(rng.start)] + new_text + text[offset(rng.end):]


def the_edit(result, uri: str, version: int):
    (change,) = result.edit.documentChanges
    assert change.textDocument.uri == uri and change.textDocument.version == version
    (edit,) = change.edits
    assert (edit.range, edit.newText) == (result.range, result.newText)
    return edit


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_selection_of_whole_lines_comes_back_rewritten_as_an_edit_that_applies(client):
    uri = "file:///double.py"
    open_doc(client, uri, SOURCE)
    result = await ask(client, params(uri, 1, 0, 4, 0))
    assert (result.range.start.line, result.range.start.character, result.range.end.line,
            result.range.end.character) == (1, 0, 4, 0)
    edit = the_edit(result, uri, 1)
    assert re.fullmatch(f"({WORD})+\n", edit.newText), edit.newText  # the echo model's answer, its line break kept
    after = apply_utf16(SOURCE, edit.range, edit.newText)
    lines = SOURCE.splitlines()
    assert after.splitlines() == [lines[0], edit.newText.rstrip("\n"), lines[4]]


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_non_ascii_text_before_the_range_moves_no_offset(client):
    uri = "file:///emoji.py"
    text = "# é😀 naïve\nname = '😀😀'; total = a + b\nprint(total)\n"
    open_doc(client, uri, text)
    before, line = "name = '😀😀'; ", "name = '😀😀'; total = a + b"
    # the end is the line's end in UTF-16 units: two more than its characters, past the end if counted so
    result = await ask(client, params(uri, 1, utf16(before), 1, utf16(line)))
    assert (result.range.start.character, result.range.end.character) == (utf16(before), utf16(line))
    edit = the_edit(result, uri, 1)
    assert re.fullmatch(f"({WORD})+", edit.newText), edit.newText  # part of a line: no line break gained
    assert apply_utf16(text, edit.range, edit.newText) == f"# é😀 naïve\n{before}{edit.newText}\nprint(total)\n"


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_bad_requests_are_invalid_params_and_the_server_keeps_serving(client):
    uri = "file:///bad.py"
    open_doc(client, uri, SOURCE)
    cases = [(params(uri, 1, 0, 2, 0, "  "), "the instruction is empty"),
             (params("file:///not-open.py", 0, 0, 1, 0), "unknown document file:///not-open.py"),
             (params(uri, 1, 0, 99, 0), "position 99:0 is past the end"),
             (params(uri, 1, 0, 1, 99), "position 1:99 is past the end"),
             (params(uri, 2, 0, 1, 0), "after its end"),
             ({"textDocument": {"uri": uri}, "instruction": "x"}, "range is missing")]
    for p, why in cases:
        with pytest.raises(JsonRpcInvalidParams, match=re.escape(why)):
            await ask(client, p)
    result = await ask(client, params(uri, 4, 0, 5, 0))
    assert re.fullmatch(f"({WORD})+\n", result.newText), result.newText


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_version_the_document_has_left_is_content_modified(client):
    uri = "file:///version.py"
    open_doc(client, uri, SOURCE)
    stale = {**params(uri, 1, 0, 2, 0), "textDocument": {"uri": uri, "version": 7}}
    with pytest.raises(JsonRpcException, match="at version 1, not 7") as e:
        await ask(client, stale)
    assert e.value.code == types.LSPErrorCodes.ContentModified.value


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_backend_that_cannot_answer_is_request_failed_with_its_message(client):
    def configure(settings: dict) -> None:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"diffusionLsp": settings}))

    configure({**OPTIONS, "completion": {**OPTIONS["completion"], "enable": False}})
    uri = "file:///off.py"
    open_doc(client, uri, SOURCE)
    try:
        with pytest.raises(JsonRpcException, match="could not rewrite the selection: .*completions are off") as e:
            await ask(client, params(uri, 1, 0, 2, 0))
        assert e.value.code == REQUEST_FAILED
    finally:
        configure(OPTIONS)
    assert re.fullmatch(f"({WORD})+\n", (await ask(client, params(uri, 1, 0, 2, 0))).newText)
