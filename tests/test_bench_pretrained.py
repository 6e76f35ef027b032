"""`bench pretrained` end to end on a tiny folder from its own writer: the folder is one the loader
takes (Dream config, tied bf16 weights, a tokenizer smaller than the model's vocab) and the run prints
every row of its table, the ratios and the goal line. Figures are not checked: it is a benchmark."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from diffusion_lsp.bench.pretrained import QWEN_05B, qwen_tensors, write_folder
from diffusion_lsp.cli import main
from diffusion_lsp.engine import load_engine
from diffusion_lsp.protocol.settings import LaunchSettings

TINY = {**QWEN_05B, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96,
        "vocab_size": 448}


def test_the_written_folder_has_the_published_layout_and_loads(tmp_path):
    folder = write_folder(tmp_path / "qwen", TINY, tokenizer_vocab=400)
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["tie_word_embeddings"]) == ("Dream", ["DreamModel"],
                                                                                            True)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()} == qwen_tensors(TINY)
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert "lm_head.weight" not in qwen_tensors(TINY) and qwen_tensors(QWEN_05B)["model.layers.23.mlp.up_proj.weight"] \
        == (4864, 896)
    engine = load_engine(LaunchSettings(str(folder), device="cpu", threads=1, precision="fp32"))
    assert engine.tokenizer.vocab_size < engine.model.config.vocab_size == 448
    assert engine.tokenizer.mask_id == config["mask_token_id"] and engine.model.config.qkv_bias
    assert engine.model.embed.weight.dtype == torch.float32


@pytest.mark.slow
def test_the_benchmark_prints_its_table_on_a_tiny_folder(tmp_path, capsys):
    folder = write_folder(tmp_path / "tiny", TINY, tokenizer_vocab=400)
    assert main(["bench", "pretrained", "--folder", str(folder), "--fills", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "random weights" in out and "peak RSS MB" in out
    rows = [line.split() for line in out.splitlines()]
    assert [r[:2] for r in rows if r[:1] in (["embedded"], ["tiny"])] == [
        ["embedded", "fp32"], ["embedded", "int8"], ["tiny", "fp32"], ["tiny", "int8"]]
    assert "ratios embedded: int8/fp32 ms" in out and "ratios int8: tiny/embedded ms" in out
    assert "goal: p50 <= 1 s with int8 (tiny): fresh" in out
