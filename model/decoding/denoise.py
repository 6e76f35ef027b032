"""One denoising step for every row of a batch (the shape of gpt-fast's `decode_one_token`), and the
drafts' step 0.

`take_step`: one forward pass predicts the open block's masked positions of every unfinished row, an unmasking
policy (policies.py) commits some of them, and the step says which rows are done. Only the open block's
masked positions go through the output head; its statistics come from kernels/vocab_stats.py (fused on a
GPU). The model writes real tokens followed by filler tokens; as in training, a fill is at least one real
token and fillers only ever trail it: committing one at position k commits fillers at every later position,
and neither position 0 nor one before a committed real token may become one. A one-line row is done as soon
as a committed newline has no masked position before it; with `confidence_cut`, any row is done once a token
committed below that confidence has none before it (a caller that drops the tail from such a token has its
answer). With the context cache (Fast-dLLM dual cache) a step after the first full pass recomputes only a
window of the canvas (batch.py `Batch.window`), and each layer writes the window's keys/values into the cache
in place; the prefix, the suffix and the rest of the canvas come from the cache; a batch whose rows line up
with their documents' last fills starts from those (reuse.py). `check_drafts`: a request with drafts
(CanvasRequest.candidates) has a step 0 first: the drafts are scored and what the model believes of them is
committed (verify.py)."""

from __future__ import annotations

import torch

from ...kernels.vocab_stats import Constraint, head_stats
from .batch import Batch
from .policies import block_eligible, select
from .results import Decoded
from .reuse import warm_row
from ...protocol.settings import SamplerConfig
from ..network.tokenizer import Tokenizer
from ..network.transformer import KVCache
from .verify import verify


def _constraint(rows, cols, batch: Batch, tok: Tokenizer, cur: torch.Tensor, trailing: bool) -> Constraint:
    """What the masked positions (rows, cols) may predict: never mask/bos; with token healing,
    canvas[0] must start with the typed text; with trailing fillers, no filler before a committed
    real token (cur: canvas ids [B, N]), nor at canvas[0] (training never has an empty middle)."""
    banned = tuple(i for i in (tok.mask_id, tok.bos_id) if i is not None)
    allow = allow_row = no_filler = None
    if batch.allowed_first.shape[1]:
        allow = batch.allowed_first
        allow_row = torch.where((cols == 0) & batch.allowed_first.any(-1)[rows], rows, -1)
    if trailing:
        real = ~batch.masked & batch.canvas_valid & (cur != tok.filler_id)
        at = torch.arange(real.shape[1], device=real.device)
        last_real = torch.where(real, at, -1).max(-1).values
        no_filler = (cols < last_real[rows]) | (cols == 0)
    return Constraint(banned, tok.filler_id, no_filler, allow, allow_row)


def _cached_pass(model, batch: Batch, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Run positions idx [B, W] against the cache -> hidden [B, W, D]. Each layer writes their keys/values
    into the cache in place (invalid slots at the junk column) and attends to every token of the row."""
    h, _ = model.hidden(batch.x.gather(1, idx), idx, valid, batch.cache.at(idx))
    return h


def _keep_cache(batch: Batch, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    """The batch's cache from a pass's keys/values: it attends to the rows' own tokens, unmasked
    when no row is padded (batch.dense, known on the host)."""
    batch.cache = KVCache(keys, values, batch.key_mask, batch.dense, positions=batch.positions)  # block-causal models


def _warm_start(model, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The first pass from the documents' last fills: the cache is their lined-up keys/values and
    only the rest of each row runs. -> (hidden [B, W, D], slot of each position in it [B, S + 1])."""
    plans, rows = batch.plans, batch.rows
    size, theta = batch.x.shape[1], model.config.rope_theta
    layers = len(plans[0].entry.keys)
    keys, values = ([torch.stack([warm_row(p, i, kind, size, r.start, r.length, theta) for p, r in zip(plans, rows)])
                     for i in range(layers)] for kind in ("keys", "values"))
    _keep_cache(batch, keys, values)
    todo = [list(range(min(p.prefix, r.start - batch.shift), r.start + r.length))
            + list(range(r.start + r.length + p.suffix, len(r.ids))) for p, r in zip(plans, rows)]
    width = max(len(t) for t in todo)
    idx = torch.tensor([t + [batch.junk] * (width - len(t)) for t in todo], device=batch.x.device)
    h = _cached_pass(model, batch, idx, idx != batch.junk)
    slot = torch.zeros_like(batch.x).scatter_(1, idx, torch.arange(width, device=idx.device).expand_as(idx))
    return h, slot


def hidden_at(model, batch: Batch, cfg: SamplerConfig, step: int, rows, cols, whole: bool) -> torch.Tensor:
    """One forward pass -> hidden states [M, D] of the outputs that predict canvas positions (rows, cols).

    Full pass: every position, and the cache is (re)filled. Cached step: the window only; its fresh
    keys/values are written into the cache in place, and it sees the cache everywhere else."""
    at = (batch.start[rows] + cols - batch.shift).clamp(max=batch.junk)  # past a row's end: only on a GPU (_positions)
    if batch.cache is None and batch.plans:
        h, slot = _warm_start(model, batch)
        return h[rows, slot[rows, at]]
    refresh = batch.cache is None or (cfg.refresh_every and step % cfg.refresh_every == 0)
    if not cfg.use_cache or refresh:
        h, cache = model.hidden(batch.x, batch.positions, batch.key_mask)
        if cfg.use_cache:
            _keep_cache(batch, cache.keys, cache.values)
        return h[rows, at]
    first_col, idx, valid = batch.window(cfg.block_size, whole)
    h = _cached_pass(model, batch, idx, valid)
    return h[rows, cols - first_col[rows]]


STATIC_STEP: bool | None = None  # None: the static step on a GPU only; tests set True to run it on the CPU


def _positions(batch: Batch, eligible: torch.Tensor, block_size: int | None, whole: bool):
    """The canvas positions a step runs through the output head -> (rows [M], cols [M], valid [M] or
    None). On the CPU the eligible ones (nonzero, whose count is read back to the host). On a GPU a
    set of fixed size: every row's open block (the whole canvas without blocks or past the time
    budget), the eligible ones marked valid. The head there reads its weights once whatever the
    number of positions, and the step has no shape that depends on the data and no host sync."""
    if not (batch.x.is_cuda if STATIC_STEP is None else STATIC_STEP):
        rows, cols = eligible.nonzero(as_tuple=True)
        return rows, cols, None
    B, N = eligible.shape
    at = torch.arange(N, device=eligible.device)
    if block_size and not whole:
        first = torch.where(eligible, at, N).min(-1).values  # [B] the open block's first eligible column
        start, K = first // block_size * block_size, min(block_size, N)
    else:
        start, K = torch.zeros(B, dtype=torch.long, device=eligible.device), N
    cols = start[:, None] + torch.arange(K, device=eligible.device)  # [B, K]
    inside = cols < N
    cols = cols.clamp(max=N - 1)
    valid = inside & eligible.gather(1, cols)
    rows = torch.arange(B, device=eligible.device)[:, None].expand(B, K)
    return rows.flatten(), cols.flatten(), valid.flatten()


def _predict(model, tok: Tokenizer, batch: Batch, cfg: SamplerConfig, step: int, cur: torch.Tensor,
             eligible: torch.Tensor, whole: bool):
    """One forward pass -> [B, N] (pred, conf, entropy or None) at the eligible positions (zeros
    elsewhere); only they need logits (on a GPU, their open blocks: _positions)."""
    rows, cols, valid = _positions(batch, eligible, cfg.block_size, whole)
    h = hidden_at(model, batch, cfg, step, rows, cols, whole)
    stats = head_stats(model, h, _constraint(rows, cols, batch, tok, cur, cfg.trailing_fillers),
                       entropy=cfg.policy == "eb")
    B, N = batch.masked.shape
    if valid is not None:  # the positions that are not eligible go to a spare column, cut off below
        cols = torch.where(valid, cols, N)
    out = (rows, cols)

    def spread(values, dtype):
        return torch.zeros(B, N + 1, dtype=dtype, device=h.device).index_put_(out, values)[:, :N]

    pred, conf = spread(stats.pred, torch.long), spread(stats.conf, torch.float32)
    return pred, conf, None if stats.entropy is None else spread(stats.entropy, torch.float32)


def _commit(batch: Batch, cur: torch.Tensor, commit: torch.Tensor, pred: torch.Tensor, p: torch.Tensor,
            filler: int, trailing: bool) -> torch.Tensor:
    """Write the committed predictions into the rows -> the new canvas ids [B, N]. With trailing
    fillers, a committed filler also commits fillers at every later masked position."""
    new = torch.where(commit, pred, cur)
    batch.conf = torch.where(commit, p, batch.conf)
    batch.masked &= ~commit
    if trailing:
        seen = ((~batch.masked & batch.canvas_valid & (new == filler)).cumsum(-1) > 0) & batch.masked
        new = torch.where(seen, filler, new)
        batch.masked &= ~seen
    batch.x.scatter_(1, batch.canvas_idx, new)
    return new


def _settled(batch: Batch, hit: torch.Tensor) -> torch.Tensor:
    """[B] bool: rows whose first committed canvas position where `hit` [B, N] holds has no masked
    position before it, so nothing decoded later can change the fill up to there."""
    n = hit.shape[1]
    at = torch.arange(n, device=hit.device)
    first_hit = torch.where(hit & ~batch.masked & batch.canvas_valid, at, n).min(-1).values
    return first_hit < torch.where(batch.masked, at, n).min(-1).values


def _done(batch: Batch, cur: torch.Tensor, filler: int, confidence_cut: float) -> torch.Tensor:
    """[B] bool: rows with nothing masked, one-line rows whose first line is written, and rows whose
    first real token below confidence_cut is settled (the caller drops the fill from it). cur: [B, N]."""
    done = ~batch.masked.any(-1)
    if batch.newline is not None:
        is_nl = batch.newline[cur]
        is_nl[:, 0] = batch.newline_first.gather(1, cur[:, :1]).squeeze(1)
        done |= batch.one_line & _settled(batch, is_nl)
    if confidence_cut > 0:
        done |= _settled(batch, (cur != filler) & (batch.conf < confidence_cut))
    return done


def take_step(model, tok: Tokenizer, batch: Batch, cfg: SamplerConfig, step: int,
          greedy: torch.Tensor | None) -> torch.Tensor:
    """One denoising step for every row of the batch -> [B] bool, the rows that are done.

    The open semi-AR block's masked positions are predicted, the policy picks which to commit, and
    they are committed. greedy [B] bool (None: no row): rows past their time budget, where every
    masked position is predicted and committed."""
    eligible = block_eligible(batch.masked, cfg.block_size)  # [B, N]
    if greedy is not None:
        eligible = torch.where(greedy[:, None], batch.masked, eligible)
    cur = batch.x.gather(1, batch.canvas_idx)  # [B, N] canvas ids
    pred, p, entropy = _predict(model, tok, batch, cfg, step, cur, eligible, greedy is not None)
    commit = select(cfg.policy, p, entropy, eligible, tau=cfg.threshold, k=cfg.k, gamma=cfg.gamma)
    if greedy is not None:
        commit = torch.where(greedy[:, None], eligible, commit)
    cur = _commit(batch, cur, commit, pred, p, tok.filler_id, cfg.trailing_fillers)
    return _done(batch, cur, tok.filler_id, cfg.confidence_cut)


def check_drafts(model, tok: Tokenizer, batch: Batch, cfg: SamplerConfig, fills: list[Decoded]) -> torch.Tensor:
    """Verify the requests' drafts and commit each kept prefix into its row, as if decoded
    -> [B] bool, the rows that are done (a one-line draft kept through the filler that ends it)."""
    verdicts = verify(model, tok, batch.rows, [f.req.candidates for f in fills], [f.req.stops_at_line for f in fills],
                      cfg.draft_stride, cfg.draft_keep, cfg.draft_accept)
    cur = batch.x.gather(1, batch.canvas_idx)  # [B, N]
    commit = torch.zeros_like(batch.masked)
    pred, p = torch.zeros_like(cur), torch.zeros_like(batch.conf)
    for b, (f, v) in enumerate(zip(fills, verdicts)):
        f.verdict = v
        if v is not None and v.kept:
            k = len(v.kept)
            commit[b, :k] = True
            pred[b, :k] = torch.tensor(v.kept, device=pred.device)
            p[b, :k] = torch.tensor(v.conf, device=p.device)
    cur = _commit(batch, cur, commit, pred, p, tok.filler_id, cfg.trailing_fillers)
    return _done(batch, cur, tok.filler_id, cfg.confidence_cut)
