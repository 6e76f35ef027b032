"""Turning a fill request into token rows: prefix, a canvas of mask tokens, suffix.

Token healing: when the cursor sits inside a token (`self.fo|`), the prefix's last token is moved
into the canvas and the canvas's first token is constrained to start with its text, so the fill
continues the word instead of starting a new token after a half-typed one. The re-typed token takes
one of the canvas's max_tokens positions: a fill never has more tokens than its request asked for.
A row's context may be reused (reuse.py), its candidates verified (verify.py); model/chat/prompting.py makes
a prefix-only model's prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..network.tokenizer import Tokenizer, fit_context

if TYPE_CHECKING:
    import torch


@dataclass
class CanvasRequest:
    """A fill as the model decodes it: the protocol's FillRequest with what the engine adds (its
    index in the batch, its document, a prefix-only model's prompt, a conversation's end of turn)."""

    prefix: str
    suffix: str = ""
    max_tokens: int = 32  # canvas size N: the fill has at most this many tokens
    id: object = None
    one_line: bool = False  # the fill is the first line only, without its line break: stop once it is written
    doc: str | None = None  # the document: its next fill may reuse this one's context
    drafts: bool = False  # the draft after every denoising step (what sampler.Decoding yields)
    candidates: tuple[str, ...] = ()  # guesses at the fill, verified before decoding
    prompt_ids: list[int] | None = None  # a prefix-only model's whole prompt, made already (Prompter)
    chat: bool = False  # the canvas is an instruct model's answer: results.answer_of keeps its code
    ends: frozenset[int] = frozenset()  # a conversation's answer ends at the first of these (its end of turn)

    @property
    def stops_at_line(self) -> bool:
        """The decoding is done once the first line is written: a one-line fill, but not an instruct
        model's answer, whose code may start after a fence's line (results.answer_of cuts it)."""
        return self.one_line and not self.chat


@dataclass
class Row:
    ids: list[int]  # prefix + canvas (mask ids) + suffix
    start: int  # index of the first canvas position
    length: int  # canvas length
    healed: str = ""  # text of the prefix token moved into the canvas ("" when none)
    first_allowed: list[int] = field(default_factory=list)  # allowed ids at canvas[0] when healing


def _heal(prefix_ids: list[int], tok: Tokenizer) -> tuple[list[int], str, list[int]]:
    if not prefix_ids:
        return prefix_ids, "", []
    typed = tok.decode(prefix_ids[-1:])
    if not typed or "\ufffd" in typed:  # part of a multi-byte character: leave it alone
        return prefix_ids, "", []
    allowed = tok.ids_starting_with(typed)
    if typed.endswith(" ") and not typed.strip():
        # byte-level BPE writes a word after blanks with its space: "\n    return" is "\n   " +
        # " return", so no token that starts with a typed "\n    " goes on with a word; the token one
        # blank shorter may, and the fill's next token re-types the blank (results.unhealed)
        # measured: without it the embedded model indented every fill at an indented empty line 4
        # columns too deep, choosing "\n       " + " self"
        allowed += tok.ids_of_text(typed[:-1]) if len(typed) > 1 else []
    if not allowed:
        return prefix_ids, "", []
    return prefix_ids[:-1], typed, allowed


class DoesNotFit(ValueError):
    """A request that can never fit the model's positions (a canvas or a probed middle too long): a
    problem with the input, the same on every try; the worker answers it "invalid", serve-api 400
    naming `param` where it is known (else the worker names the field its order came in)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def canvas_room(tok: Tokenizer, max_seq_len: int) -> int:
    """The most positions a canvas may have in a row of `max_seq_len`: all but the fixed first token."""
    return max_seq_len - (0 if tok.bos_id is None else 1)


def build_row(req: CanvasRequest, tok: Tokenizer, max_seq_len: int, heal: bool) -> Row:
    """Encode one request; the prefix is cut on the left and the suffix on the right to fit."""
    if req.max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {req.max_tokens}")
    bos = [] if tok.bos_id is None else [tok.bos_id]
    if req.prompt_ids is not None:  # a prefix-only model: its prompt, then the canvas (its Prompter fits it)
        bos = [] if req.prompt_ids[:1] == bos else bos  # a chat template's own bos_token
        room = max_seq_len - req.max_tokens - len(bos)
        if room < 0:
            raise DoesNotFit(f"max_tokens={req.max_tokens} does not fit the model's {max_seq_len} positions "
                             f"(at most {canvas_room(tok, max_seq_len)})")
        prompt = req.prompt_ids[len(req.prompt_ids) - room:] if len(req.prompt_ids) > room else req.prompt_ids
        ids = bos + prompt + [tok.mask_id] * req.max_tokens
        return Row(ids=ids, start=len(bos) + len(prompt), length=req.max_tokens)
    prefix = tok.encode(req.prefix)
    suffix = tok.encode(req.suffix)
    healed, allowed = "", []
    if heal:
        prefix, healed, allowed = _heal(prefix, tok)
    n = req.max_tokens
    room = max_seq_len - n - len(bos)
    if room < 0:
        raise DoesNotFit(f"max_tokens={req.max_tokens} does not fit the model's {max_seq_len} positions "
                         f"(at most {canvas_room(tok, max_seq_len)})")
    prefix, suffix = fit_context(prefix, suffix, room)
    start = len(bos) + len(prefix)
    ids = bos + prefix + [tok.mask_id] * n + suffix
    return Row(ids=ids, start=start, length=n, healed=healed, first_allowed=allowed)


def newline_first_table(tok: Tokenizer, rows: list[Row], newline: torch.Tensor) -> torch.Tensor:
    """[B, V]: which tokens at canvas[0] end the first line. A healed row's first token starts with
    the prefix's last token (maybe "\n\n"): only a newline after that text counts."""
    table = newline.expand(len(rows), -1).clone()
    for i, r in enumerate(rows):
        if r.first_allowed:
            table[i] = False
            table[i, [t for t in r.first_allowed if "\n" in tok.decode([t])[len(r.healed):]]] = True
    return table
