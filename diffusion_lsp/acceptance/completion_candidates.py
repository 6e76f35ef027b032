"""Every candidate a completion has at a cursor (candidate.py's `Candidate`, each inserting there),
made from the model's fill and the drafts; which one is shown, chooser.py decides.

The candidates: the model's fill as the server cuts it (a fill of several lines also as its first
line, its first two, ...: shown as far as P holds), and each draft from the user's code
(context/drafts.py). A draft the model's fill agrees with carries the fill's token probabilities
(the verifier kept it, or the model wrote the same), and every candidate the verifier's verdict
on the request's drafts."""

from __future__ import annotations

import dataclasses

from ..candidate import Candidate, Source
from ..protocol.answers import Fill, Kept

KEPT = {Kept.WHOLE: "whole", Kept.PART: "part", Kept.REJECTED: "rejected", None: ""}


def fill_conf(fill: Fill, text: str) -> tuple[float, ...]:
    """The probabilities of the fill's tokens that write `text` (the fill's start, as cut)."""
    out, covered = [], 0
    for piece, p in zip(fill.pieces, fill.confidence):
        if covered >= len(text.rstrip()):
            break
        out.append(float(p))
        covered += len(piece)
    return tuple(out)


def offers(cut: Candidate | None, fill: Fill | None, drafts: list[Candidate]) -> list[Candidate]:
    """The candidates: the model's fill as post-processing `cut` it (None: nothing left of it), then
    the drafts, each to the end of its first line and writing over nothing."""
    kept = KEPT[fill.draft.outcome] if fill is not None else ""
    out = []
    if cut is not None and cut.text.strip() and fill is not None:  # a multi-line fill: each of its first lines too
        lines = cut.text.split("\n")
        texts = ["\n".join(lines[:k]) for k in range(1, len(lines)) if "\n".join(lines[:k]).strip()]
        out += [Candidate.at(cut.start, t, Source.MODEL, conf=fill_conf(fill, t), kept=kept) for t in texts]
        out.append(dataclasses.replace(cut, source=Source.MODEL, conf=fill_conf(fill, cut.text), kept=kept))
    model_text = fill.text.split("\n", 1)[0] if fill is not None else None
    for d in drafts:
        text = d.text.split("\n", 1)[0]
        conf = fill_conf(fill, text) if model_text is not None and model_text.rstrip() == text.rstrip() else ()
        out.append(dataclasses.replace(d, text=text, end=d.start, conf=conf, kept=kept))
    return out
