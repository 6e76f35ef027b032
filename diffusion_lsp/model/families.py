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
- stable-diffcoder: Stable-DiffCoder-8B-Base/Instruct (ByteDance Seed): Seed-Coder's Llama layout under
  `model_type: "llama"`, told apart by architectures / auto_map (StableDiffcoderForCausalLM, earlier
  SeedDiffcoderForCausalLM); block diffusion, blocks of 4 (generate_block's default), logits in place.
- llada2: LLaDA2.0 / LLaDA2.1 mini and flash (`model_type: "llada2_moe"`, modeling_llada2_moe.py): a
  BailingMoeV2 layout, fused query_key_value split at load time, q/k RMSNorm, half-width RoPE, dense
  first layers then sigmoid-routed experts with shared experts; block diffusion in blocks of 32.

Structural flags (q/k/v bias, q/k norm, tied head) are read from which tensors the checkpoint has,
not from config keys, so a checkpoint cannot say one thing and hold another.
DreamOn decodes in dreamon.py, a fill is put to the model by prompting.py, native families run in
native.py.
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


# Stable-DiffCoder (modeling_stable_diffcoder.py: StableDiffcoderForCausalLM(LlamaForCausalLM)) keeps
# transformers' Llama names, which are Qwen2's without the q/k/v biases
LLAMA_TENSORS = {k: v for k, v in QWEN_TENSORS.items()
                 if not k.endswith(("_proj.bias", "attn.q_norm.weight", "attn.k_norm.weight"))}

# LLaDA2 (modeling_llada2_moe.py): LLaDA2MoeAttention's fused query_key_value holds q | k | v by rows (our
# three projections read it, Family.fused_qkv), `dense` is the output projection; LLaDA2MoeSparseMoeBlock
# has `gate` (the router, with its expert_bias buffer), experts.{e} and shared_experts
LLADA2_TENSORS = {
    "embed.weight": "model.word_embeddings.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
    "layers.{i}.input_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.post_attn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    **{f"layers.{{i}}.attn.{p}_proj.{w}": f"model.layers.{{i}}.attention.query_key_value.{w}"
       for p in "qkv" for w in ("weight", "bias")},
    "layers.{i}.attn.o_proj.weight": "model.layers.{i}.attention.dense.weight",
    "layers.{i}.attn.o_proj.bias": "model.layers.{i}.attention.dense.bias",
    "layers.{i}.attn.q_norm.weight": "model.layers.{i}.attention.query_layernorm.weight",
    "layers.{i}.attn.k_norm.weight": "model.layers.{i}.attention.key_layernorm.weight",
    **{f"layers.{{i}}.mlp.{p}_proj.weight": f"model.layers.{{i}}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")},
    "layers.{i}.mlp.router.weight": "model.layers.{i}.mlp.gate.weight",
    "layers.{i}.mlp.expert_bias": "model.layers.{i}.mlp.gate.expert_bias",
    **{f"layers.{{i}}.mlp.experts.{{e}}.{p}_proj.weight": f"model.layers.{{i}}.mlp.experts.{{e}}.{p}_proj.weight"
       for p in ("gate", "up", "down")},
    **{f"layers.{{i}}.mlp.shared.{p}_proj.weight": f"model.layers.{{i}}.mlp.shared_experts.{p}_proj.weight"
       for p in ("gate", "up", "down")},
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


def _stable_diffcoder_unsupported(c: dict) -> list[str]:
    out = _qwen_unsupported(c)
    out += [f"{k}={c[k]!r}" for k in ("attention_bias", "mlp_bias") if c.get(k)]
    if c.get("pretraining_tp", 1) != 1:
        out.append(f"pretraining_tp={c['pretraining_tp']!r}")
    return out


def _stable_diffcoder_config(c: dict) -> dict[str, tuple[str, object]]:
    # no config.json key holds the block size: generate_block(block_length=4) is the published default
    return {**_qwen_config(c), "block_size": ("generate_block's block_length", 4)}


def _is_fraction(value) -> bool:
    return type(value) in (int, float) and 0 < value <= 1


def _llada2_unsupported(c: dict) -> list[str]:
    """Besides Qwen's checks (use_sliding_window among them: no window is applied here), the keys whose
    published value is the only one modeling_llada2_moe.py computes (it ignores them: a sigmoid router,
    renormalised top-k weights, a plain head), so a config.json saying otherwise describes other code."""
    out = _qwen_unsupported(c)
    if c.get("score_function", "sigmoid") != "sigmoid":
        out.append(f"score_function {c['score_function']!r}")
    if c.get("norm_head"):
        out.append("norm_head")
    if c.get("norm_topk_prob") is False and c.get("num_experts_per_tok", 1) != 1:
        out.append("norm_topk_prob=false")
    dim, heads, factor = c.get("hidden_size"), c.get("num_attention_heads"), c.get("partial_rotary_factor", 1.0)
    head_dim = c.get("head_dim") or (dim // heads if type(dim) is int and type(heads) is int and heads > 0 else None)
    sized = type(head_dim) is int and _is_fraction(factor)  # else _llada2_config names the factor
    if c.get("rotary_dim") is not None and sized and c["rotary_dim"] != int(head_dim * factor):
        out.append(f"rotary_dim {c['rotary_dim']!r} that is not head_dim × partial_rotary_factor")
    return out


def _llada2_config(c: dict) -> dict[str, tuple[str, object]]:
    read = _qwen_config(c)
    read["hidden_dim"] = _read(c, "intermediate_size", default=None)  # the dense layers' width
    read["norm_eps"] = _read(c, "rms_norm_eps", default=1e-5)
    heads, head_dim = read["n_heads"][1], _read(c, "head_dim", default=None)[1]
    factor = _read(c, "partial_rotary_factor", default=1.0)
    if not _is_fraction(factor[1]):  # int(head_dim × NaN) would raise; a factor of 1e308 is not a fraction
        raise ValueError(f"partial_rotary_factor should be a number above 0 and at most 1, got {factor[1]!r}")
    if head_dim is None and all(type(v) is int and v > 0 for v in (read["dim"][1], heads)):
        head_dim = read["dim"][1] // heads
    sized = type(head_dim) is int
    rope = ("head_dim × partial_rotary_factor", int(head_dim * factor[1])) if sized else factor
    experts = _read(c, "num_experts", default=0)
    moe = dict(n_experts=experts, n_experts_per_tok=_read(c, "num_experts_per_tok", default=1),
               n_shared_experts=_read(c, "num_shared_experts", default=0),
               moe_hidden_dim=_read(c, "moe_intermediate_size", default=0),
               n_dense_layers=_read(c, "first_k_dense_replace", default=0),
               n_expert_groups=_read(c, "n_group", default=1), n_topk_groups=_read(c, "topk_group", default=1),
               routed_scaling=_read(c, "routed_scaling_factor", default=1.0))
    # generate(block_length=32) in modeling_llada2_moe.py; no config.json key holds it
    return {**read, "rope_dim": rope, **(moe if experts[1] else {}), "block_size": ("generate's block_length", 32)}


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
    # config.json -> ModelConfig keyword arguments (shapes), each as (the config.json key it is read from, value);
    # ValueError naming a key whose value no size can be derived from
    config: Callable[[dict], dict[str, tuple[str, object]]]
    unsupported: Callable[[dict], list[str]]  # config.json -> features this loader cannot run
    tensors: dict[str, str]  # our state_dict name -> the checkpoint's
    tie_key: str  # the config.json key that ties the output head to the embedding
    # DreamOn (a Dream checkpoint): a vocab with an expand token decodes with variable length (VariableDecoding);
    # `end` names the end-of-text token that, committed inside the span, deletes a position
    expand: tuple[str, ...] = ()
    end: tuple[str, ...] = ()
    # how a fill is put to the model (its Prompter): "infill" puts the suffix on the row after the canvas
    # (prefix | canvas | suffix, attention both ways); a prefix-only model (block diffusion, an encoder over the
    # prompt) sees nothing after its canvas, so "fim" writes prefix and suffix into the prompt between the
    # family's FIM tokens (`fim`: prefix, suffix, middle candidates) and "chat" asks for the code at the cursor
    # in a user turn of the checkpoint's chat template; the answer is the canvas after the prompt
    prompt: str = "infill"
    fim: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] = ()
    fim_order: str = "psm"  # "psm": prefix, suffix, middle (Qwen2.5-Coder); "spm": suffix first (Seed-Coder)
    # our q_proj/k_proj/v_proj names map to one checkpoint tensor holding q | k | v by rows (LLaDA2)
    fused_qkv: bool = False

    def __post_init__(self):
        if (self.prompt not in PROMPTS or (self.prompt == "fim") != bool(self.fim)
                or self.fim_order not in ("psm", "spm")):
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
    # Seed-Coder's tokenizer: <[MASK_TOKEN]> is id 5 (generate_block's mask_id=5), eos <[end▁of▁sentence]>
    # (what generate_block fills after the end), bos <[begin▁of▁sentence]>; its FIM tokens are Seed-Coder's
    # (trained suffix-first: <[fim-suffix]>S<[fim-prefix]>P<[fim-middle]>, the Seed-Coder report)
    Family("stable-diffcoder", (), ("StableDiffcoderForCausalLM", "SeedDiffcoderForCausalLM"), False,
           ("<[MASK_TOKEN]>",), ("<[end▁of▁sentence]>",), ("<[begin▁of▁sentence]>",), _stable_diffcoder_config,
           _stable_diffcoder_unsupported, LLAMA_TENSORS, "tie_word_embeddings", prompt="fim",
           fim=(("<[fim-prefix]>",), ("<[fim-suffix]>",), ("<[fim-middle]>",)), fim_order="spm"),
    # LLaDA2 (Ling's vocab): generate(mask_id=156895 "<|mask|>", eos_id=156892 "<|endoftext|>", also the
    # pad_token_id); instruction-tuned, prompted with its chat template (<role>HUMAN</role> ... <|role_end|>)
    Family("llada2", ("llada2_moe",), ("LLaDA2MoeModelLM",), False, ("<|mask|>",), ("<|endoftext|>",),
           ("<|startoftext|>",), _llada2_config, _llada2_unsupported, LLADA2_TENSORS, "tie_word_embeddings",
           prompt="chat", fused_qkv=True),
)}


# DiffusionGemma's config.json (DiffusionGemmaTextConfig, Gemma4VisionConfig): each key that sizes a module ->
# the ModelConfig field whose bound (config.LIMITS, COUNTS, SCALES) it gets. The vision tower's position table
# is bounded as a vocabulary is, its patch and pooling sizes as a head is (a patch of p pixels is a p² × 3 ×
# hidden_size matrix)
DIFFUSION_GEMMA_TEXT = dict(
    vocab_size="vocab_size", hidden_size="dim", intermediate_size="hidden_dim", num_hidden_layers="n_layers",
    num_attention_heads="n_heads", num_key_value_heads="n_kv_heads", num_global_key_value_heads="n_kv_heads",
    head_dim="head_dim", global_head_dim="head_dim", max_position_embeddings="max_seq_len",
    sliding_window="max_seq_len", num_experts="n_experts", top_k_experts="n_experts_per_tok",
    moe_intermediate_size="moe_hidden_dim", rms_norm_eps="norm_eps")
DIFFUSION_GEMMA_VISION = dict(
    hidden_size="dim", intermediate_size="hidden_dim", num_hidden_layers="n_layers", num_attention_heads="n_heads",
    num_key_value_heads="n_kv_heads", head_dim="head_dim", max_position_embeddings="max_seq_len",
    position_embedding_size="vocab_size", patch_size="head_dim", pooling_kernel_size="head_dim",
    rms_norm_eps="norm_eps")


def _rope_thetas(prefix: str, sub: dict) -> list[tuple[str, str, object]]:
    """rope_theta of rope_parameters, itself (vision) or per layer type (text: sliding and full attention)."""
    rope = _object(sub, "rope_parameters")
    found = [(f"{prefix}.rope_parameters.rope_theta", rope.get("rope_theta"))]
    found += [(f"{prefix}.rope_parameters.{kind}.rope_theta", v.get("rope_theta"))
              for kind, v in rope.items() if isinstance(v, dict)]
    return [("rope_theta", key, value) for key, value in found if value is not None]


def _diffusion_gemma_sizes(c: dict) -> list[tuple[str, str, object]]:
    """(the ModelConfig field whose bound applies, the config.json key, its value) for every size the
    text and vision configs give (a key left out takes transformers' default, a published size)."""
    out = []
    for prefix, keys in (("text_config", DIFFUSION_GEMMA_TEXT), ("vision_config", DIFFUSION_GEMMA_VISION)):
        sub = _object(c, prefix)
        out += [(field, f"{prefix}.{key}", sub[key]) for key, field in keys.items() if sub.get(key) is not None]
        out += _rope_thetas(prefix, sub)
    return out


# Families that only transformers runs (its own modeling and generation code, an extra):
# how to recognise one, the class that runs it, and how a fill is put to it (PROMPTS)
@dataclass(frozen=True)
class NativeFamily:
    name: str
    model_types: tuple[str, ...]  # config.json model_type
    model_class: str  # the transformers class that runs it
    prompt: str  # families.PROMPTS: how a fill is put to it
    # config.json -> (ModelConfig field whose bound applies, key, value) for each size, checked before transformers
    # builds anything (native_load.check_config)
    sizes: Callable[[dict], list[tuple[str, str, object]]]
    # config.json keys holding token ids the model's code looks up (an image placeholder): each must be set
    # and within text_config.vocab_size (transformers' defaults are the published vocab's ids)
    token_ids: tuple[str, ...] = ()


NATIVE = {f.name: f for f in (
    NativeFamily("diffusiongemma", ("diffusion_gemma",), "DiffusionGemmaForBlockDiffusion", "chat",
                 _diffusion_gemma_sizes, ("image_token_id", "boi_token_id", "eoi_token_id")),
)}


NATIVE_INT8 = "int8 weights are for our own models; a model transformers runs loads as stored, or in fp32, bf16 or fp16"


def native_family(config: dict) -> NativeFamily | None:
    """The native family config.json names (model_type, then architectures); None: not one."""
    model_type = str(config.get("model_type", "")).lower()
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    return next((f for f in NATIVE.values() if model_type in f.model_types or f.model_class in archs), None)


def is_native_folder(folder) -> bool:
    """config.json names a family that only transformers runs, read without torch."""
    from pathlib import Path

    from .config import read_json

    try:
        config = read_json(Path(folder) / "config.json")
    except ValueError:
        return False
    return isinstance(config, dict) and native_family(config) is not None


def detect_family(config: dict) -> Family | None:
    """The family config.json describes: model_type first, then architectures and the class names its
    auto_map gives (read as names, never imported); None when unknown."""
    model_type = str(config.get("model_type", "")).lower()
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    archs = archs + [str(v).rsplit(".", 1)[-1] for v in _object(config, "auto_map").values() if isinstance(v, str)]
    for fam in FAMILIES.values():
        if model_type in fam.model_types:
            return fam
    for fam in FAMILIES.values():
        if any(a in fam.architectures for a in archs):
            return fam
    return None


def prompt_description(family: Family | None, has_token: Callable[[str], bool]) -> str:
    """One line saying how a fill is put to the family (None: our own format, infill); has_token says
    which of the family's FIM token candidates the vocab holds."""
    if family is None or family.prompt == "infill":
        return "infill (prefix | canvas | suffix)"
    if family.prompt == "fim":
        return "fim (" + " ".join(next((n for n in names if has_token(n)), names[0]) for names in family.fim) + ")"
    return "chat (the checkpoint's chat template)"


def supported() -> str:
    """One line naming what loads, for error messages."""
    return "; ".join(f"{f.name} (model_type {'/'.join(f.model_types)})" for f in FAMILIES.values())
