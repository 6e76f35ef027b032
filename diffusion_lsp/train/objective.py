"""Masked-diffusion training objective: building rows, noising them, and the weighted loss.

Two kinds of rows, mixed by `ObjectiveConfig.fim_rate`:

- plain (MDLM, Sahoo et al. 2024; LLaDA, Nie et al. 2025): `[bos] + tokens`; with t ~ U(eps, 1) per
  row every non-bos token is replaced by the mask token with probability t.
- fill-in-the-middle, laid out exactly as the sampler builds them (model/decoding/canvas.py):
  `[bos] + prefix + canvas + suffix`, the canvas being the m real middle tokens followed by N - m
  filler tokens; only canvas positions are noised, so the model learns to write the middle and
  to end it with fillers (that is how the sampler's fill length adapts up to N).

Loss (LLaDA eq. 3, kernels/linear_ce.py): -1/n * sum over rows and masked positions of log p(x_i | x_t) / t, where n is
the number of positions that could have been masked (non-bos tokens of plain rows, canvas
positions of FIM rows); padding is never masked and never scored.

Block noise (`block_noise`, a fraction of FIM and edit rows), as the sampler decodes (model/decoding/sampler.py:
blocks of `block_size` from the left): the canvas is cut into blocks, one open block b is drawn;
blocks before b are clean, block b is masked with probability t, blocks after b are fully masked.
Those later positions are scored at their own noise level, 1 (weight 1); the clean ones are not
scored. Next-edit rows (train/edit_rows.py) are laid out like FIM rows, their canvas being the new
region.

Row building and noising are numpy functions driven by an explicit `np.random.Generator`, so a
batch is a pure function of its seed (resume and multi-rank data need nothing else).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


# canvas sizes the sampler is called with (span kinds in the server, eval splits): training on them
# teaches the model to end a short fill with many fillers
CANVAS_SIZES = (16, 32, 64, 96, 128)


@dataclass
class ObjectiveConfig:
    eps: float = 1e-3  # t ~ U(eps, 1); eps keeps the 1/t weight finite
    fim_rate: float = 0.5  # fraction of rows that are fill-in-the-middle examples
    max_span: int = 64  # FIM middle: 1..max_span real tokens
    line_rate: float = 0.5  # fraction of FIM middles that are whole lines (HumanEval single/multi-line)
    min_extra: int = 4  # canvas N = m + U(0, max(min_extra, m)) so the model sees trailing fillers
    canvas_rate: float = 0.5  # fraction of FIM canvases sized like the server's instead (CANVAS_SIZES)
    text_lines: float = 0.5  # fraction of whole-line middles cut at text line starts (see _text_lines)
    block_noise: float = 0.0  # fraction of FIM (and edit) rows noised block by block, as the sampler decodes
    block_size: int = 8  # the sampler's block size

    def __post_init__(self):
        if not 0.0 < self.eps < 1.0:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")
        for name in ("fim_rate", "line_rate", "canvas_rate", "text_lines", "block_noise"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.max_span < 1 or self.min_extra < 0:
            raise ValueError(f"max_span must be >= 1 and min_extra >= 0, got {self.max_span}, {self.min_extra}")


@dataclass
class Row:
    ids: np.ndarray  # [S] int64, padded with the filler id
    valid: np.ndarray  # [S] bool: real positions (the model's key_mask)
    maskable: np.ndarray  # [S] bool: positions that may be noised and are scored
    blockable: bool = False  # a canvas row (FIM, edit) that block noise may apply to


@dataclass
class Batch:
    targets: torch.Tensor  # [B, S] long: clean ids
    inputs: torch.Tensor  # [B, S] long: ids with masked positions replaced by the mask id
    key_mask: torch.Tensor  # [B, S] bool
    masked: torch.Tensor  # [B, S] bool: positions scored by the loss
    t: torch.Tensor  # [B] or [B, S] float: noise level of each row (or position: block noise)
    n_scored: int  # positions that could have been masked (the loss denominator)

    def to(self, device) -> "Batch":
        move = lambda x: x.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.targets), move(self.inputs), move(self.key_mask), move(self.masked),
                     move(self.t), self.n_scored)


def _bos(tok) -> list[int]:
    return [] if tok.bos_id is None else [tok.bos_id]


def _pad(ids: list[int], maskable: list[bool], seq_len: int, filler_id: int, blockable: bool = False) -> Row:
    n = len(ids)
    out = np.full(seq_len, filler_id, dtype=np.int64)
    out[:n] = ids
    valid = np.zeros(seq_len, dtype=bool)
    valid[:n] = True
    mk = np.zeros(seq_len, dtype=bool)
    mk[:n] = maskable
    return Row(out, valid, mk, blockable)


def plain_row(tokens: np.ndarray, seq_len: int, tok) -> Row:
    """`[bos] + tokens`, cut to seq_len; every real non-bos position is maskable."""
    bos = _bos(tok)
    body = [int(x) for x in tokens[: seq_len - len(bos)]]
    return _pad(bos + body, [False] * len(bos) + [True] * len(body), seq_len, tok.filler_id)


def _line_span(newline: np.ndarray, max_span: int, rng: np.random.Generator) -> tuple[int, int] | None:
    """(start, length) of one or more whole lines: the span starts after a token that contains a
    newline and ends with one (byte-level BPE glues the newline to the next line's indentation, so
    this is the nearest token boundary). None when the crop has no such span."""
    ends = np.flatnonzero(newline)  # token indices that end a line
    if len(ends) < 2:
        return None
    starts = ends[:-1] + 1
    first_end = ends[1:]  # the line that starts at starts[i] ends at first_end[i]
    ok = first_end - starts + 1 <= max_span
    if not ok.any():
        return None
    i = int(rng.choice(np.flatnonzero(ok)))
    s = int(starts[i])
    if rng.random() < 0.5:  # single line
        return s, int(first_end[i]) - s + 1
    cand = ends[(ends >= first_end[i]) & (ends - s + 1 <= max_span)]  # multi-line (may still be one)
    return s, int(rng.choice(cand)) - s + 1


def _text_lines(tokens: np.ndarray, a: int, m: int, tok) -> tuple[np.ndarray, int, int] | None:
    """A token-aligned line span re-cut where a caller cuts it: in text, at line starts. The prefix
    ends with its newline, the middle holds whole lines with their indentation and their newline,
    the suffix starts with the next line's indentation, and each part is tokenized on its own (as
    HumanEval infilling and `fim` send them). Token-aligned spans leave the indentation glued to
    the newline on the other side, which a model trained only on them never sees at a line start.
    -> (tokens, a, m) re-tokenized, or None when a cut would split a character."""
    parts = [tok.decode([int(x) for x in tokens[i:j]]) for i, j in ((0, a), (a, a + m), (a + m, len(tokens)))]
    if any("\ufffd" in p for p in parts):
        return None
    prefix, middle, suffix = parts
    cut = prefix.rfind("\n") + 1
    prefix, middle = prefix[:cut], prefix[cut:] + middle
    cut = middle.rfind("\n") + 1
    if cut == 0:
        return None
    middle, suffix = middle[:cut], middle[cut:] + suffix
    ids = [tok.encode(p) for p in (prefix, middle, suffix)]
    return np.array(ids[0] + ids[1] + ids[2], dtype=np.int64), len(ids[0]), len(ids[1])


def fim_row(tokens: np.ndarray, seq_len: int, tok, newline: np.ndarray, cfg: ObjectiveConfig,
            rng: np.random.Generator) -> Row:
    """`[bos] + prefix + middle + (N - m) fillers + suffix`, cut to seq_len on the suffix side (and
    on the prefix side when the canvas would not fit otherwise).

    tokens: a crop of at most seq_len - len(bos) ids; newline: [V] bool, which token ids contain a
    newline. Only the canvas (middle + fillers) is maskable."""
    bos = _bos(tok)
    tokens = tokens[: seq_len - len(bos)]
    if len(tokens) == 0:
        return plain_row(tokens, seq_len, tok)
    span = None
    if rng.random() < cfg.line_rate:
        span = _line_span(newline[tokens], cfg.max_span, rng)
        if span is not None and rng.random() < cfg.text_lines:
            recut = _text_lines(tokens, *span, tok)
            if recut is not None:
                tokens, span = recut[0], recut[1:]
    if span is None:
        m = int(rng.integers(1, min(cfg.max_span, len(tokens)) + 1))
        span = int(rng.integers(0, len(tokens) - m + 1)), m
    a, m = span
    room = seq_len - len(bos) - m  # the canvas must fit in the row
    if rng.random() < cfg.canvas_rate:  # a canvas as big as callers ask for, mostly filler
        extra = int(rng.choice([c for c in CANVAS_SIZES if c >= m] or [m])) - m
    else:
        extra = int(rng.integers(0, max(cfg.min_extra, m) + 1))
    extra = min(extra, room)
    d = max(0, a + extra - room)  # the canvas would run past the row: cut the prefix on the left
    ids = bos + [int(x) for x in tokens[d:a + m]] + [tok.filler_id] * extra + [int(x) for x in tokens[a + m:]]
    maskable = [False] * (len(bos) + a - d) + [True] * (m + extra)
    ids = ids[:seq_len]
    maskable = (maskable + [False] * len(ids))[: len(ids)]
    return _pad(ids, maskable, seq_len, tok.filler_id, blockable=True)


def sample_t(n: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Noise levels t ~ U(eps, 1), one per row [n]."""
    return eps + (1.0 - eps) * rng.random(n)


def noise(ids: np.ndarray, maskable: np.ndarray, t: np.ndarray, mask_id: int,
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Forward process q(x_t | x_0): each maskable position of row b becomes mask_id with prob t[b].
    ids, maskable: [B, S]; t: [B]. Returns (noisy ids [B, S], masked [B, S] bool)."""
    masked = maskable & (rng.random(ids.shape) < t[:, None])
    return np.where(masked, mask_id, ids), masked


def block_noise(maskable: np.ndarray, t: float, block: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noise one row the way the sampler meets it: maskable [S] bool (the canvas) cut into blocks of
    `block` from the left, an open block b drawn uniformly; before b clean, b masked with prob t, after
    b all masked. -> (masked [S] bool, noise level per position [S], scored [S] bool)."""
    canvas = np.flatnonzero(maskable)
    masked, scored = np.zeros_like(maskable), np.zeros_like(maskable)
    level = np.ones(len(maskable))
    if len(canvas) == 0:
        return masked, level, scored
    b = int(rng.integers(-(-len(canvas) // block)))
    open_, later = canvas[b * block:(b + 1) * block], canvas[(b + 1) * block:]
    masked[open_] = rng.random(len(open_)) < t
    masked[later] = True
    level[open_] = t
    scored[open_] = scored[later] = True
    return masked, level, scored


def make_batch(crops: list[np.ndarray], seq_len: int, tok, newline: np.ndarray, cfg: ObjectiveConfig,
               rng: np.random.Generator, fim_rate: float | None = None, extra: list[Row] = ()) -> Batch:
    """Rows from token crops (each at most seq_len - 1 ids), a FIM/plain mix, plus `extra` rows built
    elsewhere (next-edit rows), noised at random t (block by block for a `block_noise` share)."""
    fim_rate = cfg.fim_rate if fim_rate is None else fim_rate
    rows = [fim_row(c, seq_len, tok, newline, cfg, rng) if rng.random() < fim_rate else plain_row(c, seq_len, tok)
            for c in crops] + list(extra)
    ids = np.stack([r.ids for r in rows])
    maskable = np.stack([r.maskable for r in rows])
    t = sample_t(len(rows), cfg.eps, rng)
    noisy, masked = noise(ids, maskable, t, tok.mask_id, rng)
    level, scored = t, maskable
    if cfg.block_noise > 0:  # drawn only then: batches without it are as before
        level, scored = np.repeat(t[:, None], ids.shape[1], 1), maskable.copy()
        for i, r in enumerate(rows):
            if r.blockable and rng.random() < cfg.block_noise:
                masked[i], level[i], scored[i] = block_noise(r.maskable, t[i], cfg.block_size, rng)
        noisy = np.where(masked, tok.mask_id, ids)
    return Batch(
        targets=torch.from_numpy(ids), inputs=torch.from_numpy(noisy),
        key_mask=torch.from_numpy(np.stack([r.valid for r in rows])), masked=torch.from_numpy(masked),
        t=torch.from_numpy(level).float(), n_scored=int(scored.sum()),
    )


def masked_weights(masked: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """1/t of each masked position, in `masked.nonzero()` order: [M]. t: [B] per row or [B, S]."""
    return (1.0 / t)[masked] if t.dim() == 2 else (1.0 / t)[:, None].expand_as(masked)[masked]


def select_masked(hidden: torch.Tensor, batch: Batch, shift: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states that predict the masked positions [M, D], their targets [M] and weights [M].
    Only these go through the output head (it is about a third of a small model's FLOPs).
    shift: logits at i predict token i + 1 (Dream/CoDA layout); position 0 is bos, never masked."""
    masked, t = batch.masked, batch.t
    if shift:
        hidden = hidden[:, :-1]
        masked = masked[:, 1:]
        t = t[:, 1:] if t.dim() == 2 else t
        targets = batch.targets[:, 1:][masked]
    else:
        targets = batch.targets[masked]
    return hidden[masked], targets, masked_weights(masked, t)
