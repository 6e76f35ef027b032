"""Every candidate the product has at a cursor, and which one (if any) is shown.

The candidates: the model's fill as the server cuts it (a fill of several lines also as its first
line, its first two, ...: shown as far as P holds), and each draft from the user's code
(context/drafts.py). A draft the model's fill agrees with carries the fill's token probabilities
(the verifier kept it, or the model wrote the same). With an acceptance model (model.py) the
candidate with the highest P is shown when P reaches the bar; without one, the rules of before:
the model's fill, cut, is shown whenever something of it is left."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..protocol.answers import Fill, Kept
from ..context.records import Suggestion
from .features import Spot, features
from .model import AcceptanceModel

KEPT = {Kept.WHOLE: "whole", Kept.PART: "part", Kept.REJECTED: "rejected", None: ""}


@dataclass(frozen=True)
class Choice:
    shown: Suggestion | None  # what is shown; None: nothing
    p: float | None  # its P (None: chosen by the rules, no acceptance model)
    scored: list[tuple[Suggestion, float]]  # every candidate with its P (empty under the rules)
    feats: dict | None = None  # the shown candidate's features (None under the rules)


def fill_conf(fill: Fill, text: str) -> tuple[float, ...]:
    """The probabilities of the fill's tokens that write `text` (the fill's start, as cut)."""
    out, covered = [], 0
    for piece, p in zip(fill.pieces, fill.confidence):
        if covered >= len(text.rstrip()):
            break
        out.append(float(p))
        covered += len(piece)
    return tuple(out)


def offers(cut: Suggestion | None, fill: Fill | None, drafts: list[Suggestion]) -> list[Suggestion]:
    """The candidates: the model's fill as post-processing `cut` it (None: nothing left of it), then the drafts."""
    kept = KEPT[fill.draft.outcome] if fill is not None else ""
    out = []
    if cut is not None and cut.text.strip() and fill is not None:  # a multi-line fill: each of its first lines too
        lines = cut.text.split("\n")
        texts = ["\n".join(lines[:k]) for k in range(1, len(lines)) if "\n".join(lines[:k]).strip()]
        out += [Suggestion(t, 0, "model", fill_conf(fill, t), kept=kept) for t in texts]
        out.append(dataclasses.replace(cut, source="model", conf=fill_conf(fill, cut.text), kept=kept))
    model_text = fill.text.split("\n", 1)[0] if fill is not None else None
    for d in drafts:
        text = d.text.split("\n", 1)[0]
        conf = fill_conf(fill, text) if model_text is not None and model_text.rstrip() == text.rstrip() else ()
        out.append(dataclasses.replace(d, text=text, replace_chars=0, conf=conf, kept=kept))
    return out


def choose(model: AcceptanceModel | None, candidates: list[Suggestion], spot: Spot,
           show_above: float | None = None) -> Choice:
    """The candidate to show. With `model`: the highest P, when it reaches `show_above` (None: the
    model's own bar). Without: the model's fill, when there is one."""
    if model is None:
        return Choice(next((o for o in candidates if o.source == "model"), None), None, [])
    feats = [features(o, spot, [x for x in candidates if x is not o]) for o in candidates]
    scored = [(o, model.p(f)) for o, f in zip(candidates, feats)]
    shown = chosen(scored, model.show_above if show_above is None else show_above)
    if shown is None:
        return Choice(None, max((p for _, p in scored), default=None), scored)
    return Choice(scored[shown][0], scored[shown][1], scored, feats[shown])


def chosen(scored: list[tuple[Suggestion, float]], bar: float) -> int | None:
    """The index of the candidate shown among (candidate, P) pairs: the highest P when it reaches
    `bar`, and of the model's fill the most lines whose P holds; None: nothing reaches the bar."""
    best = max(range(len(scored)), key=lambda i: scored[i][1], default=None)
    if best is None or scored[best][1] < bar:
        return None
    if scored[best][0].source == "model":
        longer = [i for i, (o, p) in enumerate(scored) if o.source == "model" and p >= bar
                  and o.text.startswith(scored[best][0].text)]
        best = max(longer, key=lambda i: len(scored[i][0].text))
    return best
