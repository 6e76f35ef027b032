"""Next edits end to end: the real server and worker processes, driven by pytest-lsp. The model is
test_server_e2e's echo checkpoint (every masked position predicts "foo" with p ~ 1), so the model
doubts every token that is not "foo" and rewrites what it re-masks as "foo"s: each suggestion's
shape is known. Tests wait on responses, never on a clock."""

from __future__ import annotations

import asyncio
import re

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcRequestCancelled
from pytest_lsp import LanguageClient

from conftest import loads_ended, open_doc, start_server, stop_server, within
from test_server_e2e import CAPS, WORD, echo_checkpoint  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
NEXT_EDIT = "textDocument/copilotInlineEdit"
ACCEPT = "diffusionLsp.didAcceptNextEdit"
OPTIONS = {"sampling": {"heal": False}, "completion": {"confidenceCut": 0.0, "debounceMs": 0},
           "worker": {"idleExitS": 0},
           "nextEdit": {"maxSpanLines": 1, "minConfidence": 0.5, "follow": False}}  # the model's edits (test_scope: a rename's)
SOURCE = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(echo_checkpoint, tmp_path_factory):  # noqa: F811
    client = await start_server(echo_checkpoint, tmp_path_factory.mktemp("sock") / "worker.sock", CAPS, OPTIONS)
    open_doc(client, "file:///warmup.py", "x = 1\n")
    await loads_ended(client, 1)
    yield client
    await stop_server(client)


def configure(client: LanguageClient, **next_edit) -> None:
    settings = {**OPTIONS, "nextEdit": {**OPTIONS["nextEdit"], **next_edit}}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"diffusionLsp": settings}))


def change(client: LanguageClient, uri: str, version: int, line: int, start: int, end: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, start), types.Position(line, end)), text=text)]))


def params(uri: str, version, line: int, character: int) -> dict:
    return {"textDocument": {"uri": uri, "version": version}, "position": {"line": line, "character": character}}


async def ask(client: LanguageClient, uri: str, version, line: int, character: int, msg_id=None):
    return await within(client.protocol.send_request_async(NEXT_EDIT, params(uri, version, line, character),
                                                          msg_id=msg_id))


async def stats(client: LanguageClient):
    return (await within(client.protocol.send_request_async("diffusionLsp/stats", {}))).next_edit


def apply(text: str, rng, new_text: str) -> str:
    """An LSP edit on ASCII text: (line, character) positions to offsets."""
    lines = text.splitlines(keepends=True)

    def offset(pos):
        return sum(len(s) for s in lines[:pos.line]) + pos.character
    return text[:offset(rng.start)] + new_text + text[offset(rng.end):]


async def edited_doc(client: LanguageClient, uri: str) -> str:
    """Open SOURCE as version 1 and rename the parameter w -> width on line 0 (version 2)."""
    open_doc(client, uri, SOURCE)
    change(client, uri, 2, 0, 9, 10, "width")
    return SOURCE.replace("area(w,", "area(width,")


async def test_an_edit_through_did_change_gets_one_well_formed_edit_that_applies(client):
    uri = "file:///a.py"
    text = await edited_doc(client, uri)
    before = (await stats(client)).counts
    result = await ask(client, uri, 2, 0, 14)
    assert len(result.edits) == 1
    edit = result.edits[0]
    assert edit.textDocument.uri == uri and edit.textDocument.version == 2
    assert edit.command.command == ACCEPT
    assert (edit.range.start.line, edit.range.start.character) <= (edit.range.end.line, edit.range.end.character)
    after = apply(text, edit.range, edit.text)
    # the model doubts every token that is not "foo": one whole line is re-masked and written as foos
    changed = [(a, b) for a, b in zip(text.splitlines(), after.splitlines()) if a != b]
    assert len(changed) == 1 and len(after.splitlines()) == len(text.splitlines())
    assert re.fullmatch(f"({WORD})+", changed[0][1]), changed
    after = (await stats(client)).counts  # the module's server counts every test's requests
    assert (after.requests - before.requests, after.answered - before.answered) == (1, 1)


async def test_a_stale_version_gets_no_edit(client):
    uri = "file:///stale.py"
    await edited_doc(client, uri)
    before = (await stats(client)).counts.stale
    assert (await ask(client, uri, 1, 0, 14)).edits == []
    assert (await stats(client)).counts.stale == before + 1


async def test_full_re_mask_rewrites_the_region(client):
    configure(client, mode="full")
    uri = "file:///full.py"
    text = await edited_doc(client, uri)
    result = await ask(client, uri, 2, 0, 14)
    configure(client)
    assert len(result.edits) == 1
    after = apply(text, result.edits[0].range, result.edits[0].text)
    assert WORD in after and after != text


async def test_show_focus_and_accept_are_counted(client):
    before = (await stats(client)).counts
    client.protocol.notify("textDocument/didShowInlineEdit", {"item": {"command": {"command": ACCEPT}}})
    client.protocol.notify("textDocument/didFocus", {"textDocument": {"uri": "file:///a.py"}})
    await within(client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=ACCEPT, arguments=["file:///a.py", 2])))
    after = (await stats(client)).counts
    assert (after.shown, after.focus, after.accepted) == (before.shown + 1, before.focus + 1, before.accepted + 1)


async def test_the_edit_is_offered_as_a_code_action(client):
    uri = "file:///action.py"
    text = await edited_doc(client, uri)
    actions = await within(client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(types.Position(0, 14), types.Position(0, 14)),
        context=types.CodeActionContext(diagnostics=[]))))
    assert [a.title for a in actions] == ["Apply suggested edit"]
    (edit,) = actions[0].edit.changes[uri]
    after = apply(text, edit.range, edit.new_text)
    assert after != text and WORD in after


async def test_cancel_is_honoured(client):
    configure(client, debounceMs=5000)  # the request waits in its debounce, so the cancel finds it
    uri = "file:///cancel.py"
    await edited_doc(client, uri)
    before = (await stats(client)).counts
    pending = asyncio.wrap_future(client.protocol.send_request(NEXT_EDIT, params(uri, 2, 0, 14), msg_id="ne-cancel"))
    while (await stats(client)).counts.requests == before.requests:
        pass
    client.cancel_request(types.CancelParams(id="ne-cancel"))
    with pytest.raises(JsonRpcRequestCancelled):
        await within(pending)
    configure(client)
    assert (await stats(client)).counts.cancelled == before.cancelled + 1


async def test_bad_params_are_an_error_and_the_server_keeps_serving(client):
    with pytest.raises(JsonRpcInvalidParams):
        await within(client.protocol.send_request_async(NEXT_EDIT, {"textDocument": {"uri": "file:///a.py"}}))
    assert (await ask(client, "file:///not-open.py", 1, 0, 0)).edits == []
    uri = "file:///after.py"
    await edited_doc(client, uri)
    assert len((await ask(client, uri, 2, 0, 14)).edits) == 1


async def test_disabled_next_edit_answers_empty(client):
    configure(client, enable=False)
    uri = "file:///off.py"
    await edited_doc(client, uri)
    result = await ask(client, uri, 2, 0, 14)
    configure(client)
    assert result.edits == []


async def test_an_insertion_at_the_cursor_is_also_an_inline_completion(client):
    uri = "file:///insert.py"
    open_doc(client, uri, "f\n")  # "f" is doubted; its line comes back as foos: "oofoo..." inserted after "f"
    (edit,) = (await ask(client, uri, 1, 0, 1)).edits
    assert (edit.range.start.line, edit.range.start.character) == (edit.range.end.line, edit.range.end.character) == (0, 1)
    items = await within(client.text_document_inline_completion_async(types.InlineCompletionParams(
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(0, 1))))
    assert edit.text in [i.insert_text for i in items.items]
