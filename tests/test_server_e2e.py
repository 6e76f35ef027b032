"""`diffusion-lsp serve` end to end: the real server process and its real worker process, driven by
pytest-lsp. The model is the tiny test checkpoint rewired to always predict one word, so answers
are known. Tests wait on notifications and responses, never on a clock."""

from __future__ import annotations

import asyncio
import os
import signal
import stat

import pytest
import pytest_asyncio
import torch
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pytest_lsp import LanguageClient

from test_server_range import SCRIPTED_CLAIMS

from conftest import complete, completion_params, loads_ended, open_doc, start_server, stop_server, within
from diffusion_lsp.model.families.checkpoint import load_checkpoint, save_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
WORD = "foo"  # one token of the test tokenizer
OPTIONS = {"sampling": {"heal": False}, "completion": {"confidenceCut": 0.0, "debounceMs": 0},
           "worker": {"idleExitS": 0}}
CAPS = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=["utf-16", "utf-8"]),
    window=types.WindowClientCapabilities(work_done_progress=True),
    text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities()))


@pytest.fixture(scope="module")
def echo_checkpoint(tiny_checkpoint, tmp_path_factory):
    """Every masked position predicts WORD with p ~ 1: the blocks add nothing (zero output
    projections), so the final hidden state of a mask is its embedding, e0, and only WORD's
    embedding has a first component (and the mask's, which the sampler never predicts)."""
    model, tok, _ = load_checkpoint(tiny_checkpoint)
    (word,) = tok.encode(WORD)
    with torch.no_grad():
        for layer in model.layers:
            layer.attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.embed.weight
        emb[:, 0] = 0
        emb[tok.mask_id] = 0
        emb[tok.mask_id, 0] = 1
        emb[word, 0] = 5
        model.norm.weight.fill_(1)
    return save_checkpoint(tmp_path_factory.mktemp("echo") / "echo", model, tok, extra={"claims": SCRIPTED_CLAIMS})


async def start(model, socket, env=None) -> LanguageClient:
    return await start_server(model, socket, CAPS, OPTIONS, env)


async def stats(client: LanguageClient):
    return await within(client.protocol.send_request_async("diffusionLsp/stats", {}))


def configure(client: LanguageClient, **completion) -> None:
    settings = {**OPTIONS, "completion": {**OPTIONS["completion"], **completion}}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"diffusionLsp": settings}))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(echo_checkpoint, tmp_path_factory):
    client = await start(echo_checkpoint, tmp_path_factory.mktemp("sock") / "worker.sock")
    open_doc(client, "file:///warmup.py", "x = 1\n")
    await loads_ended(client, 1)
    yield client
    await stop_server(client)


async def test_capabilities_advertise_inline_completion_and_utf8(client):
    caps = client.init_result.capabilities
    assert caps.inline_completion_provider
    assert caps.position_encoding == types.PositionEncodingKind.Utf8  # offered second, still chosen
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental


async def test_completion_on_a_non_ascii_line_then_type_ahead_from_the_cache(client):
    line = "s = 'é😀'; x = "
    open_doc(client, "file:///a.py", f"import os\n{line}\n")
    (item,) = await complete(client, "file:///a.py", 1, len(line.encode()))  # UTF-8 columns
    assert item.insert_text.startswith(WORD) and item.range is None
    before = (await stats(client)).counts
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri="file:///a.py", version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(1, len(line.encode())), types.Position(1, len(line.encode()))),
            text="f")]))
    (rest,) = await complete(client, "file:///a.py", 1, len(line.encode()) + 1)
    after = (await stats(client)).counts
    assert rest.insert_text == item.insert_text[1:]
    assert after.cache_hits == before.cache_hits + 1 and after.model_calls == before.model_calls


async def test_feedback_is_counted(client):
    before = (await stats(client)).counts
    client.protocol.notify("textDocument/didShowCompletion", {"item": {"insertText": WORD}})
    client.protocol.notify("textDocument/didPartiallyAcceptCompletion",
                           {"item": {"insertText": WORD}, "acceptedLength": 2})
    await within(client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="diffusionLsp.didAcceptCompletion", arguments=["file:///a.py"])))
    after = (await stats(client)).counts
    assert (after.shown, after.partially_accepted, after.accepted, after.accepted_chars) == (
        before.shown + 1, before.partially_accepted + 1, before.accepted + 1, before.accepted_chars + 2)


@pytest.mark.parametrize("uri, text, language, line, character, reason", [
    ("file:///never-opened.py", None, "python", 0, 0, "unknown document"),
    ("file:///short.py", "x = 1\n", "python", 5, 0, "past the end of the document"),
    ("file:///short2.py", "x = 1\n", "python", 0, 99, "past the end of its line"),
    ("file:///huge.py", "x = [" + "1, " * 40_000 + "\n", "python", 0, 10, "characters"),
    ("file:///blob.py", "x = 1\x00\x01\x02\n", "python", 0, 4, "binary"),
    ("file:///notes.cob", "IDENTIFICATION DIVISION.\n", "cobol", 0, 5, "unsupported language"),
])
async def test_bad_input_is_answered_empty_and_logged(client, uri, text, language, line, character, reason):
    if text is not None:
        open_doc(client, uri, text, language)
    assert await complete(client, uri, line, character) == []
    assert any(reason in m.message for m in client.log_messages), [m.message for m in client.log_messages]


async def test_a_bad_setting_is_shown_and_the_default_kept(client):
    shown = client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
    configure(client, debounceMs="soon")
    message = await within(shown)
    assert "debounceMs" in message.message and "using the default 0" in message.message
    open_doc(client, "file:///b.py", "y = \n")
    assert (await complete(client, "file:///b.py", 0, 4))[0].insert_text.startswith(WORD)


async def test_cancel_request_is_honoured(client):
    configure(client, debounceMs=5000)  # the request waits here, so the cancel surely finds it
    open_doc(client, "file:///c.py", "z = \n")
    before = (await stats(client)).counts
    pending = asyncio.wrap_future(client.protocol.send_request(  # sent now, before the cancel
        types.TEXT_DOCUMENT_INLINE_COMPLETION, completion_params("file:///c.py", 0, 4), msg_id="to-cancel"))
    while (await stats(client)).counts.requests == before.requests:  # until it has reached its debounce
        pass
    client.cancel_request(types.CancelParams(id="to-cancel"))
    with pytest.raises(JsonRpcRequestCancelled):
        await within(pending)
    configure(client)
    assert (await stats(client)).counts.cancelled == before.cancelled + 1


async def test_a_percent_encoded_uri_is_the_same_document(client):
    open_doc(client, "file:///with%20space.py", "w = \n")
    assert (await complete(client, "file:///with%20space.py", 0, 4))[0].insert_text.startswith(WORD)


async def test_a_newer_request_supersedes_an_older_one(client):
    configure(client, debounceMs=300)
    open_doc(client, "file:///d.py", "a = \nb = \n")
    before = (await stats(client)).counts
    older, newer = await asyncio.gather(complete(client, "file:///d.py", 0, 4), complete(client, "file:///d.py", 1, 4))
    configure(client)
    assert older == [] and newer[0].insert_text.startswith(WORD)
    assert (await stats(client)).counts.superseded == before.superseded + 1


async def test_a_second_session_shares_the_running_worker(client, echo_checkpoint):
    first = (await stats(client)).worker
    assert stat.S_IMODE(os.stat(first.socket).st_mode) == 0o600
    other = await start(echo_checkpoint, first.socket)
    try:
        open_doc(other, "file:///s.py", "s = \n")
        await loads_ended(other, 1)
        assert (await complete(other, "file:///s.py", 0, 4))[0].insert_text.startswith(WORD)
        assert (await stats(other)).worker.pid == first.pid
    finally:
        await stop_server(other)


async def test_a_killed_worker_is_reported_once_and_restarted(client):
    report = await stats(client)
    shown = client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
    os.kill(report.worker.pid, signal.SIGKILL)
    assert "restarting" in (await within(shown)).message
    await loads_ended(client, 2)
    open_doc(client, "file:///e.py", "e = \n")
    assert (await complete(client, "file:///e.py", 0, 4))[0].insert_text.startswith(WORD)
    after = await stats(client)
    assert after.worker.pid != report.worker.pid and after.counts.worker_crashes == 1
    assert sum("restarting" in m.message for m in client.messages) == 1


async def test_a_model_that_fails_to_load_is_explained_and_the_server_stays_up(tmp_path):
    client = await start(tmp_path / "no-such-model", tmp_path / "worker.sock")
    try:
        shown = client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
        open_doc(client, "file:///f.py", "f = \n")
        message = await within(shown)
        assert message.type == types.MessageType.Error and "could not load the model" in message.message
        assert await complete(client, "file:///f.py", 0, 4) == []
        assert (await stats(client)).worker.state == "failed"
    finally:
        await stop_server(client)


def settings(client: LanguageClient, **sections) -> None:
    merged = {**OPTIONS, **{k: {**OPTIONS.get(k, {}), **v} for k, v in sections.items()}}
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"diffusionLsp": merged}))


async def test_a_worker_that_stops_answering_gets_a_deadline_and_a_restart(echo_checkpoint, tmp_path):
    client = await start(echo_checkpoint, tmp_path / "worker.sock")
    pid = None
    try:
        settings(client, worker={"fillTimeoutS": 1})
        open_doc(client, "file:///h.py", "h = \n")
        await loads_ended(client, 1)
        pid = (await stats(client)).worker.pid
        os.kill(pid, signal.SIGSTOP)  # the worker hangs: no answer, not even to a ping
        shown = client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
        assert await complete(client, "file:///h.py", 0, 4) == []  # answered at the deadline
        assert "does not answer; restarting it" in (await within(shown)).message
        await loads_ended(client, 2)
        open_doc(client, "file:///i.py", "i = \n")
        assert (await complete(client, "file:///i.py", 0, 4))[0].insert_text.startswith(WORD)
        after = await stats(client)
        assert after.worker.pid != pid and after.counts.fill_timeouts == 1
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        await stop_server(client)


async def test_switching_models_through_did_change_configuration(echo_checkpoint, tmp_path):
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}  # default sockets: one per model
    client = await start(echo_checkpoint, None, env)
    try:
        open_doc(client, "file:///m.py", "m = \n")
        await loads_ended(client, 1)
        assert (await complete(client, "file:///m.py", 0, 4))[0].insert_text.startswith(WORD)
        shown = client.wait_for_notification(types.WINDOW_SHOW_MESSAGE)
        settings(client, model={"path": str(tmp_path / "missing")})
        open_doc(client, "file:///n.py", "n = \n")  # starts the new model's worker
        message = await within(shown)
        assert "could not load the model" in message.message and "missing" in message.message
        assert await complete(client, "file:///n.py", 0, 4) == []
        settings(client, model={"path": str(echo_checkpoint)})
        open_doc(client, "file:///o.py", "o = \n")
        await loads_ended(client, 3)
        assert (await complete(client, "file:///o.py", 0, 4))[0].insert_text.startswith(WORD)
        assert (await stats(client)).worker.state == "ready"
    finally:
        await stop_server(client)
