"""Hugging Face folders as published: tiny random checkpoints written by transformers in each family's
on-disk layout (Dream sharded, Open-dCoder tied, CoDA on Qwen3, LLaDA renamed from Llama), our logits
against transformers' own forward under full bidirectional attention on padded batches, the errors,
and `fim` end to end on each family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tokenizers import Tokenizer as HFTokenizer

from diffusion_lsp.cli import main
from diffusion_lsp.engine import Engine, load_engine
from diffusion_lsp.model import load_pretrained
from diffusion_lsp.model.decoding.canvas import CanvasRequest
from diffusion_lsp.model.families.checkpoint import CheckpointError
from diffusion_lsp.model.network.config import SpecialTokens
from diffusion_lsp.model.families.pretrained import load_hf_folder, weights_dtype
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.model.network.tokenizer import train_bpe

from conftest import corpus_texts

transformers = pytest.importorskip("transformers")

VOCAB = 416  # the model's rows; the tokenizer has fewer, as Dream's 152064 rows hold 151667 tokens
SHAPES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, max_position_embeddings=512, attn_implementation="eager")

# family -> (special tokens the tokenizer gets, which ones the loader must pick: mask, filler, bos)
TOKENS = {
    "dream": (SpecialTokens("<|mask|>", "<|endoftext|>", "<|beginoftext|>", {"im": "<|im_start|>"}),
              ("<|mask|>", "<|endoftext|>", "<|beginoftext|>")),
    "diffucoder": (SpecialTokens("<|mask|>", "<|endoftext|>", "<|beginoftext|>", {"pad": "<|dlm_pad|>"}),
                   ("<|mask|>", "<|dlm_pad|>", "<|beginoftext|>")),
    "qwen2": (SpecialTokens("<|mask|>", "<|endoftext|>", None, {"im": "<|im_start|>"}),
              ("<|mask|>", "<|endoftext|>", "<|im_start|>")),
    "coda": (SpecialTokens("<|mask|>", "<|endoftext|>", None, {"im": "<|im_start|>"}),
             ("<|mask|>", "<|endoftext|>", "<|im_start|>")),
    "llada": (SpecialTokens("<|mdm_mask|>", "<|endoftext|>", "<|startoftext|>", {"eot": "<|eot_id|>"}),
              ("<|mdm_mask|>", "<|endoftext|>", "<|startoftext|>")),
}

LLADA_NAMES = [  # Llama's names -> LLaDA's (modeling_llada.py)
    ("model.embed_tokens.", "model.transformer.wte."), ("model.norm.", "model.transformer.ln_f."),
    ("lm_head.", "model.transformer.ff_out."), ("model.layers.", "model.transformer.blocks."),
    ("input_layernorm.", "attn_norm."), ("post_attention_layernorm.", "ff_norm."), ("self_attn.o_proj.", "attn_out."),
    ("self_attn.", ""), ("mlp.gate_proj.", "ff_proj."), ("mlp.up_proj.", "up_proj."), ("mlp.down_proj.", "ff_out."),
]


def randomize(model) -> None:
    """Every weight random and large enough that logits are far from ties (transformers zeroes biases
    and sets norms to one, which would leave those mappings untested)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim > 1 else 0.2) + (1.0 if "norm" in name else 0.0))


def write_tokenizer(folder: Path, family: str) -> None:
    special = TOKENS[family][0]
    tok = train_bpe(corpus_texts(), vocab_size=400, special=special)
    tok.hf.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"mask_token": special.mask, "pad_token": special.filler, "eos_token": special.filler,
         "bos_token": special.bos}))


def rewrite_config(folder: Path, **changes) -> dict:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    config = {k: v for k, v in config.items() if v is not None}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return config


def build(family: str, root: Path):
    """(folder, the transformers model whose forward is the reference)."""
    folder = root / family
    folder.mkdir()
    write_tokenizer(folder, family)
    mask_id = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    mask_id = next(t["id"] for t in mask_id if t["content"] == TOKENS[family][1][0])
    rope = {"rope_type": "default", "rope_theta": 5000.0}
    if family in ("dream", "diffucoder", "qwen2"):
        tied = family == "qwen2"
        hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            vocab_size=VOCAB, tie_word_embeddings=tied, rope_parameters=rope, **SHAPES)).eval()
        randomize(hf)
        if tied:  # Open-dCoder: one file, tied head, plain qwen2 config with a mask token
            hf.save_pretrained(folder)
            rewrite_config(folder, mask_token_id=mask_id)
        else:  # Dream: shards, Dream's config keys (rope_theta top-level, torch_dtype)
            hf.save_pretrained(folder, max_shard_size="60KB")
            rewrite_config(folder, model_type="Dream", architectures=["DreamModel"], mask_token_id=mask_id,
                           rope_theta=5000.0, rope_parameters=None, torch_dtype="bfloat16", dtype=None)
    elif family == "coda":
        hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
            vocab_size=VOCAB, head_dim=32, tie_word_embeddings=False, rope_parameters=rope, **SHAPES)).eval()
        randomize(hf)
        hf.save_pretrained(folder)
        rewrite_config(folder, model_type="CoDA", architectures=["CoDALanguageModel"], mask_token_id=mask_id)
    else:
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=VOCAB, rms_norm_eps=1e-5, rope_parameters=rope, tie_word_embeddings=False, **SHAPES)).eval()
        randomize(hf)
        state = {}
        for name, t in hf.state_dict().items():
            for a, b in LLADA_NAMES:
                name = name.replace(a, b)
            state[name] = t.contiguous()
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
        (folder / "config.json").write_text(json.dumps({  # the keys of GSAI-ML/LLaDA-8B-Base's config.json
            "architectures": ["LLaDAModelLM"], "model_type": "llada", "activation_type": "silu", "alibi": False,
            "block_type": "llama", "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
            "mlp_hidden_size": 128, "mlp_ratio": 4, "embedding_size": VOCAB, "vocab_size": VOCAB - 16,
            "max_sequence_length": 512, "rope": True, "rope_theta": 5000.0, "rms_norm_eps": 1e-5,
            "layer_norm_type": "rms", "include_bias": False, "include_qkv_bias": False, "weight_tying": False,
            "input_emb_norm": False, "scale_logits": False, "attention_layer_norm": False,
            "multi_query_attention": None, "mask_token_id": mask_id, "torch_dtype": "bfloat16"}))
    return folder, hf


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: build(family, root) for family in TOKENS}


def bidirectional(hf, ids, keep):
    """transformers' logits under full attention: a 4D additive mask (0 attended, finfo.min on padding)
    and explicit positions, which eager attention honours in 4.5x and 5.x alike."""
    B, L = ids.shape
    mask = torch.zeros(B, 1, L, L).masked_fill(~keep[:, None, None, :], torch.finfo(torch.float32).min)
    with torch.no_grad():
        return hf(input_ids=ids, attention_mask=mask, position_ids=torch.arange(L).expand(B, L)).logits


def padded_batch(tok):
    texts = ["def add(a, b):\n    return a + b\n", "x = self.foo(bar)", "import json\n\nprint(json.dumps({'a': 1}))"]
    rows = [[tok.bos_id] * (tok.bos_id is not None) + tok.encode(t) + [tok.mask_id] * 3 for t in texts]
    L = max(map(len, rows))
    ids = torch.tensor([r + [tok.filler_id] * (L - len(r)) for r in rows])
    keep = torch.arange(L)[None] < torch.tensor([len(r) for r in rows])[:, None]
    return ids, keep


@pytest.mark.parametrize("family", list(TOKENS))
def test_logits_match_transformers_under_bidirectional_attention(folders, family):
    folder, hf = folders[family]
    model, tok = load_pretrained(folder)
    assert [tok.hf.id_to_token(i) for i in (tok.mask_id, tok.filler_id, tok.bos_id)] == list(TOKENS[family][1])
    ids, keep = padded_batch(tok)
    ours = model(ids, attention_mask=keep)
    ref = bidirectional(hf, ids, keep)
    assert ours.shape == ref.shape == (3, ids.shape[1], VOCAB) and ours.dtype == torch.float32
    diff = (ours - ref)[keep].abs().max().item()
    print(f"{family}: max |ours - transformers| = {diff:.2e}")
    assert diff < 1e-4
    assert torch.equal(ours.argmax(-1)[keep], ref.argmax(-1)[keep])
    with torch.no_grad():  # the reference really is bidirectional: causal logits differ at the first token
        causal = hf(input_ids=ids[:1, :5]).logits
    assert (causal[0, 0] - ref[0, 0]).abs().max() > 1e-3


def test_each_layout_is_what_its_family_publishes(folders):
    assert len(list((folders["dream"][0]).glob("model-0000*-of-0000*.safetensors"))) > 1
    assert (folders["dream"][0] / "model.safetensors.index.json").is_file()
    assert "lm_head.weight" not in load_file(str(folders["qwen2"][0] / "model.safetensors"))
    model, _ = load_pretrained(folders["qwen2"][0])
    assert model.transformer.lm_head is None and model.config.qkv_bias and model.config.shift_logits
    model, _ = load_pretrained(folders["coda"][0])
    assert model.config.qk_norm and not model.config.qkv_bias and model.config.head_dim == 32
    assert model.config.rope_theta == 5000.0  # under rope_parameters (transformers 5.x)
    model, _ = load_pretrained(folders["llada"][0])
    assert not model.config.shift_logits and model.config.norm_eps == 1e-5 and model.config.rope_theta == 5000.0


def test_weights_keep_the_checkpoint_dtype_off_the_cpu(folders):
    assert weights_dtype({"torch_dtype": "bfloat16"}, "cuda:0") == torch.bfloat16  # transformers 4.x key
    assert weights_dtype({"dtype": "bfloat16"}, "cuda") == torch.bfloat16  # transformers 5.x key
    assert weights_dtype({"dtype": "bfloat16"}, "cpu") == torch.float32
    assert weights_dtype({"dtype": "bfloat16"}, "cuda", torch.float32) == torch.float32
    model, _ = load_pretrained(folders["dream"][0], dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_bf16_weights_run_fills(folders):
    """What a GPU gets (the checkpoint's bf16): the sampler runs on it, here on CPU."""
    model, tok, meta = load_hf_folder(folders["dream"][0], dtype=torch.bfloat16)
    fills = Engine(model, tok, meta).fill([CanvasRequest("def f(x):\n    return ", "\n", 6), CanvasRequest("x = ", "", 4)])
    assert [f.tokens == len(f.pieces) <= n and "".join(f.pieces) == f.text for f, n in zip(fills, (6, 4))] == [True, True]


def test_folder_without_tokenizer_json_reads_vocab_and_merges(folders, tmp_path):
    from diffusion_lsp.context.tokens import model_token_counter

    folder = copy(folders["dream"][0], tmp_path / "bpe")
    hf = HFTokenizer.from_file(str(folder / "tokenizer.json"))
    (folder / "tokenizer.json").unlink()
    hf.model.save(str(folder))  # vocab.json + merges.txt, as the older Qwen2 uploads have them
    _, tok = load_pretrained(folder)
    _, ref = load_pretrained(folders["dream"][0])
    text = "def add(a, b):\n    return a + b\n"
    # hf_tokenizer.py splits with Qwen2's pre-tokenizer regex, not the GPT-2 one train_bpe used: ids may differ
    assert tok.decode(tok.encode(text)) == text
    assert (tok.mask_id, tok.filler_id, tok.bos_id) == (ref.mask_id, ref.filler_id, ref.bos_id)
    assert model_token_counter(folder)(text) == len(tok.encode(text))  # the context's counts: this tokenizer too


def copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_unloadable_folders_are_one_clear_error(folders, tmp_path):
    dream = folders["dream"][0]
    pickled = copy(folders["qwen2"][0], tmp_path / "pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"only pickled weights \(pytorch_model.bin\).*supported: model.safe"):
        load_pretrained(pickled)
    unknown = copy(folders["qwen2"][0], tmp_path / "unknown")
    rewrite_config(unknown, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(CheckpointError, match=r"unknown model family \(model_type 'gpt2'.*supported: dream"):
        load_pretrained(unknown)
    lost = copy(dream, tmp_path / "lost")
    shard = sorted(lost.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=f"index.json lists {shard.name}, which is missing"):
        load_pretrained(lost)
    corrupt = copy(dream, tmp_path / "corrupt")
    shard = sorted(corrupt.glob("model-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # header intact, data cut short
    with pytest.raises(CheckpointError, match=f"{shard.name} is corrupt"):
        load_pretrained(corrupt)
    nomask = copy(folders["coda"][0], tmp_path / "nomask")
    rewrite_config(nomask, mask_token_id=None)
    (nomask / "tokenizer.json").write_text((nomask / "tokenizer.json").read_text().replace("<|mask|>", "<|xx|>"))
    with pytest.raises(CheckpointError, match="no mask token"):
        load_pretrained(nomask)
    scaled = copy(dream, tmp_path / "scaled")
    rewrite_config(scaled, rope_scaling={"type": "yarn", "factor": 4.0})
    with pytest.raises(CheckpointError, match="rope_scaling of type 'yarn'"):
        load_pretrained(scaled)
    untokenized = copy(folders["qwen2"][0], tmp_path / "untokenized")
    (untokenized / "tokenizer.json").unlink()  # vocab.json + merges.txt are hf_tokenizer.py's; none here either
    with pytest.raises(CheckpointError, match="untokenized"):
        load_pretrained(untokenized)
    biased = copy(folders["llada"][0], tmp_path / "biased")
    state = load_file(str(biased / "model.safetensors"))
    state["model.transformer.blocks.0.attn_out.bias"] = torch.zeros(64)
    save_file(state, str(biased / "model.safetensors"))
    with pytest.raises(CheckpointError, match="unexpected model.transformer.blocks.0.attn_out.bias"):
        load_pretrained(biased)


def test_engine_loads_both_formats(folders, tiny_checkpoint):
    own = load_engine(LaunchSettings(str(tiny_checkpoint), device="cpu", threads=1, precision="fp32"))
    assert own.meta["format"] == "diffusion-lsp-checkpoint"
    hf = load_engine(LaunchSettings(str(folders["dream"][0]), device="cpu", threads=1))
    assert hf.meta["family"] == "dream" and hf.model.int8_head is not None  # auto on CPU: int8 as before


@pytest.mark.parametrize("family", list(TOKENS))
def test_fim_runs_on_every_family(folders, family, tmp_path, capsys):
    folder = folders[family][0]
    src = tmp_path / "add.py"
    src.write_text("def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n")
    code = main(["fim", str(src), "--at", "2:12", "--model", str(folder), "--json", "--max-tokens", "5",
                 "--threads", "1"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and isinstance(record["text"], str) and 1 <= record["forwards"] <= 6
    assert record["tokens"] == len(record["confidence"]) <= 5
    batch = tmp_path / "in.jsonl"
    batch.write_text("\n".join(json.dumps({"id": i, "prefix": p, "suffix": "\n", "max_tokens": 4})
                               for i, p in enumerate(["x = ", "def f(x):\n    return ", "import "])) + "\n")
    code = main(["fim", "--batch", str(batch), "--model", str(folder), "--batch-size", "2", "--threads", "1"])
    records = [json.loads(s) for s in capsys.readouterr().out.splitlines()]
    assert code == 0 and [r["id"] for r in records] == [0, 1, 2] and all("error" not in r for r in records)


def test_fim_on_an_unsupported_folder_is_one_line(folders, tmp_path, capsys):
    folder = copy(folders["qwen2"][0], tmp_path / "gpt2")
    rewrite_config(folder, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    code = main(["fim", str(src), "--at", "1:1", "--model", str(folder), "--threads", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "unknown model family" in err and "\n" not in err


@pytest.mark.parametrize("family", list(TOKENS))
def test_model_check_puts_our_logits_beside_transformers(folders, family, capsys):
    folder = folders[family][0]
    assert main(["model", "check", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ref = report["reference"]
    assert report["format"] == "huggingface" and report["family"] == {"diffucoder": "dream"}.get(family, family)
    assert report["parameters"] > 0 and report["special_tokens"]["mask"] is not None
    assert ref["tokens"] > 10 and ref["max_abs_diff"] < 1e-4 and ref["argmax_agreement"] == 1.0


def test_model_check_sees_a_wrong_tensor_mapping(folders, monkeypatch, capsys):
    from diffusion_lsp.model.families import table as families

    gate, up = "layers.{i}.mlp.gate_proj.weight", "layers.{i}.mlp.up_proj.weight"
    monkeypatch.setitem(families.LLADA_TENSORS, gate, families.LLADA_TENSORS[up])  # gate and up swapped
    monkeypatch.setitem(families.LLADA_TENSORS, up, "model.transformer.blocks.{i}.ff_proj.weight")
    assert main(["model", "check", str(folders["llada"][0])]) == 0
    out = capsys.readouterr().out
    diff = float(out.split("max |diff| ")[1].split()[0])
    assert "family llada" in out and diff > 0.1


def test_model_check_on_our_own_format_and_on_nothing(tiny_checkpoint, tmp_path, capsys):
    assert main(["model", "check", str(tiny_checkpoint), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "diffusion-lsp" and "skipped" in report["reference"]
    assert main(["model", "check", str(tmp_path)]) == 2
    assert "config.json is missing" in capsys.readouterr().err
