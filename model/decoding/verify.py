"""Verify drafts on the canvas: what the model believes of a guess is kept, the rest is denoised.

A draft (context/drafts.py: text the user's own code suggests) goes on a request's canvas, and the
model scores each of its tokens where it stands, with most of its neighbours visible (probe.py's
interleaved passes, every candidate of every request in one batch). A draft whose tokens'
geometric-mean probability reaches `draft_accept` is kept whole; otherwise the longest prefix of
tokens the model believes (probability at least `draft_keep`, or the model's own first choice) is.
What is kept is committed as if decoded, each token with its probability as its confidence, and
everything after it stays masked and is denoised as usual. Only a prefix is kept: canvas positions
are fixed, so a token kept after a doubted one would pin the length of what the model writes
between them. A one-line draft ends with a filler (the fill ends there): kept whole, it is the fill,
for the cost of the passes; one rejected at its first token costs them and changes nothing. Among
a request's candidates one kept whole wins, then the one kept furthest.

Why a whole-draft rule: the embedded 3 M-parameter model gives even a right copied token a low
probability (median 0.0008 for the least likely token of a right draft, 0.0001 of a wrong one, on
anyio's held-out files), so token by token it rejects nearly every draft; the geometric mean over
the draft still separates them (median 0.079 right, 0.026 wrong). 0.2 was chosen on the held-out
files of docker and cattrs (tuning packages, never the ones reported): 25 of 464 drafts kept whole,
9 of them right (36%; 9% of all drafts are right), about the precision of the model's own tokens
shown at the editor's confidence cut (34%); 0.1 kept 49, 11 right (22%).

This is speculative decoding's verify step (Leviathan et al. 2023, greedy acceptance) with
prompt-lookup drafts (Saxena 2023), done the diffusion way: the whole draft is judged at once and
what is doubted is re-masked (ReMDM, Wang et al. 2025)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch

from .canvas import Row
from .probe import ScoreRow, score_rows
from ..network.tokenizer import Tokenizer


@dataclass(frozen=True)
class Verdict:
    """What the model made of a request's drafts: the chosen one's tokens, how many of them are kept
    (a prefix), and their probabilities."""

    offered: int  # candidates scored
    tokens: int  # tokens of the chosen candidate
    kept: list[int]  # the kept prefix's token ids
    conf: list[float]  # their probabilities
    passes: int  # forward passes the scoring took


def candidate_ids(tok: Tokenizer, row: Row, text: str, one_line: bool) -> list[int] | None:
    """The canvas ids a draft writes (the healed token re-typed first, at most the canvas's length),
    or None when its first token is not one the healed row allows. A one-line draft is its first
    line followed by a filler where there is room: the fill ends there, and the suffix goes on."""
    if one_line:
        text = text.split("\n", 1)[0]
    ids = tok.encode(row.healed + text)[: row.length]
    if not ids or (row.healed and ids[0] not in row.first_allowed):
        return None
    return ids + [tok.filler_id] if one_line and len(ids) < row.length else ids


def kept_prefix(prob: list[float], best: list[float], keep: float, accept: float) -> int:
    """How many leading tokens the model believes: all of them when their geometric-mean probability
    is at least `accept`, else those up to the first below `keep` that is not its own first choice."""
    if prob and math.exp(sum(math.log(max(p, 1e-12)) for p in prob) / len(prob)) >= accept:
        return len(prob)
    n = 0
    for p, b in zip(prob, best):
        if p < keep and p < b:
            break
        n += 1
    return n


@torch.inference_mode()
def verify(model, tok: Tokenizer, rows: list[Row], candidates: list[tuple[str, ...]], one_line: list[bool],
           stride: int, keep: float, accept: float) -> list[Verdict | None]:
    """Per request (its built row, its draft texts, whether it is one line), the verdict on its best
    draft; None for a request with no draft whose first token fits. All are scored in one batch."""
    scored = []  # (request, the draft's canvas ids, its row)
    for i, (row, texts, line) in enumerate(zip(rows, candidates, one_line)):
        canvas = row.ids[row.start:row.start + row.length]
        for ids in filter(None, (candidate_ids(tok, row, text, line) for text in texts)):
            ids_row = row.ids[:row.start] + ids + canvas[len(ids):] + row.ids[row.start + row.length:]
            scored.append((i, ids, ScoreRow(ids_row, row.start, len(ids))))
    verdicts: list[Verdict | None] = [None] * len(rows)
    if not scored:
        return verdicts
    passes = max(1, min(stride, max(len(ids) for _, ids, _ in scored)))
    prob, best, _ = score_rows(model, tok, [r for *_, r in scored], passes)
    offered = Counter(i for i, *_ in scored)
    for j, (i, ids, _) in enumerate(scored):
        p, b = prob[j, :len(ids)].tolist(), best[j, :len(ids)].tolist()
        n = kept_prefix(p, b, keep, accept)
        mine = verdicts[i]
        if mine is None or (n == len(ids), n) > (len(mine.kept) == mine.tokens, len(mine.kept)):
            verdicts[i] = Verdict(offered[i], len(ids), ids[:n], p[:n], passes)
    return verdicts
