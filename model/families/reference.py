"""transformers' own forward for a Hugging Face folder, under full bidirectional attention: the
reference that `diffusion-lsp model check` compares our loader with ("is my checkpoint loaded
right?"). transformers is a test extra, never needed at run time: it is imported on use.

The reference is built from the folder's own config.json and tensor files, not from our mapping of
them (table.py), so a wrong key or tensor name on our side shows up as a difference: Dream and
Qwen2-layout checkpoints as Qwen2ForCausalLM, CoDA as Qwen3ForCausalLM, LLaDA as LlamaForCausalLM with
LLaDA's tensor names renamed (OLMo-style blocks: ff_proj is the gate, up_proj the up, ff_out the down
projection), Stable-DiffCoder as LlamaForCausalLM (its modeling file subclasses it and changes only
generate) under its generate_block's block-causal mask. LLaDA2 has no transformers class (its modeling
file is remote code, never run here): tests/family_references.py re-implements it for the tests. The
non-causal switch is a 4D additive float mask (0 where attended, finfo.min on
padding) with explicit position_ids: it works in transformers 4.5x and 5.x, while is_causal=False is
ignored by eager attention in 4.57 and a 4D bool mask with padding is wrong in eager. Eager attention
is chosen through a private config attribute, so hf_private.py holds the release to its supported range."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import safe_open

from .table import Family, detect_family
from .hf_private import eager_attention
from .pretrained import weight_files

_LLADA_TO_LLAMA = [  # LLaDA name pattern -> Llama name
    (r"model\.transformer\.wte\.weight", "model.embed_tokens.weight"),
    (r"model\.transformer\.ln_f\.weight", "model.norm.weight"),
    (r"model\.transformer\.ff_out\.weight", "lm_head.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.ff_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.([qkv])_proj\.(weight|bias)", r"model.layers.\1.self_attn.\2_proj.\3"),
    (r"model\.transformer\.blocks\.(\d+)\.attn_out\.weight", r"model.layers.\1.self_attn.o_proj.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.ff_proj\.weight", r"model.layers.\1.mlp.gate_proj.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.up_proj\.weight", r"model.layers.\1.mlp.up_proj.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.ff_out\.weight", r"model.layers.\1.mlp.down_proj.weight"),
]
CLASSES = {"dream": "Qwen2ForCausalLM", "qwen2": "Qwen2ForCausalLM", "coda": "Qwen3ForCausalLM",
            "llada": "LlamaForCausalLM", "stable-diffcoder": "LlamaForCausalLM"}  # family -> transformers class
_DROP = ("model_type", "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version")


def _llama_name(name: str) -> str:
    for pattern, repl in _LLADA_TO_LLAMA:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, repl, name)
    return name


def _reference_config(config: dict, family: Family, qkv_bias: bool):
    import transformers

    if family.name == "stable-diffcoder":  # diffusion_block_size: read by reference_logits
        return transformers.LlamaConfig(**{k: v for k, v in config.items() if k not in _DROP},
                                        diffusion_block_size=family.config(config)["block_size"][1])
    if family.name == "llada":
        c = config
        return transformers.LlamaConfig(
            vocab_size=c.get("embedding_size") or c["vocab_size"], hidden_size=c["d_model"],
            num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"],
            num_key_value_heads=c.get("n_kv_heads") or c["n_heads"],
            intermediate_size=c.get("mlp_hidden_size") or c.get("mlp_ratio", 4) * c["d_model"],
            rope_theta=c.get("rope_theta", 10000.0), rms_norm_eps=c.get("rms_norm_eps", 1e-5),
            max_position_embeddings=c.get("max_sequence_length", 4096),
            tie_word_embeddings=bool(c.get("weight_tying", False)), attention_bias=qkv_bias)
    cls = transformers.Qwen3Config if family.name == "coda" else transformers.Qwen2Config
    return cls(**{k: v for k, v in config.items() if k not in _DROP})


def reference_model(folder: str | Path):
    """transformers' model for the folder, float32 on CPU, eager attention."""
    import transformers

    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    family = detect_family(config)
    if family is None or family.name not in CLASSES:
        raise ValueError(f"{folder}: transformers has no class for model_type {config.get('model_type')!r} "
                         f"(family {family and family.name}); pass --no-reference")
    state = {}
    for path in sorted(set(weight_files(folder).values())):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                key = _llama_name(name) if family.name == "llada" else name
                state[key] = f.get_tensor(name).float()
    cfg = _reference_config(config, family, any(k.endswith("self_attn.q_proj.bias") for k in state))
    eager_attention(cfg)
    model = getattr(transformers, CLASSES[family.name])(cfg).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    if set(missing) - allowed or [k for k in unexpected if not k.endswith("rotary_emb.inv_freq")]:
        raise ValueError(f"{folder}: the reference model did not take the weights (missing {sorted(missing)[:4]}, "
                         f"unexpected {sorted(unexpected)[:4]})")
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model


@torch.inference_mode()
def reference_logits(model, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """ids [B, L] (padding where attention_mask is 0) -> logits [B, L, V], every token attending to
    every non-padding token, or for a block-diffusion reference to those of its own block and the ones
    before it (blocks counted from position 0, as Stable-DiffCoder's _make_block_causal_mask)."""
    keep = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    dtype = next(model.parameters()).dtype
    positions = (keep.long().cumsum(-1) - 1).clamp(min=0)
    seen = keep[:, None, None, :]  # [B, 1, 1, L]
    block = model.config.to_dict().get("diffusion_block_size")
    if block:
        seen = seen & ((positions // block)[:, None, None, :] <= (positions // block)[:, None, :, None])
    mask = torch.zeros(ids.shape[0], 1, ids.shape[1], ids.shape[1], dtype=dtype)
    mask = mask.masked_fill(~seen, torch.finfo(dtype).min)  # [B, 1, L, L]
    return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
