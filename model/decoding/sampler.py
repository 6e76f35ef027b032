"""Masked-diffusion infilling of spans of unknown length, several requests batched together.

Each request becomes a row `prefix | N x mask | suffix` (canvas.py); the rows still decoding are one
`Batch` (batch.py). `Decoding` is a thin loop around one denoising step for the batch (denoise.py
`take_step`): it keeps one record per request (`Decoded`) and drops done rows from the batch; its
caller drives it step by step (drive.py: the drafts after each step come back to it, it stops the
requests nobody waits for any more, and it may add requests, which join the batch after their own
first pass: continuous batching); `fill` drives it to the end. A request with drafts
(CanvasRequest.candidates) has a step 0 first (denoise.py `check_drafts`). What a finished row gives
back (its canvas, its draft, its remembered context) is read in readout.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from . import denoise
from .batch import Batch
from .canvas import CanvasRequest, build_row
from .drive import Turns, run
from .readout import canvas_of, draft_of, remember
from ...protocol.answers import Draft
from .results import Decoded, FillResult, result_of
from .reuse import ContextMemo
from ...protocol.settings import SamplerConfig
from ..network.tokenizer import Tokenizer


class Decoding(Turns):
    """One batch of requests being decoded (a Decoding), driven by its caller: each turn
    of `for drafts in decoding` runs one denoising step (one forward pass for every unfinished row) and gives the
    drafts of the unfinished rows that asked for them (CanvasRequest.drafts) as (request index, Draft);
    `stop(i)` between steps abandons request i (its result is cancelled, the rest of the batch goes
    on); `take_finished()` says which requests ended since it was last asked, `result(i)` gives one.
    It calls nobody back: the worker asks it, step by step.

    Continuous batching: `add(requests)` between steps lets requests join a running batch. At the
    next turn their first step runs as a decoding of its own (a new row needs a full pass, or its
    drafts checked), and once they have their context cache they join the batch and step with the
    rest; a finished row leaves at once, so its place is free for the next one. With a memo, each
    finished row is remembered under its request's `doc`, and when every request of a batch lines
    up with its document's last fill, the first pass starts from those."""

    def __init__(self, model, tok: Tokenizer, requests: list[CanvasRequest], cfg: SamplerConfig | None = None,
                 memo: ContextMemo | None = None):
        self.model, self.tok, self.cfg, self.memo = model, tok, cfg or SamplerConfig(), memo
        self.t0 = time.perf_counter()
        self.stopped: set[int] = set()
        self.fills: list[Decoded] = []
        self.started: list[float] = []  # per request: when it arrived (its time budget and ms count from it)
        self.finished: list[int] = []  # requests that ended since take_finished()
        self.pending: list[tuple[int, Decoding, Iterator]] = []  # joining: (first index, their decoding, its turns)
        if not requests:
            return
        shift = int(model.config.shift_logits)
        if shift and tok.bos_id is None:
            raise ValueError("a model with shifted logits needs a tokenizer with a bos token")
        self.device = next(model.parameters()).device
        self.fills = [Decoded(r, build_row(r, tok, model.config.max_seq_len, self.cfg.heal)) for r in requests]
        self.started = [self.t0] * len(requests)
        self.batch = Batch.build([f.row for f in self.fills], [r.stops_at_line for r in requests], tok,
                                  model.config.vocab_size, shift, self.device)
        self.reuse = memo is not None and self.cfg.use_cache and self.cfg.reuse_context
        plans = [memo.plan(f.req.doc, f.row.ids, f.row.start, f.row.length) for f in self.fills] if self.reuse else []
        if plans and all(plans):  # every row lines up with its document's last fill
            self.batch.plans = plans
            for f, plan in zip(self.fills, plans):
                f.plan = plan

    def add(self, requests: list[CanvasRequest]) -> list[int]:
        """Requests that join between steps -> their indices (after every earlier request's)."""
        if not self.fills:
            raise ValueError("a decoding started without requests cannot be joined")
        first = len(self.fills)
        joining = Decoding(self.model, self.tok, requests, self.cfg, self.memo)
        self.pending.append((first, joining, iter(joining)))
        self.fills += joining.fills
        self.started += joining.started
        return list(range(first, len(self.fills)))

    def stop(self, i: int) -> None:
        """Abandon request i before the next step (between steps: a step always finishes)."""
        self.stopped.add(i)

    def active(self) -> int:
        """Requests neither finished nor stopped yet, joining ones included."""
        return sum(1 for f in self.fills if not f.canvas and not f.cancelled)

    @torch.inference_mode()
    def __iter__(self) -> Iterator[list[tuple[int, Draft]]]:
        if not self.fills:
            return
        model, tok, cfg, fills = self.model, self.tok, self.cfg, self.fills
        step = 0
        if any(f.req.candidates for f in fills):  # step 0: the drafts, verified
            done = denoise.check_drafts(model, tok, self.batch, cfg, fills).tolist()
            passes = [f.verdict.passes if f.verdict else 0 for f in fills]
            yield self._settle(done, passes, step, None)
        while len(self.batch.index) or self.pending:
            drafts = self._join() if self.pending else []
            if self.stopped:
                self._drop_stopped()
            batch = self.batch
            if not len(batch.index):
                if drafts or self.pending:
                    yield drafts
                continue
            greedy = None
            if cfg.time_budget_ms is not None:
                now = time.perf_counter()
                late = [(now - self.started[i]) * 1e3 > cfg.time_budget_ms for i in batch.index.tolist()]
                greedy = torch.tensor(late, device=self.device) if any(late) else None
            done = denoise.take_step(model, tok, batch, cfg, step, greedy).tolist()
            step += 1
            yield drafts + self._settle(done, [1] * len(fills), step, greedy)

    def _join(self) -> list[tuple[int, Draft]]:
        """One turn of every joining decoding; those that have their cache join the batch -> their drafts."""
        drafts, still = [], []
        for first, joining, turns in self.pending:
            for i in self.stopped & set(range(first, first + len(joining.fills))):
                joining.stop(i - first)
            turn = next(turns, None)  # None: that decoding has ended
            ended = turn is None
            drafts += [(first + i, d) for i, d in turn or ()]
            self.finished += [first + i for i in joining.take_finished()]
            batch = joining.batch
            if ended or not len(batch.index):
                continue
            if batch.cache is None and self.cfg.use_cache:  # its drafts were checked: its full pass is next
                still.append((first, joining, turns))
                continue
            batch.index = batch.index + first
            self.batch = self.batch.joined(batch) if len(self.batch.index) else batch
        self.pending = still
        return drafts

    def _settle(self, done: list[bool], passes: list[int], step: int,
                greedy: torch.Tensor | None) -> list[tuple[int, Draft]]:
        """After a step: each batch row took `passes[request]` more forward passes; the done ones are
        finished (and remembered) and leave the batch -> the drafts of the others that asked."""
        batch, fills, tok = self.batch, self.fills, self.tok
        now = time.perf_counter()
        late = [False] * len(done) if greedy is None else greedy.tolist()
        drafts = []
        for b, i in enumerate(batch.index.tolist()):
            f = fills[i]
            f.forwards += passes[i]
            f.row_steps, f.steps = f.row_steps + len(done), f.steps + 1
            if done[b]:
                f.canvas, f.conf = canvas_of(batch, b, f, tok), batch.conf[b, : f.row.length].tolist()
                f.ms, f.budget_hit = (now - self.started[i]) * 1e3, late[b]
                self.finished.append(i)
                if self.reuse and f.req.doc and batch.cache is not None:  # none when its draft was the fill
                    remember(self.memo, f, batch, b)
            elif f.req.drafts:
                drafts.append((i, draft_of(batch, b, f, tok, step)))
        if any(done):
            self._keep([not d for d in done])
        return drafts

    def _drop_stopped(self) -> None:
        rows = [i for i in self.batch.index.tolist() if i in self.stopped]
        if not rows:  # stopped earlier, or still joining: nothing to drop (every field, the cache too, is re-indexed)
            return
        now = time.perf_counter()
        for i in rows:
            self.fills[i].cancelled, self.fills[i].ms = True, (now - self.started[i]) * 1e3
            self.finished.append(i)
        self._keep([i not in self.stopped for i in self.batch.index.tolist()])

    def _keep(self, keep: list[bool]) -> None:
        self.batch.keep(torch.tensor([b for b, k in enumerate(keep) if k], dtype=torch.long, device=self.device))

    def result(self, i: int) -> FillResult:
        return result_of(self.fills[i], self.tok)


@torch.inference_mode()
def fill(model, tok: Tokenizer, requests: list[CanvasRequest], cfg: SamplerConfig | None = None,
         memo: ContextMemo | None = None) -> list[FillResult]:
    """Infill every request to the end (Decoding, driven without stops or drafts)."""
    decoding = Decoding(model, tok, requests, cfg, memo)
    run(decoding)
    return decoding.results()
