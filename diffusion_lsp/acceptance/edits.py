"""What is known of one next-edit candidate (candidate.py), as numbers an acceptance model weighs
(model.py); which one is shown is the one chooser's (chooser.py), over `features_at`.

A candidate is one span of the document and what it becomes, from one source (Request.EDIT.sources):
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
from collections.abc import Callable

from ..candidate import Candidate, Kind, Request, Source


def edit_features(edit: Candidate, doc: str, cursor: int, steps: int,
                  others: list[Candidate] = ()) -> dict[str, float]:
    """The named features of `edit` in `doc` with the cursor at offset `cursor`; `steps`: the
    user's recent edit steps in this document; `others`: the request's other candidates, of which
    those not from the model count as agreeing: so a candidate from the code weighs the same whether
    the model's next edits are on or off. `followed`: one feature for the change's own sites besides
    each source's own, so a source the calibration commits hardly hold (a changed signature's calls)
    weighs as the change's sites do, not as nothing."""
    old = doc[edit.start:edit.end]
    first, last, at = doc.count("\n", 0, edit.start), doc.count("\n", 0, edit.end), doc.count("\n", 0, cursor)
    away = 0 if first <= at <= last else min(abs(first - at), abs(last - at))
    removed, added = old.strip(), edit.text.strip()
    f = {"bias": 1.0, "followed": float(edit.source.followed),
         **{f"source_{s}": float(edit.source is s) for s in Request.EDIT.sources},
         "away": math.log1p(away),
         "lines": math.log1p(last - first + edit.text.count("\n") - old.count("\n")),
         "removed": math.log1p(len(removed)), "added": math.log1p(len(added)),
         "insertion": float(not removed), "deletion": float(not added),
         "conf": edit.confidence if edit.confidence is not None else 0.0,
         "agree": float(any(o.source.kind is not Kind.MODEL and o.same(edit, doc) for o in others)),
         "steps": math.log1p(steps)}
    return f


def features_at(doc: str, cursor: int, steps: int) -> Callable[[Candidate, list[Candidate]], dict[str, float]]:
    """`edit_features` of one request (its document, cursor and the user's recent steps), as the
    chooser asks for them (chooser.Features): (a candidate, the others) -> its features."""
    return lambda edit, others: edit_features(edit, doc, cursor, steps, others)


EDIT_FEATURES = tuple(edit_features(Candidate(0, 0, "x", Source.MODEL), "", 0, 0))  # their order, for a file
