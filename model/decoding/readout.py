"""What is read back from a batch row (batch.py): its draft after a step (CanvasRequest.drafts), its canvas
ids once it is done, and its context remembered for the document's next fill (reuse.py). A result's
per-token pieces are made once from the canvas, in results.py's `result_of`, by incremental decoding minus
the healed text."""

from __future__ import annotations

from .batch import Batch
from ...protocol.answers import Draft
from .results import MASK_GLYPH, Decoded, unhealed
from .reuse import ContextMemo, Entry
from ..network.tokenizer import Tokenizer


def draft_of(batch: Batch, b: int, f: Decoded, tok: Tokenizer, step: int) -> Draft:
    ids = batch.x[b].gather(0, batch.canvas_idx[b, : f.row.length]).tolist()
    if f.req.ends:  # a chat answer ends at its end of turn
        ids = next((ids[:k] for k, t in enumerate(ids) if t in f.req.ends), ids)
    first = next((j for j, t in enumerate(ids) if t == tok.mask_id), len(ids))
    # one decode (not results.text_of's per-token pieces, quadratic in the canvas); a character whose last
    # bytes are still masked is not committed yet, so the committed text stays a prefix of the final
    committed = unhealed(tok.decode([t for t in ids[:first] if t != tok.filler_id]), f.row.healed).rstrip("\ufffd")
    parts, run = [committed], []
    for t in ids[first:]:
        if t == tok.mask_id or t == tok.filler_id:
            if run:
                parts.append(tok.decode(run))
                run = []
            parts.append(MASK_GLYPH if t == tok.mask_id else "")
        else:
            run.append(t)
    if run:
        parts.append(tok.decode(run))
    return Draft(step, committed, "".join(parts), sum(t == tok.mask_id for t in ids))


def canvas_of(batch: Batch, b: int, f: Decoded, tok: Tokenizer) -> list[int]:
    """Batch row b's canvas ids once it is done: masks left by an early stop become fillers, and in a
    one-line row so does everything after the first newline token."""
    ids = [tok.filler_id if t == tok.mask_id else t
           for t in batch.x[b].gather(0, batch.canvas_idx[b, : f.row.length]).tolist()]
    if not f.req.stops_at_line:
        return ids
    newline = set(tok.newline_ids)
    k = 0 if batch.newline_first[b, ids[0]] else next((j for j, t in enumerate(ids) if j and t in newline), len(ids))
    return ids[: k + 1] + [tok.filler_id] * (len(ids) - k - 1)


def remember(memo: ContextMemo, f: Decoded, batch: Batch, b: int) -> None:
    n = len(f.row.ids)
    keys, values = ([t[b, :, :n].clone() for t in tensors] for tensors in (batch.cache.keys, batch.cache.values))
    age = f.plan.entry.age + 1 if f.plan else 0
    memo.put(f.req.doc, Entry(f.row.ids, f.row.start, f.row.length, keys, values, age))
