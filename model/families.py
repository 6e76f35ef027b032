"""The open diffusion checkpoint families as data: how to recognise one from its Hugging Face
config.json, how its keys map onto ModelConfig, how its tensor names map onto ours, and which
special tokens it infills with. pretrained.py does the loading; nothing here touches the disk.

Families (each read from the published config.json and modeling files; nothing from them is run):
- dream: Dream-v0-Base/Instruct-7B, Dream-Coder, DreamOn, DiffuCoder (`model_type: "Dream"`): Qwen2
  layout, logits shifted (Dream's generate moves output i to predict token i + 1). DreamOn is told apart
  by its vocab's `<|expand|>` (or config.json's expand_token_id): pretrained.py names it "dreamon".
- qwen2: Qwen2-layout diffusion checkpoints published as plain Qwen2 (Open-dCoder-0.5B): trained from an
  autoregressive Qwen2.5 like Dream, so shifted as Dream is (an assumption: their card says AR-initialised).
- coda: CoDA-v0 (Salesforce), Qwen3 layout (per-head q/k RMSNorm, explicit head_dim), shifted.
- llada: LLaDA-8B-Base/Instruct (`model_type: "llada"`, OLMo-style names), logits in place.

Structural flags (q/k/v bias, q/k norm, tied head) are read from which tensors the checkpoint has,
not from config keys, so a checkpoint cannot say one thing and hold another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# our state_dict name (with {i} for the layer) -> the Qwen2/Qwen3/Dream name
QWEN_TENSORS = {
    "embed.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
    "layers.{i}.input_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.post_attn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    **{f"layers.{{i}}.attn.{p}_proj.{w}": f"model.layers.{{i}}.self_attn.{p}_proj.{w}"
       for p in "qkv" for w in ("weight", "bias")},
    "layers.{i}.attn.o_proj.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.attn.q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
    "layers.{i}.attn.k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
    **{f"layers.{{i}}.mlp.{p}_proj.weight": f"model.layers.{{i}}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")},
}

# LLaDA's modeling_llada.py (an OLMo fork): LLaDALlamaBlock computes ff_out(silu(ff_proj(x)) * up_proj(x)),
# so ff_proj is the gate, up_proj the up and ff_out the down projection; transformer.ff_out is the head.
LLADA_TENSORS = {
    "embed.weight": "model.transformer.wte.weight",
    "norm.weight": "model.transformer.ln_f.weight",
    "lm_head.weight": "model.transformer.ff_out.weight",
    "layers.{i}.input_norm.weight": "model.transformer.blocks.{i}.attn_norm.weight",
    "layers.{i}.post_attn_norm.weight": "model.transformer.blocks.{i}.ff_norm.weight",
    **{f"layers.{{i}}.attn.{p}_proj.{w}": f"model.transformer.blocks.{{i}}.{p}_proj.{w}"
       for p in "qkv" for w in ("weight", "bias")},
    "layers.{i}.attn.o_proj.weight": "model.transformer.blocks.{i}.attn_out.weight",
    "layers.{i}.mlp.gate_proj.weight": "model.transformer.blocks.{i}.ff_proj.weight",
    "layers.{i}.mlp.up_proj.weight": "model.transformer.blocks.{i}.up_proj.weight",
    "layers.{i}.mlp.down_proj.weight": "model.transformer.blocks.{i}.ff_out.weight",
}


_REQUIRED = object()


def _read(c: dict, *keys: str, default=_REQUIRED) -> tuple[str, object]:
    """(the first of `keys` that config.json sets, its value), so that a bad value is reported under the
    key it came from; (keys[0], default) when none is set; KeyError(keys[0]) when required."""
    for key in keys:
        if c.get(key) is not None:
            return key, c[key]
    if default is _REQUIRED:
        raise KeyError(keys[0])
    return keys[0], default


def _object(c: dict, key: str) -> dict:
    value = c.get(key)
    return value if isinstance(value, dict) else {}


def _rope_theta(c: dict, default: float) -> tuple[str, object]:
    """rope_theta top-level (transformers 4.x, Dream, LLaDA) or under rope_parameters (transformers 5.x)."""
    if c.get("rope_theta") is None and _object(c, "rope_parameters").get("rope_theta") is not None:
        return "rope_parameters.rope_theta", c["rope_parameters"]["rope_theta"]
    return _read(c, "rope_theta", default=default)


def _qwen_unsupported(c: dict) -> list[str]:
    out = []
    if c.get("hidden_act", "silu") != "silu":
        out.append(f"hidden_act {c['hidden_act']!r}")
    for key in ("rope_scaling", "rope_parameters"):
        if c.get(key) is not None and not isinstance(c[key], dict):
            out.append(f"{key} that is not an object")
            continue
        kind = _object(c, key).get("rope_type", _object(c, key).get("type", "default"))
        if kind != "default":
            out.append(f"{key} of type {kind!r}")
    if c.get("use_sliding_window"):
        out.append("use_sliding_window")
    return out


def _qwen_config(c: dict) -> dict[str, tuple[str, object]]:
    return dict(
        vocab_size=_read(c, "vocab_size"), dim=_read(c, "hidden_size"), n_layers=_read(c, "num_hidden_layers"),
        n_heads=_read(c, "num_attention_heads"), n_kv_heads=_read(c, "num_key_value_heads", "num_attention_heads"),
        head_dim=_read(c, "head_dim", default=None), hidden_dim=_read(c, "intermediate_size"),
        max_seq_len=_read(c, "max_position_embeddings", default=32768), rope_theta=_rope_theta(c, 10000.0),
        norm_eps=_read(c, "rms_norm_eps", default=1e-6),
    )


def _llada_unsupported(c: dict) -> list[str]:
    allowed = {"block_type": ("llama",), "layer_norm_type": ("rms",), "activation_type": ("silu",), "rope": (True,),
               "alibi": (False,), "input_emb_norm": (False,), "scale_logits": (False,),
               "attention_layer_norm": (False,), "include_bias": (False,), "bias_for_layer_norm": (False, None),
               "clip_qkv": (None,), "multi_query_attention": (None, False), "block_group_size": (1,)}
    return [f"{k}={c[k]!r}" for k, ok in allowed.items() if k in c and c[k] not in ok]


def _llada_config(c: dict) -> dict[str, tuple[str, object]]:
    dim = _read(c, "d_model")
    hidden = _read(c, "mlp_hidden_size", default=None)
    if hidden[1] is None:  # OLMo: mlp_ratio * d_model when mlp_hidden_size is unset
        ratio = _read(c, "mlp_ratio", default=4)[1]
        sized = all(type(v) is int for v in (ratio, dim[1]))  # else the ratio is the value at fault
        hidden = ("mlp_ratio × d_model", ratio * dim[1]) if sized else ("mlp_ratio", ratio)
    return dict(
        vocab_size=_read(c, "embedding_size", "vocab_size"), dim=dim, n_layers=_read(c, "n_layers"),
        n_heads=_read(c, "n_heads"), n_kv_heads=_read(c, "n_kv_heads", "n_heads"), hidden_dim=hidden,
        max_seq_len=_read(c, "max_sequence_length", default=4096), rope_theta=_rope_theta(c, 10000.0),
        norm_eps=_read(c, "rms_norm_eps", "layer_norm_eps", default=1e-5),
    )


PROMPTS = ("infill", "fim", "chat")  # Family.prompt


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]  # config.json model_type, lower-cased
    architectures: tuple[str, ...]  # config.json architectures entries
    shift_logits: bool  # logits at i predict token i + 1
    # special token candidates by name, the first one in the vocab wins (config's mask_token_id first)
    mask: tuple[str, ...]
    filler: tuple[str, ...]  # what the family pads a generation with
    bos: tuple[str, ...]  # a fixed first token; shifted models need one (output i - 1 predicts token i)
    # config.json -> ModelConfig keyword arguments (shapes), each as (the config.json key it is read from, value)
    config: Callable[[dict], dict[str, tuple[str, object]]]
    unsupported: Callable[[dict], list[str]]  # config.json -> features this loader cannot run
    tensors: dict[str, str]  # our state_dict name -> the checkpoint's
    tie_key: str  # the config.json key that ties the output head to the embedding
    # DreamOn (a Dream checkpoint): a vocab with an expand token decodes with variable length (dreamon.py);
    # `end` names the end-of-text token that, committed inside the span, deletes a position
    expand: tuple[str, ...] = ()
    end: tuple[str, ...] = ()
    # how a fill is put to the model (model/prompting.py): "infill" puts the suffix on the row after the canvas
    # (prefix | canvas | suffix, attention both ways); a prefix-only model (block diffusion, an encoder over the
    # prompt) sees nothing after its canvas, so "fim" writes prefix and suffix into the prompt between the
    # family's FIM tokens (`fim`: prefix, suffix, middle candidates) and "chat" asks for the code at the cursor
    # in a user turn of the checkpoint's chat template; the answer is the canvas after the prompt
    prompt: str = "infill"
    fim: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] = ()

    def __post_init__(self):
        if self.prompt not in PROMPTS or (self.prompt == "fim") != bool(self.fim):
            raise ValueError(f"family {self.name}: prompt {self.prompt!r} with fim tokens {self.fim!r}")


# bos: the sampler bans the bos id from every prediction, so it must differ from the filler. Dream's vocab has
# <|beginoftext|> (its tokenizer's bos_token); Qwen2.5/Qwen3 vocabs without it get <|im_start|>, a token that
# starts every chat turn in their training data and that a raw infill never has to predict.
QWEN_BOS = ("<|beginoftext|>", "<|im_start|>")

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("dream", ("dream",), ("DreamModel",), True, ("<|mask|>",), ("<|dlm_pad|>", "<|endoftext|>"), QWEN_BOS,
           _qwen_config, _qwen_unsupported, QWEN_TENSORS, "tie_word_embeddings", expand=("<|expand|>",),
           end=("<|endoftext|>",)),
    Family("coda", ("coda", "qwen3"), ("CoDALanguageModel", "Qwen3ForCausalLM"), True, ("<|mask|>",),
           ("<|endoftext|>",), QWEN_BOS, _qwen_config, _qwen_unsupported, QWEN_TENSORS, "tie_word_embeddings"),
    Family("qwen2", ("qwen2",), ("Qwen2ForCausalLM",), True, ("<|mask|>",), ("<|endoftext|>",), QWEN_BOS,
           _qwen_config, _qwen_unsupported, QWEN_TENSORS, "tie_word_embeddings"),
    Family("llada", ("llada",), ("LLaDAModelLM",), False, ("<|mdm_mask|>",), ("<|endoftext|>", "<|eot_id|>"),
           ("<|startoftext|>",), _llada_config, _llada_unsupported, LLADA_TENSORS, "weight_tying"),
)}


def detect_family(config: dict) -> Family | None:
    """The family config.json describes: model_type first, then architectures; None when unknown."""
    model_type = str(config.get("model_type", "")).lower()
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    for fam in FAMILIES.values():
        if model_type in fam.model_types:
            return fam
    for fam in FAMILIES.values():
        if any(a in fam.architectures for a in archs):
            return fam
    return None


def supported() -> str:
    """One line naming what loads, for error messages."""
    return "; ".join(f"{f.name} (model_type {'/'.join(f.model_types)})" for f in FAMILIES.values())
