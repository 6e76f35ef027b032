"""Model configuration: one dataclass whose flags describe our own small models and the open
diffusion checkpoints (Dream / DiffuCoder / DreamOn on Qwen2, CoDA on Qwen3, LLaDA)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


def strict_from_dict(cls, d: dict, what: str):
    """cls(**d), rejecting unknown keys loudly (a typo in a config must not be silently ignored)."""
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"unknown {what} keys: {', '.join(unknown)}")
    return cls(**d)


@dataclass
class ModelConfig:
    vocab_size: int = 8192
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int | None = None  # None: same as n_heads (MHA); fewer: grouped-query attention
    head_dim: int | None = None  # None: dim // n_heads (Qwen3 sets it explicitly)
    hidden_dim: int | None = None  # SwiGLU width; None: 8/3 * dim rounded up to a multiple of 64
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    qkv_bias: bool = False  # Qwen2 (Dream family)
    qk_norm: bool = False  # Qwen3 (CoDA): RMSNorm on each head's q and k before RoPE
    tie_embeddings: bool = True  # False: separate output head (Dream-7B, LLaDA, CoDA)
    shift_logits: bool = False  # True: logits at i predict token i+1 (Dream, CoDA); False: in place (LLaDA, ours)

    def __post_init__(self):
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.head_dim is None:
            if self.dim % self.n_heads:
                raise ValueError(f"dim={self.dim} is not divisible by n_heads={self.n_heads}")
            self.head_dim = self.dim // self.n_heads
        if self.hidden_dim is None:
            self.hidden_dim = -(-int(8 * self.dim / 3) // 64) * 64
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        return strict_from_dict(cls, d, "model config")

    @classmethod
    def preset(cls, name: str, **overrides) -> "ModelConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def num_params(self) -> int:
        d, h, kv, hd = self.dim, self.n_heads, self.n_kv_heads, self.head_dim
        attn = d * hd * (h + 2 * kv) + h * hd * d + (hd * (h + 2 * kv) if self.qkv_bias else 0)
        mlp = 3 * d * self.hidden_dim
        per_layer = attn + mlp + 2 * d + (2 * hd if self.qk_norm else 0)
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.n_layers * per_layer + d + head


# Shapes of the open checkpoints are taken from their published config.json files.
PRESETS: dict[str, dict] = {
    "tiny": dict(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=512),
    "small": dict(vocab_size=8192, dim=256, n_layers=6, n_heads=8, n_kv_heads=4, max_seq_len=1024),
    "base": dict(vocab_size=8192, dim=384, n_layers=8, n_heads=6, n_kv_heads=2, max_seq_len=1024),
    "dream-7b": dict(  # Dream-v0-Base-7B, Dream-Coder-7B, DiffuCoder-7B, DreamOn-7B (Qwen2.5-7B)
        vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, hidden_dim=18944,
        max_seq_len=131072, rope_theta=1e6, qkv_bias=True, tie_embeddings=False, shift_logits=True,
    ),
    "coda-1.7b": dict(  # CoDA-v0 (Qwen3-1.7B)
        vocab_size=151936, dim=2048, n_layers=28, n_heads=16, n_kv_heads=8, head_dim=128, hidden_dim=6144,
        max_seq_len=40960, rope_theta=1e6, qk_norm=True, tie_embeddings=False,  # Qwen3: no attention bias
        shift_logits=True,
    ),
    "llada-8b": dict(  # LLaDA-8B-Base / Instruct
        vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, hidden_dim=12288,
        max_seq_len=4096, rope_theta=500000.0, norm_eps=1e-5, tie_embeddings=False,
    ),
}


@dataclass
class SpecialTokens:
    """Names (not ids) of the special tokens; ids are looked up in the tokenizer by name."""

    mask: str = "<|mask|>"
    filler: str = "<|filler|>"  # pads a fill-in-the-middle canvas after the real tokens
    bos: str | None = "<|bos|>"
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "SpecialTokens":
        return strict_from_dict(cls, d, "special token")
