"""Which candidate a request shows, if any: one chooser for completions and next edits.

Candidates in (candidate.py), P per candidate from the acceptance model of the request's kind
(model.py, over the features that kind computes: features.py for completions, edits.py for next
edits), and the best one shown when it reaches its bar. Two things the bare maximum would get wrong:
- of the model's fill, offered cut after each of its lines, the most lines whose P holds are shown,
  not only the likeliest cut (a user takes a whole block where each line of it is likely);
- a candidate from the change's own sites (a `followed` source) that the model saw too few of while
  it was fitted (MEASURED) is shown by the rules: the model never learnt to weigh it.
Without an acceptance model the rules decide: the first candidate, so a caller lists its candidates
in the order its rules would show them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..candidate import Candidate, Choice, Source
from .model import AcceptanceModel

MEASURED = 30  # a followed source with fewer candidates in the model's calibration is shown by the rules

Features = Callable[[Candidate, list[Candidate]], dict[str, float]]  # (a candidate, the others) -> its features


def measured(model: AcceptanceModel, source: Source) -> bool:
    """Whether `model` was fitted on at least MEASURED candidates from `source` (its file's
    fitted_on.seen); a model file without those counts judges every source."""
    seen = model.fitted_on.get("seen")
    return not isinstance(seen, dict) or seen.get(source.value, 0) >= MEASURED


def ruled(model: AcceptanceModel, candidate: Candidate) -> bool:
    """Whether `candidate` is shown by the rules though `model` decides: the change's own site from a
    source the model was not measured on."""
    return candidate.source.followed and not measured(model, candidate.source)


def shown_index(model: AcceptanceModel, candidates: Sequence[Candidate], ps: Sequence[float], bar: float) -> int | None:
    """The index of the candidate shown among `candidates` with their P `ps`: the first one `ruled`,
    else the highest P when it reaches `bar` and, when that is the model's, the longest of the model's
    candidates that continue it and reach the bar too; None: nothing is shown."""
    first = next((i for i, c in enumerate(candidates) if ruled(model, c)), None)
    if first is not None:
        return first
    best = max(range(len(ps)), key=ps.__getitem__, default=None)
    if best is None or ps[best] < bar:
        return None
    top = candidates[best]
    if top.source is Source.MODEL:
        longer = [i for i, c in enumerate(candidates) if c.source is Source.MODEL and ps[i] >= bar
                  and c.start == top.start and c.text.startswith(top.text)]
        best = max(longer, key=lambda i: len(candidates[i].text))
    return best


def choose(model: AcceptanceModel | None, candidates: Sequence[Candidate], features: Features,
           show_above: float | None = None) -> Choice:
    """The candidate to show. Without `model`, the rules: the first candidate. With one: `shown_index`
    over each candidate's P from `features`, at the bar `show_above` (None: the model's own)."""
    if model is None:
        return Choice(candidates[0] if candidates else None, None, [])
    feats = [features(c, [x for x in candidates if x is not c]) for c in candidates]
    ps = [model.p(f) for f in feats]
    scored = list(zip(candidates, ps))
    i = shown_index(model, candidates, ps, model.show_above if show_above is None else show_above)
    if i is None:
        return Choice(None, max(ps, default=None), scored)
    return Choice(candidates[i], None if ruled(model, candidates[i]) else ps[i], scored, feats[i])
