"""The open diffusion checkpoint families as data: how to recognise one from its Hugging Face
config.json, how its keys map onto ModelConfig (the readers in family_configs.py), how its tensor
names map onto ours, and which special tokens it infills with. pretrained.py does the loading;
nothing here touches the disk.

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
- a2d: dllm-hub's Qwen models converted from autoregressive ones (`model_type: "a2d-qwen2"`), logits in place.
- llada2: LLaDA2.0 / LLaDA2.1 mini and flash (`model_type: "llada2_moe"`, modeling_llada2_moe.py): a
  BailingMoeV2 layout, fused query_key_value split at load time, q/k RMSNorm, half-width RoPE, dense
  first layers then sigmoid-routed experts with shared experts; block diffusion in blocks of 32.

Structural flags (q/k/v bias, q/k norm, tied head) are read from which tensors the checkpoint has,
not from config keys, so a checkpoint cannot say one thing and hold another.
DreamOn decodes in dreamon.py, a fill is put to the model by model/chat/prompting.py, native families run in
native.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .family_configs import (diffusion_gemma_sizes, llada2_config, llada2_unsupported, llada_config, llada_unsupported,
                             object_at, qwen_config, qwen_unsupported, stable_diffcoder_config,
                             stable_diffcoder_unsupported)

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
           qwen_config, qwen_unsupported, QWEN_TENSORS, "tie_word_embeddings", expand=("<|expand|>",),
           end=("<|endoftext|>",)),
    Family("coda", ("coda", "qwen3"), ("CoDALanguageModel", "Qwen3ForCausalLM"), True, ("<|mask|>",),
           ("<|endoftext|>",), QWEN_BOS, qwen_config, qwen_unsupported, QWEN_TENSORS, "tie_word_embeddings"),
    Family("qwen2", ("qwen2",), ("Qwen2ForCausalLM",), True, ("<|mask|>",), ("<|endoftext|>",), QWEN_BOS,
           qwen_config, qwen_unsupported, QWEN_TENSORS, "tie_word_embeddings"),
    Family("llada", ("llada",), ("LLaDAModelLM",), False, ("<|mdm_mask|>",), ("<|endoftext|>", "<|eot_id|>"),
           ("<|startoftext|>",), llada_config, llada_unsupported, LLADA_TENSORS, "weight_tying"),
    # Seed-Coder's tokenizer: <[MASK_TOKEN]> is id 5 (generate_block's mask_id=5), eos <[end▁of▁sentence]>
    # (what generate_block fills after the end), bos <[begin▁of▁sentence]>; its FIM tokens are Seed-Coder's
    # (trained suffix-first: <[fim-suffix]>S<[fim-prefix]>P<[fim-middle]>, the Seed-Coder report)
    Family("stable-diffcoder", (), ("StableDiffcoderForCausalLM", "SeedDiffcoderForCausalLM"), False,
           ("<[MASK_TOKEN]>",), ("<[end▁of▁sentence]>",), ("<[begin▁of▁sentence]>",), stable_diffcoder_config,
           stable_diffcoder_unsupported, LLAMA_TENSORS, "tie_word_embeddings", prompt="fim",
           fim=(("<[fim-prefix]>",), ("<[fim-suffix]>",), ("<[fim-middle]>",)), fim_order="spm"),
    # LLaDA2 (Ling's vocab): generate(mask_id=156895 "<|mask|>", eos_id=156892 "<|endoftext|>", also the
    # pad_token_id); instruction-tuned, prompted with its chat template (<role>HUMAN</role> ... <|role_end|>)
    Family("llada2", ("llada2_moe",), ("LLaDA2MoeModelLM",), False, ("<|mask|>",), ("<|endoftext|>",),
           ("<|startoftext|>",), llada2_config, llada2_unsupported, LLADA2_TENSORS, "tie_word_embeddings",
           prompt="chat", fused_qkv=True),
    # dllm-hub's A2D models (ZHZisZZ/dllm, dllm/pipelines/a2d: Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1 and
    # the like): an autoregressive Qwen converted to masked diffusion, Qwen's tensor names under model_type
    # "a2d-qwen2" / "a2d-qwen3"; dllm's MDLMSampler.infill reads logits in place (right_shift_logits False) and
    # adds no bos to an infill, the tokenizer is the source's plus the <|mask|> dllm's get_tokenizer adds
    Family("a2d", ("a2d-qwen2", "a2d-qwen3"), ("A2DQwen2LMHeadModel", "A2DQwen3LMHeadModel"), False, ("<|mask|>",),
           ("<|endoftext|>",), (), qwen_config, qwen_unsupported, QWEN_TENSORS, "tie_word_embeddings"),
)}


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
                 diffusion_gemma_sizes, ("image_token_id", "boi_token_id", "eoi_token_id")),
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

    from ..network.config import read_json

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
    archs = archs + [str(v).rsplit(".", 1)[-1] for v in object_at(config, "auto_map").values() if isinstance(v, str)]
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
