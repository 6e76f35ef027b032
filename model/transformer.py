"""Bidirectional transformer for masked diffusion: RoPE, RMSNorm, SwiGLU, grouped-query attention.

No causal mask: every position sees the prefix, the canvas and the suffix. The forward pass has
two modes used by the sampler (Fast-dLLM "dual cache", Wu et al. 2025):

- full: all positions of each row; returns logits and a `KVCache` with every position's keys/values;
- cached (`cache.at(columns)`): only a window of the row (the canvas) is run; each layer writes the
  window's fresh keys/values into the cache in place, at the window's columns, and its queries
  attend to the whole cache under the rows' key mask. No layer copies the cache (a torch.cat of
  it per layer per step was most of a cached step's memory traffic), and nothing is written back
  afterwards. When nothing changed since the cache was filled, this equals the full pass on those
  positions.
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
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos, sin, mask, past: tuple | None):
        """mask: [B, 1, 1, K] bool (True = may attend) or None (every key). past (cached mode): this
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
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.down_proj = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.post_attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, past):
        h, kv = self.attn(self.input_norm(x), cos, sin, mask, past)
        x = x + h
        return x + self.mlp(self.post_attn_norm(x)), kv


class DiffusionTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.rope = RopeTable(cfg.head_dim, cfg.rope_theta, cfg.max_seq_len + 1)
        self.int8_head = None  # quantize.py: the output head as an int8 Linear (CPU inference)
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
        else:
            out, width = cache.cache, cache.cache.key_mask.shape[1] - int(cache.cache.dense)
            mask = None if out.dense else out.key_mask[:, None, None, :]  # [B, 1, 1, S]
            at = cache.columns[:, None, :, None].expand(-1, self.config.n_kv_heads, -1, self.config.head_dim)
        keys, values = [], []
        for i, layer in enumerate(self.layers):
            past = None if out is None else (out.keys[i], out.values[i], at, width)
            x, (k, v) = layer(x, cos, sin, mask, past)
            keys.append(k)
            values.append(v)
        return self.norm(x), KVCache(keys, values, key_mask) if out is None else out

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
