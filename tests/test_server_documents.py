"""The server's copy of a document (server/documents.py) stays equal to the editor's: incremental
changes applied with the LSP's line ends (\\n, \\r\\n, \\r only), compared with a plain-string
reference over random texts full of the characters str.splitlines also breaks at; out-of-range
edits clamped; and the form-feed scenario that made pygls' copy drift, end to end."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import sys

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from diffusion_lsp.server import documents, positions
from diffusion_lsp.server.documents import SyncedDocument, SyncedWorkspace

# each str.splitlines break that the LSP does not count, the LSP's three, and non-BMP characters
# (two UTF-16 units, four UTF-8 bytes) whose halves a column can point between
PIECES = ["a", "b", "xy", " ", "\t", "\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\n", "\r\n",
          "\r", "é", "€", "😀", "𝔘"]
URI = "file:///doc.py"
TIMEOUT = 60


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(n))


def lsp_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def lines_with_ends(text: str) -> tuple[str, ...]:
    """What pygls' TextDocument.lines holds (str.splitlines(True)), with the LSP's line ends."""
    parts = re.split(r"(\r\n|\r|\n)", text)  # line, break, line, break, ..., last line
    lines = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]
    return tuple(lines + [parts[-1]] if parts[-1] else lines)


def random_position(rng: random.Random, text: str, encoding: str) -> tuple[int, int]:
    """A valid position, sometimes inside a character (offset_at snaps it to the character's start)."""
    lines = lsp_lines(text)
    line = rng.randrange(len(lines))
    return line, rng.randint(0, positions.units(lines[line], encoding))


def reference_edit(text: str, start: tuple[int, int], end: tuple[int, int], new: str, encoding: str) -> str:
    a, b = positions.offset_at(text, *start, encoding), positions.offset_at(text, *end, encoding)
    return text[:a] + new + text[b:]


def change(start: tuple[int, int], end: tuple[int, int], text: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(*start), types.Position(*end)), text=text)


def workspace(text: str, encoding: str) -> tuple[SyncedWorkspace, SyncedDocument]:
    ws = SyncedWorkspace(None, types.TextDocumentSyncKind.Incremental, None, encoding)
    ws.put_text_document(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text))
    return ws, ws.text_documents[URI]


def update(ws: SyncedWorkspace, *changes, version: int = 2) -> None:
    for c in changes:
        ws.update_text_document(types.VersionedTextDocumentIdentifier(uri=URI, version=version), c)


@pytest.mark.parametrize("encoding", [positions.UTF16, positions.UTF8])
def test_random_edits_match_a_plain_string_reference(encoding):
    for seed in range(150):
        rng = random.Random(seed)
        text = random_text(rng, rng.randrange(60))
        ws, doc = workspace(text, encoding)
        for step in range(25):
            if rng.random() < 0.05:
                text = random_text(rng, rng.randrange(40))
                update(ws, types.TextDocumentContentChangeWholeDocument(text=text), version=step + 2)
            else:
                start, end = random_position(rng, text, encoding), random_position(rng, text, encoding)
                if positions.offset_at(text, *end, encoding) < positions.offset_at(text, *start, encoding):
                    start, end = end, start
                new = random_text(rng, rng.choice([0, 1, 1, 3]))
                text = reference_edit(text, start, end, new, encoding)
                update(ws, change(start, end, new), version=step + 2)
            assert doc.source == text, (seed, step)
            assert doc.version == step + 2
            assert doc.lines == lines_with_ends(text), (seed, step)


def test_lines_and_pygls_helpers_break_only_where_the_lsp_does():
    _, doc = workspace("a\fb\u2028c\r\nd\re\n", positions.UTF16)
    assert doc.lines == ("a\fb\u2028c\r\n", "d\r", "e\n")
    assert doc.offset_at_position(types.Position(1, 1)) == len("a\fb\u2028c\r\nd")
    assert doc.word_at_position(types.Position(2, 0)) == "e"


@pytest.mark.parametrize("start, end, new, expected, why", [
    ((0, 9), (0, 9), "X", "abX\ncd", "a column past the end of its line is the line's end (LSP Position)"),
    ((7, 0), (9, 3), "X", "ab\ncdX", "a line past the last is the end of the text"),
    ((1, 1), (0, 1), "", "ad", "an inverted range is put in order"),
    ((0, 1), (5, 0), "", "a", "an end past the text cuts to the end"),
])
def test_a_range_outside_the_text_is_clamped_with_one_log_line(caplog, start, end, new, expected, why):
    ws, doc = workspace("ab\ncd", positions.UTF16)
    with caplog.at_level(logging.WARNING, logger=documents.__name__):
        update(ws, change(start, end, new))
    assert doc.source == expected, why
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]


def test_a_change_to_a_document_that_is_not_open_is_logged_and_dropped(caplog):
    ws, doc = workspace("x = 1\n", positions.UTF16)
    with caplog.at_level(logging.WARNING, logger=documents.__name__):
        ws.update_text_document(types.VersionedTextDocumentIdentifier(uri="file:///other.py", version=2),
                                change((0, 0), (0, 0), "y"))
    assert doc.source == "x = 1\n" and list(ws.text_documents) == [URI]
    assert "not open" in caplog.text


def test_typing_scans_from_the_edited_line_and_never_splits_the_text(monkeypatch):
    """Behaviour, not timing: after the first keystroke on a line, the next ones look for that line
    from where it starts, not from the top, and nothing splits the whole text into lines."""
    text = "".join(f"line {i}\f\n" for i in range(5000))
    ws, doc = workspace(text, positions.UTF16)
    scanned = []
    real = positions.line_span
    monkeypatch.setattr(positions, "line_span", lambda t, line: scanned.append((len(t), line)) or real(t, line))
    monkeypatch.setattr(SyncedDocument, "lines", property(lambda self: pytest.fail("split into lines")))
    for i in range(20):
        update(ws, change((4000, 10 + i), (4000, 10 + i), "x"))
    assert doc.source == text.replace("line 4000\f", "line 4000\f" + "x" * 20)
    assert scanned[0] == (len(text), 4000)  # the first from the top
    assert all(line == 0 and n < len(doc.source) / 4 for n, line in scanned[1:])  # then from line 4000


# ---- end to end: the real server process, no model needed ----

@pytest_asyncio.fixture
async def client(tmp_path):
    command = [sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(tmp_path / "no-model"),
               "--worker-socket", str(tmp_path / "worker.sock")]
    client = await ClientServerConfig(server_command=command).start()
    await asyncio.wait_for(client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(general=types.GeneralClientCapabilities(position_encodings=["utf-16"])),
        initialization_options={"completion": {"debounceMs": 0}, "worker": {"idleExitS": 0}})), TIMEOUT)
    yield client
    await asyncio.wait_for(client.shutdown_session(), TIMEOUT)
    await client.stop()


async def refusals(client: LanguageClient, line: int, character: int) -> list[str]:
    """The log lines that say why (line, character) got no completion."""
    before = len(client.log_messages)
    await asyncio.wait_for(client.text_document_inline_completion_async(types.InlineCompletionParams(
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line, character))), TIMEOUT)
    return [m.message for m in client.log_messages[before:] if "past the end" in m.message]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_an_edit_below_a_form_feed_keeps_the_servers_copy_right(client):
    """pygls' copy became "a = 1\\fdef f(x):bbbbb\\n" (it saw three lines where the editor has two),
    so 1:9 was "past the end of its line". The line ends the server now sees are probed by the
    positions just past them."""
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=URI, language_id="python", version=1, text="a = 1\f\nbbbbb\n")))
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
        content_changes=[change((1, 0), (1, 5), "def f(x):")]))
    assert await refusals(client, 1, 9) == []  # the copy is "a = 1\f\ndef f(x):\n"
    assert await refusals(client, 1, 10) == ["no completion: position 1:10 is past the end of its line"]
    assert await refusals(client, 0, 7) == ["no completion: position 0:7 is past the end of its line"]
    assert await refusals(client, 3, 0) == ["no completion: position 3:0 is past the end of the document"]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_change_not_newer_than_the_document_is_dropped_and_said(client):
    """v1 -> v5 -> v3: pygls took the copy back to v3's text, silently, and next edits then took it
    as current. A change must carry a newer version; an older or repeated one is dropped."""
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=URI, language_id="python", version=1, text="abc\n")))

    def edit(version: int, text: str) -> None:
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=version),
            content_changes=[change((0, 0), (0, 3), text)]))

    edit(5, "abcdefgh")  # the copy is "abcdefgh\n"
    edit(3, "x")  # older: dropped (applied, the copy would be "xdefgh\n")
    edit(5, "y")  # as old: dropped
    assert await refusals(client, 0, 9) == ["no completion: position 0:9 is past the end of its line"]
    assert await refusals(client, 0, 8) == []  # still 8 characters long: v5's text
    dropped = [m.message for m in client.log_messages if "dropped a change" in m.message]
    assert dropped == [f"dropped a change: {URI} is at version 5; a change to version 3 is not newer",
                       f"dropped a change: {URI} is at version 5; a change to version 5 is not newer"]
