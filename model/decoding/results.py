"""What a decoding gives back: the record kept per request while it decodes (`Decoded`), its
result (`FillResult`, made once by `result_of`: the text by incremental decoding minus the healed
text, `text_of`, and per token the piece it writes), and how a draft after a step shows a masked
position (the draft itself is protocol/answers.py's Draft, one type from the sampler to serve-api's
streams). Shared by the batched sampler (sampler.py) and DreamOn's variable-length decoding (model/families/dreamon.py).
Context reused: reuse.py; drafts verified: verify.py; canvas_of: readout.py; the canvas: canvas.py;
prompts: model/chat/prompting.py."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...protocol.answers import DraftTally, Fill
from .canvas import CanvasRequest, Row
from ..chat.prompting import answer_text
from .reuse import Plan
from ..network.tokenizer import Tokenizer, decode_pieces
from .verify import Verdict


@dataclass
class FillResult(Fill):
    """A fill as a decoding gives it back: the Backend's Fill itself (what the engine answers and the
    worker sends on), with what only the model's side reads. The tokens the model wrote (the re-typed
    healed one included; fillers and a one-line fill's stripped line break not) are `token_ids`, one
    per piece and confidence, at most max_tokens: every count of a fill's tokens (`fim --json`,
    `--batch`, serve-api's usage) is `tokens`, their number."""

    id: object = None
    token_ids: list[int] = field(default_factory=list)
    cancelled: bool = False  # abandoned between steps (Decoding.stop); text is empty
    canvas: list[int] = field(default_factory=list, repr=False)  # all canvas ids, fillers included
    verdict: Verdict | None = None  # what the model made of the request's drafts; None: none offered

    def __post_init__(self):
        self.tokens = len(self.token_ids)
        if self.verdict is not None:
            self.draft = DraftTally(self.verdict.offered, self.verdict.tokens, len(self.verdict.kept))


@dataclass
class Decoded:
    """One request while it is decoded; `result_of` turns it into its FillResult."""

    req: CanvasRequest
    row: Row
    plan: Plan | None = None  # how its row lines up with the document's last fill
    forwards: int = 0
    ms: float = 0.0
    budget_hit: bool = False
    cancelled: bool = False
    canvas: list[int] = field(default_factory=list)  # [N] once done, fillers included
    conf: list[float] = field(default_factory=list)  # [N] once done
    verdict: Verdict | None = None  # its drafts, verified
    row_steps: int = 0  # rows of every step it took part in, added up (continuous batching: they come and go)
    steps: int = 0


MASK_GLYPH = "\u2592"  # how a still-masked position shows in a draft (one per position)


def unhealed(text: str, healed: str) -> str:
    """The text without the healed prefix the fill re-types. Healed blanks the fill re-typed only in
    part (the canvas lets "\n    " be re-typed as "\n   ", its next token bringing the blank) are cut
    as far as they go: the user's blanks stand."""
    if text.startswith(healed) or healed.strip():
        return text[len(healed):] if text.startswith(healed) else text
    common = len(os.path.commonprefix([text, healed]))
    return text[common:]


def text_of(tok: Tokenizer, ids: list[int], healed: str) -> tuple[str, list[str]]:
    """(text, pieces) of the emitted ids: the text without the healed prefix, and per token the part
    of it that token completes. Incremental decoding: a multi-byte character split across tokens
    lands on the token that completes it ("" on the others); the healed text, which the first token
    re-types, is cut from the front."""
    pieces, prev = decode_pieces(tok, ids)
    text = unhealed(prev, healed)
    if "".join(pieces) != prev:  # a decoder that rewrites earlier text: all of it on the first token
        return text, [text] + [""] * (len(ids) - 1)
    cut = len(prev) - len(text)
    for j, piece in enumerate(pieces):
        pieces[j], cut = piece[cut:], max(cut - len(piece), 0)
    return text, pieces


def first_line(text: str, pieces: list[str]) -> tuple[str, list[str]]:
    """A one-line fill's (text, pieces) up to its first line break. `canvas_of` left the token
    that writes the break last; it keeps the text before the break, or goes when it wrote none (a line
    break and the next line's indentation)."""
    nl = text.find("\n")
    if nl < 0:
        return text, pieces
    before = len(text) - len(pieces[-1])
    if before > nl:  # a decoder that rewrites earlier text: all of it on the first token (text_of)
        return text[:nl], [text[:nl]] + pieces[1:]
    last = pieces[-1][: nl - before]
    return text[:nl], pieces[:-1] + ([last] if last else [])


def answer_of(text: str, pieces: list[str], chat: bool, one_line: bool) -> tuple[str, list[str]]:
    """(text, pieces) of a prefix-only model's canvas (its Prompter's): an instruct model's answer
    (`chat`) without its code fence (the answer then one piece), then for a one-line fill the line
    up to its first break, cut at the token that writes it (the decoding did not stop there)."""
    if chat and (answer := answer_text(text, "chat")) != text:
        text, pieces = answer, ([answer] + [""] * (len(pieces) - 1)) if pieces else []
    if one_line and "\n" in text:
        nl, end = text.index("\n"), 0
        k = next(k for k, piece in enumerate(pieces) if (end := end + len(piece)) > nl)
        text, pieces = first_line("".join(pieces[: k + 1]), pieces[: k + 1])
    return text, pieces


def result_of(f: Decoded, tok: Tokenizer) -> FillResult:
    canvas = f.canvas
    if f.req.ends:  # a chat answer ends at its end of turn (the tokens after it are the model's next turns)
        canvas = next((canvas[:k] for k, t in enumerate(canvas) if t in f.req.ends), canvas)
    kept = [(t, c) for t, c in zip(canvas, f.conf) if t != tok.filler_id]
    ids = [t for t, _ in kept]
    text, pieces = text_of(tok, ids, f.row.healed)
    if f.req.chat:
        text, pieces = answer_of(text, pieces, True, f.req.one_line)
        kept = kept[: len(pieces)]
    elif f.req.one_line:
        text, pieces = first_line(text, pieces)
        kept = kept[: len(pieces)]
    return FillResult(text, pieces, [c for _, c in kept], ms=f.ms, forwards=f.forwards,
                      reused=f.plan.reused() if f.plan else 0,
                      end_confidence=max((c for t, c in zip(f.canvas, f.conf) if t == tok.filler_id), default=1.0),
                      batch=f.row_steps / f.steps if f.steps else 1.0, budget_hit=f.budget_hit, id=f.req.id,
                      token_ids=[t for t, _ in kept], cancelled=f.cancelled, canvas=f.canvas, verdict=f.verdict)
