"""diffusionLsp/editWithInstruction: the user selects code and says what to change; the selection is
rewritten by the model (formats/instruct.py, each backend's `instruct`) and answered as the range,
its new text and a WorkspaceEdit, which the editor shows as a diff and applies only on accept.

    params  {"textDocument": {"uri", "version"?}, "range": Range, "instruction": str}
    result  {"range": Range, "newText": str, "edit": WorkspaceEdit}

Errors are LSP errors, not an empty answer (the user asked and waits for one): InvalidParams for an
unknown document, binary content, a bad range, an empty or overlong instruction or a selection past
what the model rewrites at once; ContentModified when the document is not (or no longer) at the
version asked about; RequestCancelled when a newer request for the document supersedes this one;
RequestFailed with the backend's message otherwise. The model sees a window of the file around the
selection (CONTEXT_CHARS each side, cut at line starts) with "\\n" line ends; the answer gets the
document's own line ends and the selection's trailing line breaks. The CPU work (offsets in a large
document, the window) runs in a thread: the event loop only awaits the backend.
`ls` is server.py's DiffusionServer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException, JsonRpcInvalidParams, JsonRpcRequestCancelled

from ..protocol.failure import BackendError, Failure
from ..protocol.requests import InstructRequest
from ..context.languages import language_for
from ..context.tokens import approx_tokens
from ..nextedit.edits import LineEnds
from ..formats.instruct import CONTEXT_CHARS, order_for
from . import positions
from .failures import log_level

METHOD = "diffusionLsp/editWithInstruction"
KEY = "instruct:"  # + the document's uri: a newer request for the document supersedes the older one
Position = tuple[int, int]


@dataclass(frozen=True)
class Asked:
    """The request's params, checked for shape (the document is looked at later)."""

    uri: str
    version: int | None
    start: Position
    end: Position
    instruction: str


@dataclass(frozen=True)
class Selection:
    """What the backend is asked (`order`, over the window with "\\n" line ends), and how its answer
    goes back into the document: the range (normalised LSP positions) and its line ends."""

    order: InstructRequest
    range: tuple[Position, Position]
    line_end: str


def _get(obj, key: str):
    """obj[key] of params pygls left untyped (a dict, or its namedtuple of a dict)."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _position(obj, name: str) -> Position:
    line, character = _get(obj, "line"), _get(obj, "character")
    if obj is None or not _count(line) or not _count(character):
        raise ValueError(f"range.{name} needs a line and a character (integers, 0 or more)")
    return line, character


def parse(params) -> Asked:
    """The params as an Asked; ValueError saying what is missing or malformed."""
    doc, rng, instruction = _get(params, "textDocument"), _get(params, "range"), _get(params, "instruction")
    uri, version = (_get(doc, "uri"), _get(doc, "version")) if doc is not None else (None, None)
    if not isinstance(uri, str):
        raise ValueError("textDocument.uri must be a string")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise ValueError("textDocument.version must be an integer when given")
    if rng is None:
        raise ValueError("range is missing")
    start, end = _position(_get(rng, "start"), "start"), _position(_get(rng, "end"), "end")
    if start > end:
        raise ValueError(f"the range's start {start[0]}:{start[1]} is after its end {end[0]}:{end[1]}")
    if not isinstance(instruction, str):
        raise ValueError("instruction must be a string")
    return Asked(uri, version, start, end, instruction)


def _offset(text: str, pos: Position, encoding: str) -> int:
    offset = positions.offset_at(text, pos[0], pos[1], encoding)
    if offset is None:
        raise ValueError(f"position {pos[0]}:{pos[1]} is past the end of its line or of the document")
    return offset


def window(text: str, start: int, end: int, chars: int = CONTEXT_CHARS) -> tuple[int, int]:
    """(lo, hi): about `chars` of the text on each side of [start, end), cut after a line break
    where one is near (a line longer than `chars` is cut inside)."""
    lo = 0
    if start > chars:
        nl = text.find("\n", start - chars, start)
        lo = nl + 1 if nl >= 0 else start - chars
    hi = len(text)
    if end + chars < len(text):
        nl = text.rfind("\n", end, end + chars)
        hi = nl + 1 if nl >= 0 else end + chars
    return lo, hi


def select(text: str, asked: Asked, encoding: str, comment: str) -> Selection:
    """The order for the asked range of `text`; ValueError for binary content, a range past the end,
    an empty or overlong instruction, or a selection longer than the model rewrites at once."""
    if "\x00" in text:
        raise ValueError("the document holds binary content (NUL bytes)")
    start, end = _offset(text, asked.start, encoding), _offset(text, asked.end, encoding)
    lo, hi = window(text, start, end)
    before = LineEnds(text[lo:start]).unix
    region = LineEnds(text[start:end]).unix
    ends = LineEnds(text[lo:hi])
    order = order_for(ends.unix, len(before), len(before) + len(region), asked.instruction, comment)
    if (n := approx_tokens(order.region)) > order.max_tokens:
        raise ValueError(f"the selection is about {n} tokens, more than the {order.max_tokens} the model rewrites "
                         "at once: select less")
    rng = (positions.position_at(text, start, encoding), positions.position_at(text, end, encoding))
    return Selection(order, rng, ends.end)


def fitted(region: str, answer: str, line_end: str = "\n") -> str:
    """The answer as the region's replacement: ending in the region's own trailing line breaks (a
    model stops anywhere: a selection of whole lines must not swallow the next line's break, nor a
    part of a line gain one), written with the document's line ends."""
    trailing = region[len(region.rstrip("\n")):]
    return (answer.rstrip("\n") + trailing).replace("\n", line_end)


def _range_json(rng: tuple[Position, Position]) -> dict:
    (l0, c0), (l1, c1) = rng
    return {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}


def answer(uri: str, version: int, rng: tuple[Position, Position], new_text: str, versioned: bool) -> dict:
    """The result: the range, its new text, and the edit as a WorkspaceEdit: a versioned text document
    edit for a client that takes documentChanges, else plain changes."""
    text_edit = {"range": _range_json(rng), "newText": new_text}
    edit = ({"documentChanges": [{"textDocument": {"uri": uri, "version": version}, "edits": [text_edit]}]}
            if versioned else {"changes": {uri: [text_edit]}})
    return {"range": text_edit["range"], "newText": new_text, "edit": edit}


def _takes_document_changes(caps: types.ClientCapabilities | None) -> bool:
    workspace = caps.workspace if caps is not None else None
    edit = workspace.workspace_edit if workspace is not None else None
    return bool(edit is not None and edit.document_changes)


def _refusal(error: BackendError) -> JsonRpcException:
    if error.kind is Failure.DROPPED:
        return JsonRpcRequestCancelled(f"superseded by a newer edit request for this document ({error})")
    if error.kind is Failure.INVALID:
        return JsonRpcInvalidParams(f"Invalid params: {error}")
    return JsonRpcException(f"the model could not rewrite the selection: {error}",
                            code=types.LSPErrorCodes.RequestFailed.value)


async def edit_with_instruction(ls, params) -> dict:
    """diffusionLsp/editWithInstruction (the module's docstring has its params, result and errors); `ls`
    is the DiffusionServer (not imported: its module imports this one)."""
    try:
        asked = parse(params)
    except ValueError as e:
        raise JsonRpcInvalidParams(f"Invalid params: {e}") from None
    doc = ls.document(asked.uri)
    if doc is None:
        raise JsonRpcInvalidParams(f"Invalid params: unknown document {asked.uri} (not open in the server)")
    if asked.version is not None and asked.version != doc.version:
        raise JsonRpcContentModified(f"the document is at version {doc.version}, not {asked.version}")
    spec = language_for(doc.language_id, doc.uri)
    try:
        selection = await asyncio.to_thread(select, doc.text, asked, ls.encoding, spec.comment if spec else "#")
    except ValueError as e:
        raise JsonRpcInvalidParams(f"Invalid params: {e}") from None
    backend = ls.session.backend
    try:
        await backend.ready()  # the first request after a start waits for the model, not fails
        fill = await backend.instruct(KEY + doc.uri, selection.order)
    except BackendError as e:
        if e.kind is not Failure.DROPPED:
            ls.session.ui.log(log_level(e), f"no edit from the instruction: {e}")
        raise _refusal(e) from None
    now = ls.document(asked.uri)
    if now is None or now.version != doc.version:
        raise JsonRpcContentModified("the document changed while the model rewrote the selection: ask again")
    new_text = fitted(selection.order.region, fill.text, selection.line_end)
    return answer(asked.uri, doc.version, selection.range, new_text, _takes_document_changes(ls.client_capabilities))
