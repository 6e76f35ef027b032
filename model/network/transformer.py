"""Bidirectional transformer for masked diffusion: RoPE, RMSNorm, SwiGLU, grouped-query attention.

No causal mask: every position sees the prefix, the canvas and the suffix. Block-diffusion checkpoints
(`block_size`: Stable-DiffCoder, LLaDA2) see their own block and the ones before it, as their published
generate() masks them; LLaDA2's layers past the first few are mixtures of experts (`MoE`). The forward pass has
two modes used by the sampler (Fast-dLLM "dual cache", Wu et al. 2025):

- full: all positions of each row; returns logits and a `KVCache` with every position's keys/values;
- cached (`cache.at(columns)`): only a window of the row (the canvas) is run; each layer writes the
  window's fresh keys/values into the cache in place, at the window's columns, and its queries
  attend to the whole cache under the rows' key mask. No layer copies the cache (a torch.cat of
  it per layer per step was most of a cached step's memory traffic), and nothing is written back
  afterwards. When nothing changed since the cache was filled, this equals the full pass on those
  positions.
The int8 head is quantize.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig


@dataclass
class KVCache:
    keys: list[torch.Tensor]  # per layer [B, Hkv, S, D], RoPE already applied
    values: list[torch.Tensor]  # per layer [B, Hkv, S, D]
    key_mask: torch.Tensor  # [B, S] bool: which positions may be attended to (each row's own tokens)
    # decided on the host when the rows are built, never read back from the device: key_mask is True
    # everywhere but the last column (the rows' spare one), so attention reads the first S - 1 columns
    # with no mask, which lets SDPA take its flash kernel
    dense: bool = False
    # block-causal models (config.block_size): each column's position, from which its block is known; a
    # cached pass needs it to keep later blocks from the window's queries
    positions: torch.Tensor | None = None

    def at(self, columns: torch.Tensor) -> CacheWindow:
        """The cached mode's argument: a window standing at `columns` [B, W] of the rows."""
        return CacheWindow(self, columns)


@dataclass
class CacheWindow:
    """A window of each row, run against a cache: its tokens stand at `columns` [B, W] (long) of the
    cache's rows, where every layer writes their keys/values in place. A slot that is no real token
    points at a column the key mask leaves out (the sampler's spare `junk` one)."""

    cache: KVCache
    columns: torch.Tensor


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * F.rms_norm(x.float(), x.shape[-1:], eps=self.eps).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float):
    """cos/sin tables for absolute positions [B, S] -> [B, 1, S, D] (half-split layout, as in HF Llama/Qwen)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    freqs = positions.float()[..., None] * inv_freq  # [B, S, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, S, D]
    return emb.cos(), emb.sin()


class RopeTable:
    """rope_cos_sin for positions 0..n-1, computed once and indexed: a denoising step on a few
    positions should not rebuild the table. On the CPU the table grows with the positions asked for
    (a Qwen-style 128k max_seq_len would be 134 MB of it); elsewhere it covers every position a row
    can have at once (max_seq_len tokens and the sampler's spare column), so that no forward reads
    `positions.max()` back from the GPU (a host sync that stalls the launch queue every pass)."""

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        self.head_dim, self.theta, self.size, self.cos, self.sin = head_dim, theta, max_positions, None, None

    def __call__(self, positions: torch.Tensor):
        on_cpu = positions.device.type == "cpu"
        need = (int(positions.max()) + 1 if positions.numel() else 1) if on_cpu else self.size
        if self.cos is None or self.cos.shape[0] < need or self.cos.device != positions.device:
            n = max(need, 2 * (0 if self.cos is None else self.cos.shape[0]), 512) if on_cpu else need
            cos, sin = rope_cos_sin(torch.arange(n, device=positions.device)[None], self.head_dim, self.theta)
            self.cos, self.sin = cos[0, 0], sin[0, 0]  # [n, D]
        return self.cos[positions][:, None], self.sin[positions][:, None]


def apply_rope(x, cos, sin):
    """x [..., D] rotated by cos/sin [..., R]: all of it when R == D, else only its first R dims, the
    rest passed through (partial rotary, LLaDA2's partial_rotary_factor; HF apply_rotary_pos_emb)."""
    if cos.shape[-1] != x.shape[-1]:
        r = cos.shape[-1]
        return torch.cat([apply_rope(x[..., :r], cos, sin), x[..., r:]], dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=cfg.o_bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos, sin, mask, past: tuple | None):
        """mask: [B, 1, 1 or Q, K] bool (True = may attend) or None (every key). past (cached mode): this
        layer's cache keys and values [B, Hkv, S, D], the window's columns expanded to [B, Hkv, W, D],
        and how many columns to attend to -> (output, keys/values: the fresh ones, or the cache's)."""
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, S, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, S, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, S, D]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if past is not None:  # cached mode: the window's keys/values written in place, the whole cache attended
            keys, values, at, width = past
            keys.scatter_(2, at, k)
            values.scatter_(2, at, v)
            k, v = keys[:, :, :width], values[:, :, :width]  # a view: no copy of the cache
        y = attend(q, k, v, mask, self.n_heads // self.n_kv_heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, S, -1)), (k, v)


def attend(q, k, v, mask, groups: int, expand: bool | None = None):
    """SDPA of q [B, H, Sq, D] on k, v [B, H / groups, Sk, D] under mask [B, 1, 1, Sk] bool or None.

    Grouped-query attention goes to SDPA as it is (enable_gqa), except with a mask on a GPU (expand
    None: on CUDA): only the flash kernel takes GQA and it takes no mask, so SDPA would fall back to
    its math kernel, which holds the [B, H, Sq, Sk] scores (a 2,048-token full pass of a 7B shape:
    470 MB per row and layer); the keys/values are expanded to every head instead, for the
    memory-efficient kernel, which takes the mask."""
    if expand is None:
        expand = q.is_cuda
    if groups > 1 and mask is not None and expand:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        groups = 1
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=groups > 1)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """LLaDA2's sparse MLP (BailingMoeV2; modeling_llada2_moe.py LLaDA2MoeGate / LLaDA2MoeSparseMoeBlock):
    a sigmoid router in float32 whose scores, plus a learned per-expert bias, pick `n_experts_per_tok`
    experts among the best `n_topk_groups` of `n_expert_groups` groups (a group scores the sum of its two
    best); the picked experts' unbiased scores, normalised to sum to one and scaled by `routed_scaling`,
    weight their SwiGLU outputs, and the shared experts' output is added. Experts run one after another
    on the tokens routed to them: a reference path, not a grouped-GEMM kernel."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.k, self.groups, self.top_groups, self.scaling = (
            cfg.n_experts_per_tok, cfg.n_expert_groups, cfg.n_topk_groups, cfg.routed_scaling)
        self.router = nn.Linear(cfg.dim, cfg.n_experts, bias=False)
        self.register_buffer("expert_bias", torch.zeros(cfg.n_experts))  # routing only, not the weights
        self.experts = nn.ModuleList(MLP(cfg.dim, cfg.moe_hidden_dim) for _ in range(cfg.n_experts))
        shared = cfg.moe_hidden_dim * cfg.n_shared_experts
        self.shared = MLP(cfg.dim, shared) if shared else None

    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h [T, D] -> (expert ids [T, k], their weights [T, k] float32)."""
        scores = F.linear(h.float(), self.router.weight.float()).sigmoid()  # [T, E]
        biased = scores + self.expert_bias.float()
        T, E = biased.shape
        group_scores = biased.view(T, self.groups, -1).topk(2, dim=-1)[0].sum(-1)  # [T, G]
        best = group_scores.topk(self.top_groups, dim=-1, sorted=False)[1]
        allowed = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
        allowed = allowed[:, :, None].expand(T, self.groups, E // self.groups).reshape(T, E)
        ids = biased.masked_fill(~allowed, float("-inf")).topk(self.k, dim=-1)[1]  # [T, k]
        weights = scores.gather(1, ids)
        if self.k > 1:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return ids, weights * self.scaling

    def forward(self, x):
        B, S, D = x.shape
        h = x.reshape(-1, D)  # [T, D]
        ids, weights = self.route(h)
        out = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        for e in ids.unique().tolist():  # the experts some token picked
            token, slot = (ids == e).nonzero(as_tuple=True)
            out.index_add_(0, token, self.experts[e](h[token]).float() * weights[token, slot, None])
        out = out.to(x.dtype).view(B, S, D)
        return out if self.shared is None else out + self.shared(x)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int = 0):
        super().__init__()
        self.input_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.post_attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        sparse = cfg.n_experts > 0 and index >= cfg.n_dense_layers
        self.mlp = MoE(cfg) if sparse else MLP(cfg.dim, cfg.hidden_dim)

    def forward(self, x, cos, sin, mask, past):
        h, kv = self.attn(self.input_norm(x), cos, sin, mask, past)
        x = x + h
        return x + self.mlp(self.post_attn_norm(x)), kv


class DiffusionTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.rope = RopeTable(cfg.rope_dim, cfg.rope_theta, cfg.max_seq_len + 1)
        self.int8_head = None  # the output head as an int8 Linear (CPU inference)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def hidden(self, tokens, positions, key_mask, cache: CacheWindow | None = None):
        """Final hidden states [B, S, dim] and a KVCache. Full mode (no cache): tokens are whole rows,
        key_mask [B, S] says which are real, and the KVCache is every position's keys/values. Cached
        mode (`cache.at(columns)`): tokens [B, W] are a window at those columns, key_mask [B, W] says
        which slots are real (the others point at a column the cache's key mask leaves out, so it is
        not read), and the KVCache is the cache itself, the window's keys/values written into it."""
        if cache is not None and not isinstance(cache, CacheWindow):
            raise ValueError(f"cached mode takes cache.at(columns), where the window is, not {type(cache).__name__}")
        x = self.embed(tokens)
        cos, sin = self.rope(positions)
        if cache is None:
            mask, out = key_mask[:, None, None, :], None  # [B, 1, 1, S] bool, True = may attend
            if self.config.block_size:
                mask = mask & self._earlier_blocks(positions, positions)  # [B, 1, S, S]
        else:
            out, width = cache.cache, cache.cache.key_mask.shape[1] - int(cache.cache.dense)
            mask = None if out.dense else out.key_mask[:, None, None, :]  # [B, 1, 1, S]
            if self.config.block_size:
                if out.positions is None:
                    raise ValueError(f"block-causal attention (block_size {self.config.block_size}) needs the "
                                     "cache's positions (KVCache.positions) for a cached pass")
                mask = out.key_mask[:, None, None, :] & self._earlier_blocks(positions, out.positions)
                mask = mask[..., :width]
            at = cache.columns[:, None, :, None].expand(-1, self.config.n_kv_heads, -1, self.config.head_dim)
        keys, values = [], []
        for i, layer in enumerate(self.layers):
            past = None if out is None else (out.keys[i], out.values[i], at, width)
            x, (k, v) = layer(x, cos, sin, mask, past)
            keys.append(k)
            values.append(v)
        kept = positions if self.config.block_size else None  # the cache's columns' blocks, for a cached pass
        return self.norm(x), KVCache(keys, values, key_mask, positions=kept) if out is None else out

    def _earlier_blocks(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Block-causal attention (Stable-DiffCoder's _make_block_causal_mask, LLaDA2's generate): a query
        sees every key of its own block and of the blocks before it, blocks counted from position 0.
        queries [B, Q], keys [B, K] positions -> [B, 1, Q, K] bool."""
        size = self.config.block_size
        return (keys // size)[:, None, None, :] <= (queries // size)[:, None, :, None]

    def head_weight(self) -> torch.Tensor | None:
        """The output head as one [V, D] matrix (what the fused kernels take); None for the int8 head."""
        if self.int8_head is not None:
            return None
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def logits(self, h):
        if self.int8_head is not None:
            return self.int8_head(h)
        return F.linear(h, self.head_weight())

    def forward(self, tokens, positions=None, key_mask=None, cache: CacheWindow | None = None):
        """tokens [B, S] -> (logits [B, S, V], KVCache), as `hidden`.

        positions: absolute positions [B, S] (default 0..S-1); key_mask: [B, S] bool, False for
        padding. With `cache` (a KVCache's `at(columns)`), tokens are a window only, written into
        the cache at those columns, and the cache's key_mask says what they may see."""
        B, S = tokens.shape
        if positions is None:
            positions = torch.arange(S, device=tokens.device).expand(B, S)
        if key_mask is None:
            key_mask = torch.ones(B, S, dtype=torch.bool, device=tokens.device)
        h, new_cache = self.hidden(tokens, positions, key_mask, cache)
        return self.logits(h), new_cache
