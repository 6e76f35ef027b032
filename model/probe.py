"""How sure the model is of tokens that are already there: the first half of remask-and-refine.

A next edit starts from the region as it stands. To find what should change, the region's tokens
are probed in `stride` interleaved passes: pass j masks every token i with i % stride == j and reads
the model's probability of the original token at each masked position, so every token is judged
with (stride - 1) / stride of its neighbours visible, exactly the kind of question masked diffusion
training asks. The passes share one batched forward, but each is a forward pass and is counted as
one. Pass 0 runs in full; the others run only the middle against its keys/values (as the sampler's
cached steps do), so the probe costs about one full pass plus (stride - 1) passes over the middle.
Tokens the model doubts are then re-masked and denoised (diffusion_lsp/nextedit/suggest.py);
the rest stay as they are (the remasking idea of ReMDM, Wang et al. 2025, applied to an edit)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .tokenizer import Tokenizer, decode_pieces
from .canvas import DoesNotFit, fit_context
from .reuse import ContextMemo, Entry
from .transformer import KVCache


@dataclass
class Probe:
    pieces: list[str]  # per middle token, the text it adds ("".join(pieces) == the middle)
    prob: list[float]  # per middle token, the model's probability of it with it masked
    best: list[float]  # per middle token, the probability of the model's own first choice there
    forwards: int
    ms: float


@torch.inference_mode()
def probe(model, tok: Tokenizer, prefix: str, middle: str, suffix: str, stride: int = 4,
          memo: ContextMemo | None = None, doc: str | None = None) -> Probe:
    """Probabilities of `middle`'s tokens between `prefix` and `suffix`, `stride` passes. With a
    memo, pass 0's keys/values are remembered under `doc`: the fill that follows (the doubted span
    re-masked, the same context) starts from them instead of a full pass (reuse.py)."""
    if stride < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    t0 = time.perf_counter()
    mid = tok.encode(middle)
    if not mid:
        return Probe([], [], [], 0, 0.0)
    bos = [] if tok.bos_id is None else [tok.bos_id]
    room = model.config.max_seq_len - len(bos) - len(mid)
    if room < 0:
        raise DoesNotFit(f"a region of {len(mid)} tokens does not fit the model's {model.config.max_seq_len} positions")
    pre, suf = fit_context(tok.encode(prefix), tok.encode(suffix), room)
    ids = bos + pre + mid + suf
    start, n = len(bos) + len(pre), len(mid)
    stride = min(stride, n)
    shift = int(model.config.shift_logits)
    device = next(model.parameters()).device
    S = len(ids)
    row = torch.tensor(ids, device=device)
    at = torch.arange(n, device=device)
    masked = (at[None, :] % stride) == torch.arange(stride, device=device)[:, None]  # [P, n]
    mid_ids = torch.where(masked, tok.mask_id, row[start:start + n])  # [P, n] each pass's middle
    # pass 0 runs in full and fills the cache; passes 1.. run only the middle against it (the
    # context's keys/values are pass 0's: the Fast-dLLM dual-cache approximation the sampler makes)
    first = row.clone()
    first[start:start + n] = mid_ids[0]
    h0, cache = model.hidden(first[None], torch.arange(S, device=device)[None],
                             torch.ones(1, S, dtype=torch.bool, device=device))  # [1, S, D]
    hs = [h0[0, start - shift:start + n - shift]]  # [n, D] outputs that predict the middle
    if memo is not None and doc:
        memo.put(doc, Entry(ids, start, n, [k[0] for k in cache.keys], [v[0] for v in cache.values], 0))
    if stride > 1:
        P = stride - 1
        idx = torch.arange(start - shift, start + n, device=device).expand(P, n + shift)  # [P, W]
        toks = row[idx].clone()
        toks[:, shift:] = mid_ids[1:]
        ctx = KVCache([k.expand(P, -1, -1, -1) for k in cache.keys], [v.expand(P, -1, -1, -1) for v in cache.values],
                      torch.ones(P, S, dtype=torch.bool, device=device).scatter(1, idx, False))
        h, _ = model.hidden(toks, idx, torch.ones_like(idx, dtype=torch.bool), ctx)  # [P, W, D]
        hs.extend(h[j, :n] for j in range(P))
    hidden = torch.stack(hs)  # [stride, n, D]: pass j's output at every middle position
    rows, cols = masked.nonzero(as_tuple=True)  # each middle token once
    logits = model.logits(hidden[rows, cols]).float()  # [n, V]
    banned = [i for i in (tok.mask_id, tok.bos_id) if i is not None]
    logits[:, banned] = float("-inf")
    probs = torch.softmax(logits, -1)  # [n, V]
    p = probs.gather(1, torch.tensor(mid, device=device)[cols, None]).squeeze(1)
    prob = torch.zeros(n, device=device).index_put_((cols,), p)
    best = torch.zeros(n, device=device).index_put_((cols,), probs.max(-1).values)
    return Probe(decode_pieces(tok, mid)[0], prob.tolist(), best.tolist(), stride, (time.perf_counter() - t0) * 1e3)
