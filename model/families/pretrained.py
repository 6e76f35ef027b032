"""Hugging Face model folders as published (Dream, DiffuCoder, Open-dCoder, CoDA, LLaDA, Stable-DiffCoder,
LLaDA2): config.json, model.safetensors or shards listed in model.safetensors.index.json, tokenizer.json.
The family table is table.py; this module reads the folder into our DiffusionTransformer.

Nothing from the folder is run (no auto_map code) and nothing is unpickled: safetensors only. Weights
are read one tensor at a time (plain reads at the offsets the safetensors header gives) into a model
built on the meta device, so the peak memory is about the model's own size, not twice it (measured on
a 0.5 B bf16 folder: fp32 load peak 2.20 GB for 1.98 GB of weights; int8 load 1.71 GB).
int8 is model/network/quantize.py's, adapters lora.py's, DreamOn's decoding dreamon.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from tokenizers import Tokenizer as HFTokenizer
from torch import nn

from .checkpoint import (CheckpointError, check_bounds, check_finite, check_sizes, load_checkpoint,
                         tensor_shapes)
from ..network.config import ADAPTER_META, ModelConfig, SpecialTokens, read_json
from .table import Family, detect_family, supported
from .hf_tokenizer import configured_token, load_tokenizer_files
from ..network.tokenizer import Tokenizer
from ..network.transformer import DiffusionTransformer

INDEX = "model.safetensors.index.json"
PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
IGNORED = re.compile(r".*rotary_emb\.inv_freq$")  # buffers some old saves carry; recomputed here


class PretrainedLM(nn.Module):
    """The public face of a loaded checkpoint: model(ids [B, L]) -> raw logits [B, L, V] in the
    checkpoint's own convention, as its modeling code gives them under full bidirectional attention, or
    block-causal for the block-diffusion families (config.block_size), as their generate() masks them
    (shifted families: output i predicts token i + 1). The sampler uses `.transformer` directly."""

    def __init__(self, transformer: DiffusionTransformer):
        super().__init__()
        self.transformer = transformer
        self.config = transformer.config

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """attention_mask [B, L]: 1 for tokens, 0 for padding (left or right); positions count tokens only."""
        key_mask = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        positions = (key_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, L]
        return self.transformer(ids, positions, key_mask)[0]


def is_hf_folder(folder: Path) -> bool:
    """config.json is a Hugging Face config: a JSON object without our format marker."""
    try:
        config = read_json(folder / "config.json")
    except ValueError:
        return False  # load_checkpoint says what is wrong
    return isinstance(config, dict) and "format" not in config and ("model_type" in config or "architectures" in config)


def read_hf_config(folder: Path) -> tuple[dict, Family]:
    try:
        config = read_json(folder / "config.json")
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"checkpoint {folder}: config.json holds a {type(config).__name__}, not an object")
    family = detect_family(config)
    if family is None:
        raise CheckpointError(f"checkpoint {folder}: unknown model family (model_type {config.get('model_type')!r}, "
                              f"architectures {config.get('architectures')}); supported: {supported()}")
    problems = family.unsupported(config)
    if problems:
        raise CheckpointError(f"checkpoint {folder}: {family.name} config.json asks for what this loader cannot "
                              f"run: {', '.join(problems)}")
    return config, family


def weight_headers(folder: Path) -> dict[str, tuple[Path, list[int]]]:
    """Tensor name -> (the safetensors file that holds it, its shape), read from each file's header
    and checked against the index when there is one. No tensor is read."""
    index = folder / INDEX
    if index.exists():  # not is_file(): a FIFO or a folder by that name is an error, not "no index"
        try:
            weight_map = read_json(index)["weight_map"]
        except ValueError as e:
            raise CheckpointError(f"checkpoint {folder}: {e}") from None
        except (KeyError, TypeError) as e:
            raise CheckpointError(f"checkpoint {folder}: {INDEX} is not a valid index (no weight_map: {e})") from None
        if not isinstance(weight_map, dict) or not all(
                isinstance(v, str) and v and Path(v).name == v and v != ".." for v in weight_map.values()):
            raise CheckpointError(f"checkpoint {folder}: {INDEX} is not a valid index (its weight_map should map "
                                  f"tensor names to file names in the folder)")
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (folder / f).exists()]
        if missing:
            raise CheckpointError(f"checkpoint {folder}: {INDEX} lists {', '.join(missing)}, which "
                                  f"{'is' if len(missing) == 1 else 'are'} missing")
    elif (folder / "model.safetensors").exists():
        files, weight_map = ["model.safetensors"], None
    else:
        pickled = sorted(p.name for pattern in PICKLED for p in folder.glob(pattern))
        others = sorted(p.name for p in folder.glob("*.safetensors"))
        what = (f"only pickled weights ({', '.join(pickled)}), which are never unpickled here" if pickled and not others
                else f"no model.safetensors and no {INDEX} (found {', '.join(others + pickled)})" if others
                else "no weights")
        raise CheckpointError(f"checkpoint {folder} has {what}; supported: model.safetensors, or shards "
                              f"model-0000k-of-0000n.safetensors with {INDEX}")
    where = {}
    for name in files:
        where.update((k, (folder / name, shape)) for k, shape in tensor_shapes(folder, folder / name).items())
    lost = sorted(set(weight_map or ()) - set(where))
    if lost:
        raise CheckpointError(f"checkpoint {folder}: {INDEX} lists tensors its shards do not hold: "
                              f"{', '.join(lost[:3])}")
    return where


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it (weight_headers without the shapes)."""
    return {name: path for name, (path, _) in weight_headers(folder).items()}


def load_hf_tokenizer(folder: Path) -> HFTokenizer:
    try:
        return load_tokenizer_files(folder)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None


MASK_KEYS = ", config.json's mask_token_id and tokenizer_config.json's mask_token"  # where else a mask is named


def special_tokens(hf: HFTokenizer, family: Family, config: dict, folder: Path) -> SpecialTokens:
    """The family's token names that this vocab has: the mask is config.json's mask_token_id when it
    names a token, else tokenizer_config.json's mask_token when the vocab has it, else the family's name for it. A vocab with the family's expand token (or config.json's
    expand_token_id) is DreamOn's: extra "expand" and "eos" (the end-of-text token that deletes)."""

    def first(names, taken=()):
        return next((n for n in names if n not in taken and hf.token_to_id(n) is not None), None)

    def named(key):  # the token config.json names by id; None when the id is not the vocab's
        i = config.get(key)
        return hf.id_to_token(i) if type(i) is int and 0 <= i < hf.get_vocab_size() else None

    def configured(key):  # the token tokenizer_config.json names (Open-dCoder's "<M>"); None when not the vocab's
        try:
            name = configured_token(folder, key)
        except ValueError as e:
            raise CheckpointError(f"checkpoint {folder}: {e}") from None
        return name if name is not None and hf.token_to_id(name) is not None else None

    mask = named("mask_token_id") or configured("mask_token") or first(family.mask)
    filler = first(family.filler, {mask})
    bos = first(family.bos, {mask, filler})
    needed = [("mask", mask, family.mask), ("filler", filler, family.filler)]
    needed += [("bos", bos, family.bos)] if family.shift_logits else []  # sampler: shifted logits need a bos
    for role, name, names in needed:
        if name is None:
            raise CheckpointError(f"checkpoint {folder}: the tokenizer has no {role} token (looked for "
                                  f"{', '.join(names)}{MASK_KEYS if role == 'mask' else ''}); "
                                  f"a {family.name} checkpoint needs one")
    expand = named("expand_token_id") or first(family.expand)
    if expand is None:
        return SpecialTokens(mask=mask, filler=filler, bos=bos)
    eos = first(family.end, {mask, bos, expand})
    if eos is None:
        raise CheckpointError(f"checkpoint {folder}: the tokenizer has the expand token {expand} but no end-of-text "
                              f"token (looked for {', '.join(family.end) or 'none: the family has no expand'})")
    return SpecialTokens(mask=mask, filler=filler, bos=bos, extra={"expand": expand, "eos": eos})


def _theirs(family: Family, ours: str) -> str | None:
    """The checkpoint's name for one of our state_dict names (None: the family has no such tensor).
    Numbers in the name are the layer ({i}) and, in a mixture of experts, the expert ({e})."""
    parts = ours.split(".")
    numbers = dict(zip("ie", (p for p in parts if p.isdigit())))
    slots = iter(("{i}", "{e}"))
    template = family.tensors.get(".".join(next(slots) if p.isdigit() else p for p in parts))
    return template and template.format(**numbers)


_QKV = re.compile(r"layers\.\d+\.attn\.([qkv])_proj\.(weight|bias)$")


def _fused_rows(family: Family, cfg: ModelConfig, ours: str) -> tuple[int, int, int] | None:
    """(first row, rows, the fused tensor's rows) of our q/k/v projection in the checkpoint's fused
    query_key_value tensor, whose rows are q heads | k heads | v heads (LLaDA2MoeAttention's split);
    None for any other tensor."""
    m = _QKV.match(ours) if family.fused_qkv else None
    if m is None:
        return None
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[m[1]] + (q + 2 * kv,)


def model_config(config: dict, family: Family, shapes: dict[str, list[int]], folder: Path) -> ModelConfig:
    """ModelConfig from config.json's sizes, each within config.size_problem's bounds and checked against
    the tensors' shapes (shapes: the files' tensor name -> shape, headers only), and the tensors'
    presence for the structural flags. Errors name the config.json key at fault."""
    try:
        read = family.config(config)  # field -> (config.json key, value)
    except KeyError as e:
        raise CheckpointError(f"checkpoint {folder}: config.json has no {e.args[0]!r} ({family.name} family)") from None
    except ValueError as e:  # a value no size can be derived from (the family names its key)
        raise CheckpointError(f"checkpoint {folder}: config.json {e}") from None
    check_bounds(read, folder)
    flags = dict(
        qkv_bias=_theirs(family, "layers.0.attn.q_proj.bias") in shapes,
        qk_norm=_theirs(family, "layers.0.attn.q_norm.weight") in shapes,
        o_bias=_theirs(family, "layers.0.attn.o_proj.bias") in shapes,
        tie_embeddings=bool(config.get(family.tie_key)) or family.tensors["lm_head.weight"] not in shapes,
        shift_logits=family.shift_logits,
    )
    try:
        cfg = ModelConfig(**{k: v for k, (_, v) in read.items() if v is not None}, **flags)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: bad config.json ({e})") from None
    def sized(ours: str) -> str | None:  # a fused q | k | v tensor is sized in _read_weights, by its parts
        return None if family.fused_qkv and _QKV.match(ours) else _theirs(family, ours)

    check_sizes(cfg, shapes, sized, lambda field: read.get(field, (field,))[0], folder)
    return cfg


def weights_dtype(config: dict, device, dtype: torch.dtype | None = None) -> torch.dtype:
    """dtype when given; else float32 on CPU (int8 is quantized after loading) and the checkpoint's
    own elsewhere: torch_dtype (transformers 4.x) or dtype (5.x), float32 when neither names a float type."""
    if dtype is not None:
        return dtype
    if torch.device(device).type == "cpu":
        return torch.float32
    return DTYPES.get(str(config.get("torch_dtype") or config.get("dtype")), torch.float32)


def _read_weights(model: DiffusionTransformer, family: Family, where: dict[str, tuple[Path, list[int]]], device,
                  dtype, folder: Path) -> dict[str, torch.Tensor]:
    expected = {ours: _theirs(family, ours) for ours in model.state_dict()}
    missing = sorted(t for t in expected.values() if t not in where)
    unused = sorted(t for t in set(where) - set(expected.values())
                    if not IGNORED.match(t) and not (model.lm_head is None and t == family.tensors["lm_head.weight"]))
    if missing or unused:
        parts = ([f"missing {', '.join(missing[:4])}"] if missing else []) + (
            [f"unexpected {', '.join(unused[:4])}"] if unused else [])
        raise CheckpointError(f"checkpoint {folder}: tensors do not match the {family.name} layout "
                              f"({'; '.join(parts)})")
    params = model.state_dict()
    rows = {ours: _fused_rows(family, model.config, ours) for ours in expected}
    for ours, theirs in expected.items():  # every shape, from the headers, before a byte of data is read
        want = list(params[ours].shape)
        if rows[ours]:
            want[0] = rows[ours][2]
        if list(where[theirs][1]) != want:
            raise CheckpointError(f"checkpoint {folder}: config.json and the weights do not match ({theirs} is "
                                  f"{list(where[theirs][1])}, config.json gives {want})")
    state = {}
    by_file: dict[Path, list[str]] = {}
    for ours, theirs in expected.items():
        by_file.setdefault(where[theirs][0], []).append(ours)
    for path, ours_names in by_file.items():
        try:
            with open(path, "rb") as f:
                header, base = _header(f)
                for ours in ours_names:
                    # one tensor at a time: read, cast, move; the read buffer is freed before the next
                    tensor = _read_tensor(f, header[expected[ours]], base)
                    if rows[ours]:  # our part of a fused q | k | v tensor (read once per part)
                        tensor = tensor[rows[ours][0]:rows[ours][0] + rows[ours][1]].clone()
                    state[ours] = tensor.to(device=device, dtype=dtype)
                    check_finite(expected[ours], state[ours], f"checkpoint {folder}: {path.name}")
        except CheckpointError:
            raise
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise CheckpointError(f"checkpoint {folder}: {path.name} is corrupt ({e})") from None
    return state


# safetensors dtype names -> torch; the tensors are read with plain file reads, not through safetensors'
# memory map: a tensor that needs no cast would stay a view of the map, which keeps the whole mapped
# file counted in RSS while the model lives (measured: +900 MB peak for a 0.5 B int8 load)
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}
MAX_HEADER = 100 << 20  # safetensors' own limit on the JSON header


def _header(f) -> tuple[dict, int]:
    """(tensor name -> {dtype, shape, data_offsets}, offset of the data) of an open safetensors file."""
    size = int.from_bytes(f.read(8), "little")
    if not 0 < size <= MAX_HEADER:
        raise ValueError(f"header size {size}")
    header = json.loads(f.read(size))
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return header, 8 + size


def _read_tensor(f, entry: dict, base: int) -> torch.Tensor:
    dtype = _ST_DTYPES.get(entry["dtype"])
    start, end = entry["data_offsets"]
    shape = [int(d) for d in entry["shape"]]
    numel = 1
    for d in shape:
        numel *= d
    if dtype is None or not 0 <= start <= end or end - start != numel * dtype.itemsize:
        raise ValueError(f"a tensor entry that does not add up: {entry}")
    buf = bytearray(end - start)
    f.seek(base + start)
    if f.readinto(buf) != len(buf):
        raise ValueError("the file is shorter than its header says")
    if not buf:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(buf, dtype=dtype).reshape(shape)


def load_hf_folder(folder: str | Path, device: str | torch.device = "cpu",
                   dtype: torch.dtype | None = None) -> tuple[DiffusionTransformer, Tokenizer, dict]:
    """A Hugging Face folder -> (model, tokenizer, config.json plus "family"). dtype None: float32 on
    CPU, the checkpoint's own (torch_dtype / dtype) elsewhere."""
    folder = Path(folder)
    config, family = read_hf_config(folder)
    where = weight_headers(folder)
    cfg = model_config(config, family, {name: shape for name, (_, shape) in where.items()}, folder)
    hf = load_hf_tokenizer(folder)
    tokenizer = Tokenizer(hf, special_tokens(hf, family, config, folder))  # every name checked: cannot raise
    if tokenizer.vocab_size > cfg.vocab_size:
        raise CheckpointError(f"checkpoint {folder}: tokenizer has {tokenizer.vocab_size} tokens but the "
                              f"model only {cfg.vocab_size}")
    dtype = weights_dtype(config, device, dtype)
    with torch.device("meta"):
        model = DiffusionTransformer(cfg)
    model.load_state_dict(_read_weights(model, family, where, device, dtype, folder), strict=True, assign=True)
    name = "dreamon" if "expand" in tokenizer.special.extra else family.name  # variable length: DreamOn's decoding
    return model.eval(), tokenizer, {**config, "family": name}


def load_folder(folder: str | Path, device: str | torch.device = "cpu",
                dtype: torch.dtype | None = None) -> tuple[DiffusionTransformer, Tokenizer, dict]:
    """Our own checkpoint format, a Hugging Face folder (told apart by config.json), or a folder of
    low-rank adapters merged into the base model it names; weights in `dtype`, or
    when None float32 for our own format and as `weights_dtype` says for a Hugging Face one."""
    folder = Path(folder)
    if (folder / ADAPTER_META).is_file():
        return load_adapted(folder, device, dtype)
    if is_hf_folder(folder):
        return load_hf_folder(folder, device, dtype)
    return load_checkpoint(folder, device, dtype or torch.float32)


def load_adapted(folder: Path, device, dtype: torch.dtype | None = None) -> tuple[DiffusionTransformer, Tokenizer, dict]:
    """An adapter folder: its base model loaded (in `dtype`, as `load_folder` loads it), checked against
    the fingerprint the adapter was trained on, and the adapters merged into its weights (inference
    runs the base model's code; LoRALinear.merged adds B A in float32 and rounds the sum to `dtype`)."""
    from .lora import attach, base_id, merge, read_meta

    try:
        meta = read_meta(folder)
    except ValueError as e:
        raise CheckpointError(f"adapter {folder}: {e}") from None
    base = Path(meta["base"])
    if (base / ADAPTER_META).is_file():
        raise CheckpointError(f"adapter {folder}: its base {base} is an adapter too")
    if not (base / "config.json").is_file():
        raise CheckpointError(f"adapter {folder}: its base model {base} is not there")
    if base_id(base) != meta.get("base_id"):
        raise CheckpointError(f"adapter {folder}: its base model {base} changed since it was adapted; "
                              "adapt again (`diffusion-lsp adapt`)")
    model, tokenizer, config = load_folder(base, device, dtype)
    try:
        merged = merge(attach(model, folder))
    except ValueError as e:
        raise CheckpointError(f"adapter {folder}: {e}") from None
    return merged.eval(), tokenizer, {**config, "adapter": meta}


def load_pretrained(path: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> tuple[PretrainedLM, Tokenizer]:
    """(model, tokenizer) for a checkpoint folder: model(ids) -> raw logits [B, L, V]; tokenizer.encode,
    .decode and .mask_id. Raises CheckpointError for anything it cannot load."""
    model, tokenizer, _ = load_folder(path, device, dtype)
    return PretrainedLM(model), tokenizer
