"""DreamOn's variable-length infilling: the span grows and shrinks while it is decoded.

DreamOn-v0-7B (HKU NLP, "Diffusion Language Models For Code Infilling Beyond Fixed-Size Canvas") is a Dream
checkpoint whose vocab has an expand token. Its decoding (the public eval code's
`batch_generate_with_expand_as_token`, greedy, one position per step) is reproduced here:

- the window is `bos + prefix + min_gen_len x mask + suffix + eos`; positions count its tokens only. The
  reference pads it on the right with masks that nothing attends to; their outputs are never read and no
  attended token sees them, so running the window alone gives the same logits;
- each step is one full forward pass. Output i - 1 predicts token i (Dream's shift). Of the masked middle
  positions, the single most confident one is committed with its argmax token ("maskgit_plus"). The
  expand logit is blocked once the middle is at its largest or the expand budget is spent;
- a committed `<|expand|>` becomes two masks: the middle grows by one, the budget shrinks by one;
- a committed end-of-text token at a masked position k deletes k and every middle position after k that
  was still masked (the reference's default `pad_eos_to_right` followed by `delete_eos_token`: training puts
  end-of-text tokens only at the end of the middle, so one means the span ends there);
- the fill is done when no masked position is left; it is the middle decoded without special tokens.

The middle starts at `MIN_GEN_LEN` masks and grows to the request's max_tokens at most; the expand budget is
max_tokens (the reference's max_gen_len). Semi-autoregressive blocks do not map onto a canvas that changes
length, and neither do the parallel policies nor the context cache: DreamOn commits one position per step
over the whole window, with a full forward pass each time, and `SamplerConfig`'s policy, block_size and cache
fields are not used. What is honoured: `heal` (canvas[0] must start with the healed text, as in model/decoding/denoise.py's
`_constraint`), `time_budget_ms` (past it, every masked position is committed in one greedy step with the
expand token blocked), `confidence_cut`, `one_line` (done once a committed newline has no mask before it) and
`Decoding.stop` (the request is abandoned between steps). Requests are decoded one after another;
`VariableDecoding` is driven as model/decoding/sampler.py's `Decoding` is (no drafts: the canvas changes size).
Its decoding is model/decoding/drive.py's Decoding; `canvas_of` is model/decoding/readout.py's; pretrained.py names the token.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from ..decoding.canvas import CanvasRequest, build_row, newline_first_table
from ..decoding.drive import Turns, run
from ..decoding.results import Decoded, FillResult, result_of
from ...protocol.settings import SamplerConfig
from ..network.tokenizer import Tokenizer

MIN_GEN_LEN = 4  # masks the middle starts with: DreamOn's eval config (eval/configs/eval_infill.yaml)


def expands(tok) -> bool:
    """Whether the tokenizer has DreamOn's expand token (the loader names it "expand")."""
    return "expand" in tok.special.extra


def expand_blocked(length: int, limit: int, budget: int) -> bool:
    """The expand token may not be predicted: the middle is at its largest or no expansion is left."""
    return length >= limit or budget <= 0


def constrain(logits: torch.Tensor, cols: list[int], tok: Tokenizer, allowed_first: torch.Tensor | None,
              block_expand: bool) -> torch.Tensor:
    """logits [M, V] at middle columns cols: never mask/bos; no expand when blocked; with token healing
    (allowed_first [V] bool), canvas[0] must start with the typed text."""
    logits = logits.float()
    banned = [i for i in (tok.mask_id, tok.bos_id) if i is not None]
    banned += [tok.id_of("expand")] if block_expand else []
    logits[:, banned] = float("-inf")
    if allowed_first is not None and 0 in cols:
        j = cols.index(0)
        logits[j] = logits[j].masked_fill(~allowed_first, float("-inf"))
    return logits


def choose(logits: torch.Tensor, cols: list[int], greedy: bool) -> list[tuple[int, int, float]]:
    """(column, token, probability) to commit: the most confident masked position (maskgit_plus with one
    transfer per step), or every one of them when greedy. logits: [M, V]."""
    p, pred = logits.softmax(-1).max(-1)  # [M]
    picked = range(len(cols)) if greedy else [int(p.argmax())]
    return [(cols[j], int(pred[j]), float(p[j])) for j in picked]


def commit(middle: list[int], conf: list[float], commits) -> tuple[list[int], list[float]]:
    middle, conf = list(middle), list(conf)
    for col, token, p in commits:
        middle[col], conf[col] = token, p
    return middle, conf


def delete_ended(middle: list[int], conf: list[float], was_masked: list[bool],
                 eos: int) -> tuple[list[int], list[float]]:
    """An end-of-text token committed at a position k that was masked deletes k and every later position
    that was masked before this step (pad_eos_to_right, then delete_eos_token)."""
    k = next((j for j, (t, m) in enumerate(zip(middle, was_masked)) if m and t == eos), None)
    if k is None:
        return middle, conf
    keep = [j for j in range(len(middle)) if j < k or not was_masked[j]]
    return [middle[j] for j in keep], [conf[j] for j in keep]


def expand(middle: list[int], conf: list[float], expand_id: int, mask: int) -> tuple[list[int], list[float], int]:
    """Each committed expand token becomes two masks -> (middle, conf, how many expanded)."""
    out, out_conf, grown = [], [], 0
    for t, p in zip(middle, conf):
        if t == expand_id:
            out += [mask, mask]
            out_conf += [0.0, 0.0]
            grown += 1
        else:
            out.append(t)
            out_conf.append(p)
    return out, out_conf, grown


def settled(middle: list[int], hit: list[bool], mask: int) -> bool:
    """Some committed position where `hit` holds has no masked position before it: nothing decoded later
    can change the fill up to there (`_settled` on one row)."""
    first_mask = next((j for j, t in enumerate(middle) if t == mask), len(middle))
    return any(hit[:first_mask])


def newline_hits(middle: list[int], newline: set[int], newline_first: set[int]) -> list[bool]:
    """Which middle tokens end a line; at canvas[0] a healed token counts only past the healed text."""
    return [t in (newline_first if j == 0 else newline) for j, t in enumerate(middle)]


def is_done(middle: list[int], conf: list[float], tok: Tokenizer, one_line: bool, newline: set[int],
            newline_first: set[int], confidence_cut: float) -> bool:
    """Nothing is masked; or a one-line fill's first line is written; or its first real token below
    confidence_cut is settled (the caller drops the fill from it)."""
    if tok.mask_id not in middle:
        return True
    if one_line and settled(middle, newline_hits(middle, newline, newline_first), tok.mask_id):
        return True
    if confidence_cut > 0:
        low = [t not in (tok.mask_id, tok.filler_id) and c < confidence_cut for t, c in zip(middle, conf)]
        return settled(middle, low, tok.mask_id)
    return False


def final_canvas(middle: list[int], tok: Tokenizer, one_line: bool, newline: set[int],
                 newline_first: set[int]) -> list[int]:
    """Masks left by an early stop become fillers, and in a one-line fill so does everything after the
    first newline token (`canvas_of`)."""
    ids = [tok.filler_id if t == tok.mask_id else t for t in middle]
    if not one_line:
        return ids
    hits = newline_hits(ids, newline, newline_first)
    k = next((j for j, h in enumerate(hits) if h), len(ids))
    return ids[: k + 1] + [tok.filler_id] * (len(ids) - k - 1)


def _logits_at(model, window: list[int], cols: list[int], start: int, shift: int, device) -> torch.Tensor:
    """One full forward pass over the window -> logits [M, V] of middle columns cols (with shifted
    logits, output i - 1 predicts token i)."""
    x = torch.tensor([window], device=device)  # [1, W]
    positions = torch.arange(x.shape[1], device=device)[None]  # [1, W]
    h, _ = model.hidden(x, positions, torch.ones_like(x, dtype=torch.bool))  # [1, W, D]
    at = torch.tensor([start + c - shift for c in cols], device=device)
    return model.logits(h[0, at])  # [M, V]


def _decode(model, tok: Tokenizer, req: CanvasRequest, cfg: SamplerConfig, f: Decoded, stopped: set[int], i: int,
            t0: float, shift: int, device) -> Iterator[None]:
    """Request i, one committed position per step (the module docstring's loop), into `f`; yields
    after every step, and abandons the request once `i` is in `stopped`."""
    row = build_row(req, tok, model.config.max_seq_len - 1, cfg.heal)  # - 1: the eos after the suffix
    mask, eos, expand_id = tok.mask_id, tok.id_of("eos"), tok.id_of("expand")
    limit, budget = row.length, req.max_tokens  # the middle's largest length; expansions left
    middle = [mask] * min(MIN_GEN_LEN + (1 if row.healed else 0), limit)
    conf = [0.0] * len(middle)
    head, tail = row.ids[: row.start], row.ids[row.start + row.length:] + [eos]
    allowed_first = None
    if row.first_allowed:
        allowed_first = torch.zeros(model.config.vocab_size, dtype=torch.bool, device=device)
        allowed_first[row.first_allowed] = True
    newline, newline_first = set(), set()
    if req.one_line:
        table = torch.zeros(model.config.vocab_size, dtype=torch.bool)
        table[tok.newline_ids] = True
        newline = set(tok.newline_ids)
        newline_first = set(newline_first_table(tok, [row], table)[0].nonzero().flatten().tolist())
    f.row = row
    # each step lowers (masked positions + 2 x expansions left) by at least one: this many steps end it
    for _ in range(len(middle) + 2 * budget):
        if is_done(middle, conf, tok, req.one_line, newline, newline_first, cfg.confidence_cut):
            break
        if f.forwards and i in stopped:  # between steps, as sampler.Decoding does
            f.cancelled, f.ms = True, (time.perf_counter() - t0) * 1e3
            return
        greedy = cfg.time_budget_ms is not None and (time.perf_counter() - t0) * 1e3 > cfg.time_budget_ms
        cols = [j for j, t in enumerate(middle) if t == mask]
        logits = _logits_at(model, head + middle + tail, cols, len(head), shift, device)
        f.forwards += 1
        blocked = greedy or expand_blocked(len(middle), limit, budget)
        logits = constrain(logits, cols, tok, allowed_first, blocked)
        was_masked = [t == mask for t in middle]
        middle, conf = commit(middle, conf, choose(logits, cols, greedy))
        middle, conf = delete_ended(middle, conf, was_masked, eos)
        middle, conf, grown = expand(middle, conf, expand_id, mask)
        budget -= grown
        f.budget_hit = f.budget_hit or greedy
        yield
    f.canvas = final_canvas(middle, tok, req.one_line, newline, newline_first)
    f.conf, f.ms = conf, (time.perf_counter() - t0) * 1e3


class VariableDecoding(Turns):
    """DreamOn's decoding of `requests` (a Decoding), one after another: each turn
    of the loop is one step (no drafts: []), `stop(i)` abandons request i, `results()` at the end.
    time_budget_ms counts from its start, as sampler.Decoding's does for its batch."""

    joins = False  # one request at a time: nothing to join

    def __init__(self, model, tok: Tokenizer, requests: list[CanvasRequest], cfg: SamplerConfig | None = None):
        if not expands(tok):
            raise ValueError("VariableDecoding needs a tokenizer with DreamOn's expand token (special token 'expand')")
        if model.config.shift_logits and tok.bos_id is None:
            raise ValueError("a model with shifted logits needs a tokenizer with a bos token")
        self.model, self.tok, self.requests, self.cfg = model, tok, requests, cfg or SamplerConfig()
        self.t0 = time.perf_counter()
        self.stopped: set[int] = set()
        self.fills = [Decoded(r, None) for r in requests]
        self.finished: list[int] = []

    def stop(self, i: int) -> None:
        self.stopped.add(i)

    def active(self) -> int:
        return sum(1 for f in self.fills if not f.canvas and not f.cancelled)

    @torch.inference_mode()
    def __iter__(self) -> Iterator[list]:
        shift, device = int(self.model.config.shift_logits), next(self.model.parameters()).device
        for i, (req, f) in enumerate(zip(self.requests, self.fills)):
            for _ in _decode(self.model, self.tok, req, self.cfg, f, self.stopped, i, self.t0, shift, device):
                yield []
            self.finished.append(i)

    def result(self, i: int) -> FillResult:
        return result_of(self.fills[i], self.tok)


def fill_variable(model, tok: Tokenizer, requests: list[CanvasRequest], cfg: SamplerConfig | None = None
                  ) -> list[FillResult]:
    """Infill every request with DreamOn's variable-length decoding, to the end."""
    decoding = VariableDecoding(model, tok, requests, cfg)
    run(decoding)
    return decoding.results()
