"""What is known of one next-edit candidate, as numbers an acceptance model weighs (model.py), and
which candidate (if any) is shown.

A candidate is one span of the document and what it becomes, from one source:
- rename, signature, argument, imported: the rest of the user's last change at its next sites,
  from the code alone (nextedit/follow.py: a rename through its scope, a changed signature's calls
  in this document or in one that imports it, an argument changed at the analogous calls);
- repeat: the last edit's change made again at its next occurrence (evals/nep_baselines.py's rule);
- model: the next-edit pipeline's edit (nextedit/suggest.py), `draft` when it is the last step made
  again that the model preferred to what stands there, with the model's confidence.
Its features are cheap: where it came from, how far from the cursor, how much it changes, whether
another source proposes the same, and how much the user has just done. Not whether it lies above
the cursor: the commits it is fitted on (evals/edit_replay.py) are replayed top to bottom, so that
would learn the replay, not the user; nor the language: it is fitted on Python alone so far."""

from __future__ import annotations

import math
from dataclasses import dataclass

SOURCES = ("rename", "signature", "argument", "imported", "repeat", "model", "draft")
CODE = SOURCES[:5]  # the candidates from the code alone: all there is while the model's next edits are off
FOLLOWED = SOURCES[:4]  # the change's own sites (a Followed's sources): one feature for all four besides
# each one's own, so a kind the calibration commits hardly hold (a changed signature's calls) weighs
# as the change's sites do, not as nothing
MEASURED = 30  # a source of the change's own sites with fewer candidates in calibration is shown by the rules


@dataclass(frozen=True)
class EditOffer:
    source: str  # one of SOURCES
    start: int  # the span it replaces (str offsets in the document) and what that becomes
    end: int
    text: str
    conf: float | None = None  # the model's confidence (model, draft); None: no model judged it

    def apply(self, doc: str) -> str:
        return doc[:self.start] + self.text + doc[self.end:]

    def same(self, other: EditOffer, doc: str) -> bool:
        return self.apply(doc) == other.apply(doc)


def edit_features(offer: EditOffer, doc: str, cursor: int, steps: int,
                  others: list[EditOffer] = ()) -> dict[str, float]:
    """The named features of `offer` in `doc` with the cursor at offset `cursor`; `steps`: the
    user's recent edit steps in this document; `others`: the request's other candidates, of which
    those from the code (CODE) count as agreeing: so a candidate from the code weighs the same
    whether the model's next edits are on or off."""
    old = doc[offer.start:offer.end]
    first, last, at = doc.count("\n", 0, offer.start), doc.count("\n", 0, offer.end), doc.count("\n", 0, cursor)
    away = 0 if first <= at <= last else min(abs(first - at), abs(last - at))
    removed, added = old.strip(), offer.text.strip()
    f = {"bias": 1.0, "followed": float(offer.source in FOLLOWED),
         **{f"source_{s}": float(offer.source == s) for s in SOURCES},
         "away": math.log1p(away),
         "lines": math.log1p(last - first + offer.text.count("\n") - old.count("\n")),
         "removed": math.log1p(len(removed)), "added": math.log1p(len(added)),
         "insertion": float(not removed), "deletion": float(not added),
         "conf": offer.conf if offer.conf is not None else 0.0,
         "agree": float(any(o.source in CODE and o.same(offer, doc) for o in others)),
         "steps": math.log1p(steps)}
    return f


EDIT_FEATURES = tuple(edit_features(EditOffer("model", 0, 0, "x"), "", 0, 0))  # their order, for a file


@dataclass(frozen=True)
class EditChoice:
    shown: EditOffer | None
    p: float | None  # its P; None: chosen by the rules (no acceptance model)
    scored: list[tuple[EditOffer, float]]


def measured(model, source: str) -> bool:
    """Whether `model` was fitted on at least MEASURED candidates from `source` (its file's
    fitted_on.seen); a model file without those counts judges every source."""
    seen = model.fitted_on.get("seen")
    return not isinstance(seen, dict) or seen.get(source, 0) >= MEASURED


def ruled(model, offer: EditOffer) -> bool:
    """Whether `offer` is shown by the rules though `model` decides: the change's own site from a
    source the model was not measured on."""
    return offer.source in FOLLOWED and not measured(model, offer.source)


def picked(model, offers: list[EditOffer], ps: list[float], bar: float) -> int | None:
    """The index of the candidate shown among `offers` with their P `ps`: the first one `ruled`,
    else the highest P when it reaches `bar`; None: nothing is shown."""
    first = next((i for i, o in enumerate(offers) if ruled(model, o)), None)
    if first is not None:
        return first
    best = max(range(len(ps)), key=ps.__getitem__, default=None)
    return best if best is not None and ps[best] >= bar else None


def choose_edit(model, offers: list[EditOffer], doc: str, cursor: int, steps: int,
                show_above: float | None = None) -> EditChoice:
    """The candidate to show. Without `model`, the rules: the first candidate (the change's own
    sites, then the model's edit). With one (an AcceptanceModel of kind "edit"): `picked`, at
    `show_above` (None: the model's own bar)."""
    if model is None:
        return EditChoice(offers[0] if offers else None, None, [])
    ps = [model.p(edit_features(o, doc, cursor, steps, [x for x in offers if x is not o])) for o in offers]
    i = picked(model, offers, ps, model.show_above if show_above is None else show_above)
    if i is None:
        return EditChoice(None, max(ps, default=None), list(zip(offers, ps)))
    return EditChoice(offers[i], None if ruled(model, offers[i]) else ps[i], list(zip(offers, ps)))
