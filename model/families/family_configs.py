"""How each family's config.json maps onto ModelConfig, and what in it this loader cannot run (the
`config` and `unsupported` of a table.py Family, and a native family's `sizes`). Every value is
returned with the config.json key it was read from, so that a bad value is reported under that key;
a value no size can be derived from is a ValueError naming its key. Nothing here touches the disk."""

from __future__ import annotations

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


def object_at(c: dict, key: str) -> dict:
    """c[key] where config.json sets it to an object, else {}."""
    value = c.get(key)
    return value if isinstance(value, dict) else {}


def _rope_theta(c: dict, default: float) -> tuple[str, object]:
    """rope_theta top-level (transformers 4.x, Dream, LLaDA) or under rope_parameters (transformers 5.x)."""
    if c.get("rope_theta") is None and object_at(c, "rope_parameters").get("rope_theta") is not None:
        return "rope_parameters.rope_theta", c["rope_parameters"]["rope_theta"]
    return _read(c, "rope_theta", default=default)


def qwen_unsupported(c: dict) -> list[str]:
    out = []
    if c.get("hidden_act", "silu") != "silu":
        out.append(f"hidden_act {c['hidden_act']!r}")
    for key in ("rope_scaling", "rope_parameters"):
        if c.get(key) is not None and not isinstance(c[key], dict):
            out.append(f"{key} that is not an object")
            continue
        kind = object_at(c, key).get("rope_type", object_at(c, key).get("type", "default"))
        if kind != "default":
            out.append(f"{key} of type {kind!r}")
    if c.get("use_sliding_window"):
        out.append("use_sliding_window")
    return out


def qwen_config(c: dict) -> dict[str, tuple[str, object]]:
    return dict(
        vocab_size=_read(c, "vocab_size"), dim=_read(c, "hidden_size"), n_layers=_read(c, "num_hidden_layers"),
        n_heads=_read(c, "num_attention_heads"), n_kv_heads=_read(c, "num_key_value_heads", "num_attention_heads"),
        head_dim=_read(c, "head_dim", default=None), hidden_dim=_read(c, "intermediate_size"),
        max_seq_len=_read(c, "max_position_embeddings", default=32768), rope_theta=_rope_theta(c, 10000.0),
        norm_eps=_read(c, "rms_norm_eps", default=1e-6),
    )


def llada_unsupported(c: dict) -> list[str]:
    allowed = {"block_type": ("llama",), "layer_norm_type": ("rms",), "activation_type": ("silu",), "rope": (True,),
               "alibi": (False,), "input_emb_norm": (False,), "scale_logits": (False,),
               "attention_layer_norm": (False,), "include_bias": (False,), "bias_for_layer_norm": (False, None),
               "clip_qkv": (None,), "multi_query_attention": (None, False), "block_group_size": (1,)}
    return [f"{k}={c[k]!r}" for k, ok in allowed.items() if k in c and c[k] not in ok]


def llada_config(c: dict) -> dict[str, tuple[str, object]]:
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


def stable_diffcoder_unsupported(c: dict) -> list[str]:
    out = qwen_unsupported(c)
    out += [f"{k}={c[k]!r}" for k in ("attention_bias", "mlp_bias") if c.get(k)]
    if c.get("pretraining_tp", 1) != 1:
        out.append(f"pretraining_tp={c['pretraining_tp']!r}")
    return out


def stable_diffcoder_config(c: dict) -> dict[str, tuple[str, object]]:
    # no config.json key holds the block size: generate_block(block_length=4) is the published default
    return {**qwen_config(c), "block_size": ("generate_block's block_length", 4)}


def _is_fraction(value) -> bool:
    return type(value) in (int, float) and 0 < value <= 1


def llada2_unsupported(c: dict) -> list[str]:
    """Besides Qwen's checks (use_sliding_window among them: no window is applied here), the keys whose
    published value is the only one modeling_llada2_moe.py computes (it ignores them: a sigmoid router,
    renormalised top-k weights, a plain head), so a config.json saying otherwise describes other code."""
    out = qwen_unsupported(c)
    if c.get("score_function", "sigmoid") != "sigmoid":
        out.append(f"score_function {c['score_function']!r}")
    if c.get("norm_head"):
        out.append("norm_head")
    if c.get("norm_topk_prob") is False and c.get("num_experts_per_tok", 1) != 1:
        out.append("norm_topk_prob=false")
    dim, heads, factor = c.get("hidden_size"), c.get("num_attention_heads"), c.get("partial_rotary_factor", 1.0)
    head_dim = c.get("head_dim") or (dim // heads if type(dim) is int and type(heads) is int and heads > 0 else None)
    sized = type(head_dim) is int and _is_fraction(factor)  # else llada2_config names the factor
    if c.get("rotary_dim") is not None and sized and c["rotary_dim"] != int(head_dim * factor):
        out.append(f"rotary_dim {c['rotary_dim']!r} that is not head_dim × partial_rotary_factor")
    return out


def llada2_config(c: dict) -> dict[str, tuple[str, object]]:
    read = qwen_config(c)
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
    rope = object_at(sub, "rope_parameters")
    found = [(f"{prefix}.rope_parameters.rope_theta", rope.get("rope_theta"))]
    found += [(f"{prefix}.rope_parameters.{kind}.rope_theta", v.get("rope_theta"))
              for kind, v in rope.items() if isinstance(v, dict)]
    return [("rope_theta", key, value) for key, value in found if value is not None]


def diffusion_gemma_sizes(c: dict) -> list[tuple[str, str, object]]:
    """(the ModelConfig field whose bound applies, the config.json key, its value) for every size the
    text and vision configs give (a key left out takes transformers' default, a published size)."""
    out = []
    for prefix, keys in (("text_config", DIFFUSION_GEMMA_TEXT), ("vision_config", DIFFUSION_GEMMA_VISION)):
        sub = object_at(c, prefix)
        out += [(field, f"{prefix}.{key}", sub[key]) for key, field in keys.items() if sub.get(key) is not None]
        out += _rope_thetas(prefix, sub)
    return out
