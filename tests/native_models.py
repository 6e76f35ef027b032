"""A tiny DiffusionGemma folder as transformers writes one (config.json with text and gemma4_vision
sub-configs, model.safetensors, generation_config.json) with a tokenizer that has Gemma's special
tokens and a Gemma-style chat template: for tests of model/families/native.py and its users."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from diffusion_lsp.model.network.config import SpecialTokens
from diffusion_lsp.model.network.tokenizer import train_bpe

from conftest import corpus_texts

# Gemma's chat template layout (google/gemma-2-*-it, gemma-3-*-it): the published DiffusionGemma's own
# template could not be read here; a real folder brings its own and that one is rendered
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")
SPECIAL = SpecialTokens("<mask>", "<eos>", "<bos>", {"pad": "<pad>", "sot": "<start_of_turn>",
                                                     "eot": "<end_of_turn>"})


def write_diffusion_gemma(folder: Path, canvas: int = 16, steps: int | None = 6, template: bool = True) -> Path:
    """The folder, with random weights large enough that the model is sure of some tokens."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tok = train_bpe(corpus_texts(), vocab_size=400, special=SPECIAL)
    tok.hf.save(str(folder / "tokenizer.json"))
    ids = {name: tok.hf.token_to_id(name) for name in ("<pad>", "<eos>", "<bos>", "<end_of_turn>")}
    config = {"mask_token": "<mask>", "pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>"}
    if template:
        config["chat_template"] = GEMMA_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    text = dict(vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=16,
                max_position_embeddings=512, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
                sliding_window=64, layer_types=["sliding_attention", "full_attention"],
                pad_token_id=ids["<pad>"], eos_token_id=ids["<eos>"], bos_token_id=ids["<bos>"])
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16)
    cfg = transformers.DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=canvas,
                                            boi_token_id=ids["<pad>"], eoi_token_id=ids["<pad>"],
                                            image_token_id=ids["<pad>"])
    torch.manual_seed(3)
    model = transformers.DiffusionGemmaForBlockDiffusion(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim > 1:
                p.mul_(8.0)
    model.generation_config.eos_token_id = [ids["<eos>"], ids["<end_of_turn>"]]
    if steps is not None:
        model.generation_config.max_denoising_steps = steps
    model.save_pretrained(folder)
    return folder
