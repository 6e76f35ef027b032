"""The worker's order mix on a real (tiny) model: fills of several documents being retyped, some with
drafts to verify, joining a running batch, superseded between steps, each starting from its document's
last fill where it lines up (model/decoding/reuse.py). Driven through the engine's FillBatch as the worker drives
it (engine/batch.py), with seeded random orders; and the exact cause of a failure once seen in a user's
log, as its own case."""

from __future__ import annotations

import random
import threading

import pytest
import torch

from diffusion_lsp.protocol.requests import FillRequest
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig

TEXT = ("def area(width, height):\n    result = width * height\n    return result\n\n\n"
        "def volume(width, height, depth):\n    return area(width, height) * depth\n\n\n"
        "class Box:\n    def __init__(self, size):\n        self.size = size\n")
DOCS = ("file:///a.py", "file:///b.py", "file:///c.py")


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    from diffusion_lsp.engine import load_engine

    return load_engine(LaunchSettings(str(tiny_checkpoint), device="cpu", threads=1, precision="fp32"))


def order(rng: random.Random, typed: int, gap: int, sampling: SamplerConfig) -> FillRequest:
    """A fill after TEXT[:typed] before TEXT[gap:] (a line being retyped); half of them with drafts
    (what was there, cut)."""
    candidates = tuple(TEXT[typed : typed + rng.randint(3, 20)] for _ in range(rng.randint(1, 3))
                       ) if rng.random() < 0.5 else ()
    return FillRequest(TEXT[:typed], TEXT[gap:], rng.choice((4, 8, 16)), one_line=rng.random() < 0.5,
                       sampling=sampling, drafts=rng.random() < 0.3, candidates=candidates)


class Typist:
    """Retypes a stretch of each document, a character or two per order (now and then none: the
    same fill asked again)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.typed = {d: rng.randint(20, len(TEXT) - 80) for d in DOCS}
        self.gap = {d: self.typed[d] + rng.randint(20, 60) for d in DOCS}

    def next(self, sampling: SamplerConfig) -> tuple[FillRequest, str]:
        doc = self.rng.choice(DOCS)
        self.typed[doc] = min(self.gap[doc] - 1, self.typed[doc] + self.rng.randint(0, 2))
        return order(self.rng, self.typed[doc], self.gap[doc], sampling), doc


def drive(engine, seed: int, turns: int = 12, max_batch: int = 4) -> list:
    """One batch as the worker runs it: its first orders, then per turn some stopped (superseded or
    cancelled) and some joining while there is room -> every order's answer (a Fill, or None: stopped)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    typist = Typist(rng)
    warm(engine, typist)
    sampling = SamplerConfig(heal=rng.random() < 0.5)
    first = [typist.next(sampling) for _ in range(rng.randint(1, max_batch))]
    stops = [threading.Event() for _ in first]
    fills = engine.batch([o for o, _ in first], [k for _, k in first], stops)
    answers: dict[int, object] = {}
    for turn, _ in enumerate(fills):
        answers.update(fills.finished())
        for i, stop in enumerate(stops):
            if i not in answers and rng.random() < 0.25:
                stop.set()
        room = max_batch - fills.active()
        if turn < turns and room > 0 and rng.random() < 0.6:
            new = [typist.next(sampling) for _ in range(rng.randint(1, room))]
            more = [threading.Event() for _ in new]
            fills.join([o for o, _ in new], [k for _, k in new], more)
            stops += more
    answers.update(fills.finished())
    assert sorted(answers) == list(range(len(stops)))  # every order answered once
    return [answers[i] for i in range(len(stops))]


def warm(engine, typist: Typist) -> None:
    """Each document's last fill remembered, so that the next ones line up with it."""
    for doc in DOCS:
        engine.answer([FillRequest(TEXT[: typist.typed[doc]], TEXT[typist.gap[doc] :], 8)], [doc])


@pytest.mark.parametrize("seed", range(6))
def test_the_workers_order_mix_decodes_every_order(engine, seed):
    answers = drive(engine, seed)
    assert any(a is not None and a.reused for a in answers)  # the mix reuses context
    for a in answers:
        if a is not None:
            assert isinstance(a.text, str) and a.forwards > 0


@pytest.mark.parametrize("drafts", [True, False])
def test_a_row_stopped_before_its_first_pass_from_remembered_context(engine, drafts):
    # a user's log: "Size does not match at dimension 0 expected index [2, 122] to be no larger than
    # self [1, 424]": two rows lined up with their documents' last fills; one left the batch (superseded
    # after its drafts were checked) before the first pass, which still lined up both
    at = {"file:///a.py": 60, "file:///b.py": 120}
    for doc, k in at.items():
        engine.answer([FillRequest(TEXT[:k], TEXT[k + 30 :], 8)], [doc])
    sampling = SamplerConfig(heal=False)
    orders = [FillRequest(TEXT[: k + 1], TEXT[k + 30 :], 8, sampling=sampling,
                          candidates=(TEXT[k + 1 : k + 9],) if drafts else ()) for k in at.values()]
    stops = [threading.Event(), threading.Event()]
    fills = engine.batch(orders, list(at), stops)
    assert fills.decoding.batch.plans is not None  # both rows start from their documents' last fills
    turns = iter(fills)
    if drafts:
        next(turns)  # step 0: the drafts checked, no pass over the rows yet
    stops[0].set()
    fills.decoding.stop(0)
    for _ in turns:
        pass
    answers = dict(fills.finished())
    assert answers[0] is None and answers[1] is not None and answers[1].reused > 0
