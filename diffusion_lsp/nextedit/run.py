"""A next-edit plan (suggest.py) run on an in-process engine (diffusion_lsp.engine.Engine, or the
command line's RemoteEngine): what `eval nep` and tests use; the language server drives plans
through its link instead (server/next_edit.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..context.languages import LanguageSpec
from ..server.wire import Fill, ProbeOrder, Probed
from .history import steps_between
from .suggest import DOC_KEY, EditRequest, NextEditSettings, Outcome, Plan, RewriteOrder, plan


@dataclass
class Predicted:
    text: str | None  # the whole file after the edit; None: no edit
    forwards: int
    outcome: Outcome | None


def predict_file(engine, path: str, old: str, current: str, cursor: tuple[int, int], spec: LanguageSpec | None,
                 settings: NextEditSettings = NextEditSettings(), count: Callable[[str], int] | None = None,
                 mode: str | None = None) -> Predicted:
    """The next edit of `current` (after the edits old -> current, one history step per hunk) at
    `cursor`, decoded in process: what `eval nep` asks."""
    steps = steps_between(path, old, current)
    count = count or (lambda t: len(engine.tokenizer.encode(t)))
    req = EditRequest(current, path, cursor, spec, [st.diff() for st in steps], steps[-1] if steps else None,
                      settings, count, mode=mode)
    if hasattr(engine, "rewrite"):
        req.mode = "api"  # a remote API: its edit endpoint
    elif not hasattr(engine, "probe") and (mode or settings.mode) == "refine":
        req.mode = "full"  # an engine that cannot probe
    out = drive(plan(req), engine)
    text = None if out is None or out.edit is None else out.edit.apply(current)
    return Predicted(text, 0 if out is None else out.forwards, out)


def drive(p: Plan, engine) -> Outcome | None:
    """Run a plan on an in-process engine (diffusion_lsp.engine.Engine): evaluation, benchmarks."""
    from ..model.canvas import FillRequest

    answer = None
    try:
        while True:
            order = p.send(answer)
            t0 = time.perf_counter()
            if isinstance(order, ProbeOrder):
                r = engine.probe(order.prefix, order.middle, order.suffix, order.stride, doc=DOC_KEY)
                answer = Probed(r.pieces, r.prob, r.best, r.forwards, r.ms)
            elif isinstance(order, RewriteOrder):
                r = engine.rewrite(order.content, order.max_tokens)
                answer = Fill(r.text, r.pieces, r.confidence, r.ms)
            else:
                r = engine.fill([FillRequest(order.prefix, order.suffix, order.max_tokens, doc=DOC_KEY)],
                                order.sampling)[0]
                answer = Fill(r.text, r.pieces, r.confidence, (time.perf_counter() - t0) * 1e3, r.forwards,
                              end_confidence=getattr(r, "end_confidence", 1.0))
    except StopIteration as stop:
        return stop.value
