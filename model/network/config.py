"""Model configuration: one dataclass whose flags describe our own small models and the open
diffusion checkpoints (Dream / DiffuCoder / DreamOn on Qwen2, CoDA on Qwen3, LLaDA), the bounds its
sizes must keep, and the guarded reads of a checkpoint's small files (torch-free: the tokenizer
loader and the language server read them too).
Our own folders: model/families/checkpoint.py; adapter folders: model/families/lora.py."""

from __future__ import annotations

import dataclasses
import json
import math
import reprlib
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ...input_files import read_bytes

# Upper bounds on ModelConfig's sizes, each far past the largest open model's (vocab 262k: Gemma 3;
# dim 16384, 126 layers, 128 heads and FFN 53248: Llama 3.1 405B; head_dim 256; 10M positions:
# Llama 4 Scout). A config.json that says `num_hidden_layers: 1000000` is refused here, before a
# million modules are built on the meta device (~25 MB/s of bookkeeping). max_seq_len allocates
# nothing; its bound only refuses nonsense.
LIMITS = dict(vocab_size=1 << 21, dim=1 << 16, n_layers=1 << 10, n_heads=1 << 10, n_kv_heads=1 << 10,
              head_dim=1 << 12, hidden_dim=1 << 18, max_seq_len=1 << 30)
# A mixture of experts' counts (0: a dense model), bounded as the sizes above are: a config.json saying a
# million experts is refused before a million expert MLPs are built (the largest open MoE: 384 experts, Kimi K2)
COUNTS = dict(n_experts=(0, 1 << 10), n_experts_per_tok=(1, 1 << 10), n_shared_experts=(0, 1 << 10),
              moe_hidden_dim=(0, 1 << 18), n_dense_layers=(0, 1 << 10), n_expert_groups=(1, 1 << 10),
              n_topk_groups=(1, 1 << 10))
# Scale-like floats: finite, positive and within a range around every published value (rope_theta 1e4-1e7,
# rms_norm_eps 1e-12 (BERT) to 1e-5, routed_scaling_factor 1 to 16 (DeepSeek-V2)). Outside it a forward
# overflows (a scale of 1e308 makes every MoE output inf, which int8's activation quantizer cannot take) or
# an eps below float32's smallest normal divides a zero row by zero.
SCALES = dict(rope_theta=(1.0, 1e12), norm_eps=(1e-12, 1.0), routed_scaling=(1e-6, 1e3))
OPTIONAL = ("n_kv_heads", "head_dim", "hidden_dim")  # None in a config: derived from the others
# The most a checkpoint's JSON side file (config.json, the safetensors index, tokenizer_config.json) is
# read into memory: published ones are a few KB to a few MB.
MAX_JSON = 64 << 20


def strict_from_dict(cls, d: dict, what: str):
    """cls(**d), rejecting unknown keys loudly (a typo in a config must not be silently ignored)."""
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"unknown {what} keys: {', '.join(unknown)}")
    return cls(**d)


def size_problem(name: str, value) -> str | None:
    """Why `value` cannot be ModelConfig's `name`, worded to follow the key ("should be ..., got ..."),
    or None when it can. Integers only for the sizes (a float such as 1e9 is a config at fault)."""
    if name in LIMITS and (type(value) is not int or not 1 <= value <= LIMITS[name]):
        return f"should be an integer from 1 to {LIMITS[name]}, got {reprlib.repr(value)}"
    if name in COUNTS and (type(value) is not int or not COUNTS[name][0] <= value <= COUNTS[name][1]):
        return f"should be an integer from {COUNTS[name][0]} to {COUNTS[name][1]}, got {reprlib.repr(value)}"
    if name in SCALES:
        if type(value) not in (int, float) or not 0 < value < math.inf:
            return f"should be a positive number, got {reprlib.repr(value)}"
        lo, hi = SCALES[name]
        if not lo <= value <= hi:
            return f"should be a number from {lo:g} to {hi:g}, got {value:g}"
    return None


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
    o_bias: bool = False  # a bias on the attention output projection (LLaDA2's use_bias)
    rope_dim: int | None = None  # dims of each head RoPE rotates, the first ones; None: all (LLaDA2: half)
    # block-causal attention (block diffusion: Stable-DiffCoder, LLaDA2): a position sees its own block of
    # block_size positions and the blocks before it; None: every position sees every other
    block_size: int | None = None
    # mixture of experts (LLaDA2): 0 experts is a dense model; layers from n_dense_layers on are sparse
    n_experts: int = 0
    n_experts_per_tok: int = 1
    n_shared_experts: int = 0
    moe_hidden_dim: int = 0  # each expert's SwiGLU width (a shared expert's too)
    n_dense_layers: int = 0
    n_expert_groups: int = 1
    n_topk_groups: int = 1
    routed_scaling: float = 1.0

    def __post_init__(self):
        # the sizes given first (dim % n_heads below must not divide by zero), the derived ones once derived
        self._check([n for n in (*LIMITS, *COUNTS, *SCALES) if getattr(self, n) is not None or n not in OPTIONAL])
        self.rope_theta, self.norm_eps = float(self.rope_theta), float(self.norm_eps)
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.head_dim is None:
            if self.dim % self.n_heads:
                raise ValueError(f"dim={self.dim} is not divisible by n_heads={self.n_heads}")
            self.head_dim = self.dim // self.n_heads
        if self.hidden_dim is None:
            self.hidden_dim = -(-int(8 * self.dim / 3) // 64) * 64
        self._check(OPTIONAL)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.rope_dim is None:
            self.rope_dim = self.head_dim
        if type(self.rope_dim) is not int or not 2 <= self.rope_dim <= self.head_dim or self.rope_dim % 2:
            raise ValueError(f"rope_dim should be an even integer from 2 to head_dim={self.head_dim}, "
                             f"got {reprlib.repr(self.rope_dim)}")
        if self.block_size is not None and (type(self.block_size) is not int or not 1 <= self.block_size):
            raise ValueError(f"block_size should be a positive integer or None, got {reprlib.repr(self.block_size)}")
        if self.n_experts:
            self._check_moe()

    def _check_moe(self) -> None:
        ints = dict(n_experts=(1, LIMITS["n_layers"]), n_experts_per_tok=(1, self.n_experts),
                    n_shared_experts=(0, self.n_experts), moe_hidden_dim=(1, LIMITS["hidden_dim"]),
                    n_dense_layers=(0, self.n_layers), n_expert_groups=(1, self.n_experts),
                    n_topk_groups=(1, self.n_expert_groups))
        for name, (lo, hi) in ints.items():
            value = getattr(self, name)
            if type(value) is not int or not lo <= value <= hi:
                raise ValueError(f"{name} should be an integer from {lo} to {hi}, got {reprlib.repr(value)}")
        if self.n_experts % self.n_expert_groups or self.n_experts // self.n_expert_groups < 2:
            raise ValueError(f"n_experts={self.n_experts} does not split into n_expert_groups="
                             f"{self.n_expert_groups} groups of two or more")
        if self.n_topk_groups * (self.n_experts // self.n_expert_groups) < self.n_experts_per_tok:
            raise ValueError(f"n_topk_groups={self.n_topk_groups} groups hold fewer than n_experts_per_tok="
                             f"{self.n_experts_per_tok} experts")

    def _check(self, names) -> None:
        for name in names:
            problem = size_problem(name, getattr(self, name))
            if problem:
                raise ValueError(f"{name} {problem}")

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
        attn += d if self.o_bias else 0
        per_layer = attn + 3 * d * self.hidden_dim + 2 * d + (2 * hd if self.qk_norm else 0)
        sparse = self.n_layers - self.n_dense_layers if self.n_experts else 0
        moe = self.n_experts * d + 3 * d * self.moe_hidden_dim * (self.n_experts + self.n_shared_experts)
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return (self.vocab_size * d + self.n_layers * per_layer + sparse * (moe - 3 * d * self.hidden_dim)
                + d + head)


# Shapes of the open checkpoints are taken from their published config.json files.
PRESETS: dict[str, dict] = {
    "tiny": dict(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=512),
    "small": dict(vocab_size=8192, dim=256, n_layers=6, n_heads=8, n_kv_heads=4, max_seq_len=1024),
    "base": dict(vocab_size=8192, dim=384, n_layers=8, n_heads=6, n_kv_heads=2, max_seq_len=1024),
    "dream-7b": dict(  # Dream-v0-Base-7B, Dream-Coder-7B, DiffuCoder-7B, DreamOn-7B (Qwen2.5-7B)
        vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, hidden_dim=18944,
        max_seq_len=131072, rope_theta=1e6, qkv_bias=True, tie_embeddings=False, shift_logits=True,
    ),
    # Qwen2.5-0.5B (and Qwen2.5-Coder-0.5B), from the published config.json of huggingface.co/Qwen/Qwen2.5-0.5B:
    # hidden_size 896, intermediate_size 4864, 24 layers, 14 / 2 heads, vocab_size 151936, rope_theta 1e6,
    # rms_norm_eps 1e-6, tie_word_embeddings true, 32768 positions. The shape of the 0.5B Qwen-family
    # diffusion coders (Open-dCoder 0.5B); `bench sampler` and `bench gpu` time its output head.
    "qwen2.5-0.5b": dict(
        vocab_size=151936, dim=896, n_layers=24, n_heads=14, n_kv_heads=2, hidden_dim=4864,
        max_seq_len=32768, rope_theta=1e6, qkv_bias=True,
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


def regular_file(path: Path, limit: int | None = None) -> int:
    """path's size in bytes; ValueError naming the file when it is not a regular file (opening a FIFO
    waits for a writer that never comes: a folder holding one must fail, not hang) or when it holds
    more than `limit` bytes. Checked before any open."""
    try:
        st = path.stat()
    except OSError as e:
        raise ValueError(f"cannot read {path.name} ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device")
        raise ValueError(f"{path.name} is {kind}, not a regular file")
    if limit is not None and st.st_size > limit:
        raise ValueError(f"{path.name} is {st.st_size:,} bytes, more than the {limit >> 20} MB such a file may hold")
    return st.st_size


def read_text(path: Path, limit: int = MAX_JSON) -> str:
    """A checkpoint's small text file, or a file given at launch (--chat-template), read by input_files
    (opened without blocking, a regular file, at most `limit` bytes even from a file that grows
    meanwhile); ValueError naming it (input_files.Refused is one) when it cannot be read or is not UTF-8."""
    data = read_bytes(str(path), limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path.name} is not readable as UTF-8 (bad byte at offset {e.start})") from None


def read_json(path: Path, limit: int = MAX_JSON):
    """The JSON value in a checkpoint's file; ValueError in one line naming it for anything read_text
    refuses, for bad JSON and for JSON nested past Python's recursion limit (json raises RecursionError)."""
    text = read_text(path, limit)
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{path.name} is not valid JSON (nested too deeply)") from None
    except ValueError as e:  # JSONDecodeError; also an integer of more than 4300 digits
        raise ValueError(f"{path.name} is not valid JSON ({e})") from None


CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "diffusion-lsp-checkpoint", 1  # our own folders
ADAPTER_META = "adapter.json"  # a folder of low-rank adapters names its base model here
ADAPTER_FORMAT, ADAPTER_VERSION = "diffusion-lsp-adapter", 1


def adapter_base(folder: str | Path) -> Path | None:
    """The base model folder an adapter folder names; None for any other folder, or
    when its adapter.json cannot be read (loading it says why)."""
    path = Path(folder) / ADAPTER_META
    if not path.is_file():
        return None
    try:
        meta = read_json(path)
    except ValueError:
        return None
    base = meta.get("base") if isinstance(meta, dict) else None
    return Path(base) if isinstance(base, str) and base else None
