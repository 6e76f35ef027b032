"""Stable-DiffCoder and LLaDA2 folders in their published layout: tiny random checkpoints (config.json
with the published keys, model.safetensors with the published tensor names, a tokenizer with the
published special tokens), our logits beside the reference forward under the block-causal mask their
generate() uses (Stable-DiffCoder: transformers' LlamaForCausalLM, which its modeling file subclasses;
LLaDA2: tests/family_references.py, written from modeling_llada2_moe.py), the errors, and `model check`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from diffusion_lsp.cli import main
from diffusion_lsp.model import load_pretrained
from diffusion_lsp.model.families.checkpoint import CheckpointError
from diffusion_lsp.model.network.config import SpecialTokens
from diffusion_lsp.model.families.table import FAMILIES, detect_family
from diffusion_lsp.model.network.tokenizer import train_bpe

from conftest import corpus_texts
from family_references import LLaDA2MoeModelLM, block_diffusion_mask

transformers = pytest.importorskip("transformers")

VOCAB = 416
SEED_FIM = {"fim_prefix": "<[fim-prefix]>", "fim_suffix": "<[fim-suffix]>", "fim_middle": "<[fim-middle]>"}
TOKENS = {  # family -> (special tokens the tokenizer gets, which ones the loader must pick: mask, filler, bos)
    "stable-diffcoder": (SpecialTokens("<[MASK_TOKEN]>", "<[end▁of▁sentence]>", "<[begin▁of▁sentence]>",
                                       {**SEED_FIM, "pad": "<[PAD▁TOKEN]>"}),
                         ("<[MASK_TOKEN]>", "<[end▁of▁sentence]>", "<[begin▁of▁sentence]>")),
    "llada2": (SpecialTokens("<|mask|>", "<|endoftext|>", "<|startoftext|>", {"end": "<|role_end|>"}),
               ("<|mask|>", "<|endoftext|>", "<|startoftext|>")),
}

# the keys of ByteDance-Seed/Stable-DiffCoder-8B-Base's config.json (transformers 5.3.0 upload), sizes tiny
STABLE_DIFFCODER = {
    "architectures": ["StableDiffcoderForCausalLM"],
    "auto_map": {"AutoModel": "modeling_stable_diffcoder.StableDiffcoderForCausalLM",
                 "AutoModelForCausalLM": "modeling_stable_diffcoder.StableDiffcoderForCausalLM"},
    "attention_bias": False, "attention_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.009882118, "intermediate_size": 128, "layer_norm_eps": None,
    "max_position_embeddings": 512, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "resid_pdrop": 0.1, "rms_norm_eps": 1e-6,
    "rope_theta": 5000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "5.3.0",
    "use_cache": True, "vocab_size": VOCAB,
}

# the keys of inclusionAI/LLaDA2.1-mini's config.json, sizes tiny: 3 layers (the first dense), 8 experts in
# 4 groups, 2 per token from the best 2 groups, 1 shared expert, half-width RoPE
LLADA2 = {
    "architectures": ["LLaDA2MoeModelLM"], "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                 "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
                 "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
    "dtype": "bfloat16", "embedding_dropout": 0.0, "first_k_dense_replace": 1, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 512,
    "max_window_layers": 28, "model_type": "llada2_moe", "moe_intermediate_size": 32,
    "moe_router_enable_expert_bias": True, "n_group": 4, "norm_head": False, "norm_softmax": False,
    "norm_topk_prob": True, "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2,
    "num_hidden_layers": 3, "num_key_value_heads": 2, "num_shared_experts": 1, "output_dropout": 0.0,
    "output_router_logits": False, "pad_token_id": 0, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-6,
    "rope_scaling": None, "rope_theta": 5000.0, "rotary_dim": 8, "routed_scaling_factor": 2.5,
    "router_dtype": "fp32", "score_function": "sigmoid", "sliding_window": 4096, "tie_word_embeddings": False,
    "topk_group": 2, "transformers_version": "4.57.1", "use_bias": False, "use_cache": False,
    "use_qk_norm": True, "use_qkv_bias": False, "use_sliding_window": False, "vocab_size": VOCAB,
}


def randomize(model, seed: int = 1) -> None:
    """Every weight and buffer random, norms near one, so that no mapping is left untested by a zero
    bias or a unit norm (the expert bias moves the routing)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if t.is_floating_point() and "inv_freq" not in name:
                t.copy_(torch.randn_like(t) * (0.3 if t.ndim > 1 else 0.2) + (1.0 if "norm" in name else 0.0))


def write_tokenizer(folder: Path, family: str) -> None:
    special = TOKENS[family][0]
    train_bpe(corpus_texts()[:2], vocab_size=400, special=special).hf.save(str(folder / "tokenizer.json"))


def block_causal(keep: torch.Tensor, block: int) -> torch.Tensor:
    """Stable-DiffCoder's _make_block_causal_mask (tril(blocks) ⊗ ones(block, block), 0 / -inf) with
    padding keys left out: [B, 1, L, L] additive."""
    L = keep.shape[1]
    n = -(-L // block)
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool)).kron(torch.ones(block, block, dtype=torch.bool))[:L, :L]
    seen = mask[None] & keep[:, None, :]
    return torch.zeros(seen.shape).masked_fill(~seen, float("-inf"))[:, None]


def build_stable_diffcoder(folder: Path):
    folder.mkdir()
    write_tokenizer(folder, "stable-diffcoder")
    cfg = transformers.LlamaConfig(**{k: v for k, v in STABLE_DIFFCODER.items() if k not in (
        "architectures", "auto_map", "model_type", "torch_dtype", "transformers_version")})
    cfg._attn_implementation = "eager"
    hf = transformers.LlamaForCausalLM(cfg).eval()
    randomize(hf)
    save_file({k: t.contiguous() for k, t in hf.state_dict().items() if "inv_freq" not in k},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(STABLE_DIFFCODER, indent=2))

    def reference(ids, keep):  # LlamaForCausalLM.forward under generate_block's mask, explicit positions
        positions = (keep.long().cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            return hf(input_ids=ids, attention_mask=block_causal(keep, 4), position_ids=positions).logits

    return folder, reference


def build_llada2(folder: Path, **changes):
    folder.mkdir()
    write_tokenizer(folder, "llada2")
    config = {**LLADA2, **changes}
    ref = LLaDA2MoeModelLM(config).eval()
    randomize(ref, seed=2)
    save_file({k: t.contiguous() for k, t in ref.state_dict().items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))

    def reference(ids, keep):
        positions = (keep.long().cumsum(-1) - 1).clamp(min=0)
        return ref(ids, block_diffusion_mask(keep, 32), positions)

    return folder, reference


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {"stable-diffcoder": build_stable_diffcoder(root / "stable-diffcoder"),
            "llada2": build_llada2(root / "llada2"),
            # the published configs say no biases; the fused q | k | v bias and `dense`'s bias still map
            "llada2-biased": build_llada2(root / "llada2-biased", use_qkv_bias=True, use_bias=True)}


def padded_batch(tok, length: int = 40):
    """Three rows, one of them right-padded, long enough to span two of LLaDA2's 32-token blocks."""
    texts = ["def add(a, b):\n    return a + b\n" * 2, "x = self.foo(bar)",
             "import json\n\nprint(json.dumps({'a': 1}))\nclass A:\n    pass\n"]
    rows = [([tok.bos_id] + tok.encode(t) + [tok.mask_id] * 5)[:length] for t in texts]
    L = max(map(len, rows))
    ids = torch.tensor([r + [tok.filler_id] * (L - len(r)) for r in rows])
    keep = torch.arange(L)[None] < torch.tensor([len(r) for r in rows])[:, None]
    return ids, keep


@pytest.mark.parametrize("name", ["stable-diffcoder", "llada2", "llada2-biased"])
def test_logits_match_the_published_forward_under_block_causal_attention(folders, name):
    folder, reference = folders[name]
    family = name.removesuffix("-biased")
    model, tok = load_pretrained(folder)
    assert [tok.hf.id_to_token(i) for i in (tok.mask_id, tok.filler_id, tok.bos_id)] == list(TOKENS[family][1])
    ids, keep = padded_batch(tok)
    ours = model(ids, attention_mask=keep)
    ref = reference(ids, keep)
    assert ours.shape == ref.shape == (3, ids.shape[1], VOCAB) and ours.dtype == torch.float32
    diff = (ours - ref)[keep].abs().max().item()
    print(f"{name}: max |ours - reference| = {diff:.2e} over {int(keep.sum())} tokens, logit std {ref.std():.2f}")
    assert diff < 1e-3
    assert torch.equal(ours.argmax(-1)[keep], ref.argmax(-1)[keep])


@pytest.mark.parametrize("name, block", [("stable-diffcoder", 4), ("llada2", 32)])
def test_attention_is_block_causal(folders, name, block):
    """A position's logits move when a token of its own block changes, not when a later block's does."""
    model, tok = load_pretrained(folders[name][0])
    assert model.config.block_size == block and not model.config.shift_logits
    ids = torch.tensor([tok.encode("def add(a, b):\n    return a + b\n" * 8)[: 2 * block]])
    base = model(ids)
    later, same = ids.clone(), ids.clone()
    later[0, block + 1] = tok.mask_id
    same[0, block - 1] = tok.mask_id
    assert torch.equal(model(later)[0, :block], base[0, :block])
    assert (model(same)[0, 0] - base[0, 0]).abs().max() > 1e-3


def test_a_cached_pass_of_a_block_causal_model_equals_the_full_pass(folders):
    model, tok = load_pretrained(folders["llada2"][0])
    tr = model.transformer
    ids, keep = padded_batch(tok)
    positions = (keep.long().cumsum(-1) - 1).clamp(min=0)
    full, cache = tr(ids, positions, keep)
    cols = torch.tensor([[3, 4, 33, 35]] * 3)
    h, _ = tr.hidden(ids.gather(1, cols), positions.gather(1, cols), torch.ones_like(cols, dtype=torch.bool),
                     cache.at(cols))
    assert (tr.logits(h) - full.gather(1, cols[..., None].expand(-1, -1, VOCAB))).abs().max() < 1e-4
    cache.positions = None  # a cache built without them cannot say which blocks a query may see
    with pytest.raises(ValueError, match="block-causal attention .* needs the cache's positions"):
        tr.hidden(ids.gather(1, cols), positions.gather(1, cols), torch.ones_like(cols, dtype=torch.bool),
                  cache.at(cols))


def test_the_layouts_load_as_published(folders):
    model, _ = load_pretrained(folders["llada2"][0])
    cfg = model.config
    assert (cfg.n_experts, cfg.n_experts_per_tok, cfg.n_shared_experts, cfg.n_dense_layers) == (8, 2, 1, 1)
    assert (cfg.head_dim, cfg.rope_dim, cfg.qk_norm, cfg.qkv_bias, cfg.o_bias) == (16, 8, True, False, False)
    assert type(model.transformer.layers[0].mlp).__name__ == "MLP"
    assert type(model.transformer.layers[1].mlp).__name__ == "MoE"
    model, _ = load_pretrained(folders["llada2-biased"][0])
    assert model.config.qkv_bias and model.config.o_bias
    model, _ = load_pretrained(folders["stable-diffcoder"][0])
    assert model.config.rope_dim == model.config.head_dim == 16 and model.config.n_experts == 0
    assert model.config.norm_eps == 1e-6 and model.config.rope_theta == 5000.0


def test_families_are_told_apart_by_architectures_and_auto_map():
    assert detect_family(STABLE_DIFFCODER).name == "stable-diffcoder"
    old = {**STABLE_DIFFCODER, "architectures": ["LlamaForCausalLM"],  # the transformers 4.46 upload
           "auto_map": {"AutoModelForCausalLM": "modeling_seed_diffcoder.SeedDiffcoderForCausalLM"}}
    assert detect_family(old).name == "stable-diffcoder"
    plain = {k: v for k, v in old.items() if k != "auto_map"}  # an autoregressive Llama is no diffusion model
    assert detect_family(plain) is None
    assert detect_family(LLADA2).name == "llada2"
    assert FAMILIES["stable-diffcoder"].prompt == "fim" and FAMILIES["llada2"].prompt == "chat"


def copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def rename(folder: Path, old: str, new: str) -> None:
    state = load_file(str(folder / "model.safetensors"))
    state[new] = state.pop(old)
    save_file(state, str(folder / "model.safetensors"))


def test_a_wrong_tensor_is_one_error_naming_it(folders, tmp_path):
    expert = copy(folders["llada2"][0], tmp_path / "expert")
    rename(expert, "model.layers.2.mlp.experts.5.up_proj.weight", "model.layers.2.mlp.experts.5.w3.weight")
    with pytest.raises(CheckpointError, match=r"llada2 layout \(missing model\.layers\.2\.mlp\.experts\.5\.up_proj"
                                              r"\.weight; unexpected model\.layers\.2\.mlp\.experts\.5\.w3\.weight"):
        load_pretrained(expert)
    router = copy(folders["llada2"][0], tmp_path / "router")
    state = load_file(str(router / "model.safetensors"))
    del state["model.layers.1.mlp.gate.expert_bias"]
    save_file(state, str(router / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing model\.layers\.1\.mlp\.gate\.expert_bias"):
        load_pretrained(router)
    fused = copy(folders["llada2"][0], tmp_path / "fused")
    state = load_file(str(fused / "model.safetensors"))
    qkv = "model.layers.0.attention.query_key_value.weight"
    state[qkv] = state[qkv][:-16]  # one head's rows short
    save_file(state, str(fused / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"query_key_value\.weight is \[112, 64\], config\.json gives \[128, 64"):
        load_pretrained(fused)
    llama = copy(folders["stable-diffcoder"][0], tmp_path / "llama")
    rename(llama, "model.layers.1.self_attn.o_proj.weight", "model.layers.1.self_attn.out_proj.weight")
    with pytest.raises(CheckpointError, match=r"stable-diffcoder layout \(missing model\.layers\.1\.self_attn\.o_proj"):
        load_pretrained(llama)


@pytest.mark.parametrize("changes, problem", [
    (dict(score_function="softmax"), "score_function 'softmax'"),
    (dict(rotary_dim=16), "rotary_dim 16 that is not head_dim × partial_rotary_factor"),
    (dict(use_sliding_window=True), "use_sliding_window"),
    (dict(n_group=3), "n_experts=8 does not split into n_expert_groups=3"),
])
def test_llada2_configs_this_loader_cannot_run_are_refused(folders, tmp_path, changes, problem):
    folder = copy(folders["llada2"][0], tmp_path / "changed")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(CheckpointError, match=problem):
        load_pretrained(folder)


@pytest.mark.parametrize("name, family, prompt", [
    ("stable-diffcoder", "stable-diffcoder", "prompt: fim (<[fim-prefix]> <[fim-suffix]> <[fim-middle]>)"),
    ("llada2", "llada2", "prompt: chat (the checkpoint's chat template)"),
])
def test_model_check_prints_the_family_and_its_prompt(folders, name, family, prompt, capsys):
    assert main(["model", "check", str(folders[name][0]), "--no-reference"]) == 0
    out = capsys.readouterr().out
    assert f"family {family}" in out and prompt in out
    assert main(["model", "check", str(folders[name][0]), "--no-reference", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == family and report["prompt"] == FAMILIES[family].prompt


def test_model_check_compares_stable_diffcoder_with_transformers_llama(folders, capsys):
    assert main(["model", "check", str(folders["stable-diffcoder"][0]), "--json"]) == 0
    ref = json.loads(capsys.readouterr().out)["reference"]
    assert ref["tokens"] > 10 and ref["max_abs_diff"] < 1e-3 and ref["argmax_agreement"] == 1.0
    assert main(["model", "check", str(folders["llada2"][0])]) == 0  # no transformers class: said, not failed
    assert "transformers reference: skipped (transformers has no class for llada2" in capsys.readouterr().out


@pytest.mark.parametrize("name, use_cache", [("stable-diffcoder", True), ("stable-diffcoder", False),
                                             ("llada2", True), ("llada2", False)])
def test_a_fill_puts_the_suffix_in_the_prompt_and_decodes_after_it(folders, name, use_cache):
    from diffusion_lsp.protocol.requests import FillRequest
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig

    engine = load_engine(LaunchSettings(path=str(folders[name][0]), threads=1, precision="fp32"))
    order = FillRequest("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", 12,
                      sampling=SamplerConfig(use_cache=use_cache))
    decoding = engine.decode_orders([order], ["doc"])
    list(decoding)
    row, tok = decoding.fills[0].row, engine.tokenizer
    assert row.start + row.length == len(row.ids)  # nothing after the canvas: the suffix is in the prompt
    prompt = tok.decode(row.ids[: row.start])
    assert "print(add(1, 2))" in prompt and "def add(a, b):" in prompt
    if name == "stable-diffcoder":  # Seed-Coder's FIM is suffix first, its tokens as ids
        assert prompt.index("print(add") < prompt.index("def add")
        fim = [tok.hf.token_to_id(SEED_FIM[k]) for k in ("fim_suffix", "fim_prefix", "fim_middle")]
        assert [t for t in row.ids if t in fim] == fim
    fill = engine.answer_of(decoding, 0)
    assert fill is not None and len(fill.pieces) == len(fill.confidence) and "".join(fill.pieces) == fill.text
    caps = engine.capabilities
    assert (caps.probe, caps.rewrite, caps.drafts) == (False, name == "llada2", True)


def test_int8_weights_leave_the_experts_router_in_float(folders):
    from torch import nn

    from diffusion_lsp.protocol.requests import FillRequest
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.model.network.quantize import int8_available
    from diffusion_lsp.protocol.settings import LaunchSettings

    if not int8_available():
        pytest.skip("this PyTorch build has no int8 CPU kernels")
    engine = load_engine(LaunchSettings(path=str(folders["llada2"][0]), threads=1, precision="int8"))
    moe = engine.model.layers[1].mlp
    assert type(moe.router) is nn.Linear and type(moe.experts[0].gate_proj) is not nn.Linear
    (fill,) = engine.answer([FillRequest("def f():\n    return ", "\n", 8)], [""])
    assert len(fill.pieces) == len(fill.confidence) > 0


def test_dllm_hubs_a2d_models_are_their_own_family():
    """dllm-hub's A2D Qwen checkpoints (model_type a2d-qwen2, A2DQwen2LMHeadModel) were refused as an unknown
    family; dllm's MDLMSampler.infill reads their logits in place and puts no bos before an infill."""
    for config in ({"model_type": "a2d-qwen2"}, {"model_type": "x", "architectures": ["A2DQwen3LMHeadModel"]}):
        family = detect_family(config)
        assert family is FAMILIES["a2d"] and not family.shift_logits and family.bos == ()
