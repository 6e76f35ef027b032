"""Int8 weights for CPU inference: close to float32, and the engine picks them on CPU."""

from __future__ import annotations

import copy
import gc
import weakref

import pytest
import torch

from diffusion_lsp.engine import load_engine
from diffusion_lsp.model.decoding.canvas import CanvasRequest
from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.network.quantize import int8_available, quantize_int8
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig
from diffusion_lsp.model.network.transformer import DiffusionTransformer

# a Qwen2 folder written by `bench pretrained` (bf16, tied, q/k/v biases), tiny
TINY_QWEN = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=448, rope_theta=10000.0, rms_norm_eps=1e-6,
                 max_position_embeddings=512, tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False)

pytestmark = pytest.mark.skipif(not int8_available(), reason="no int8 CPU kernels in this PyTorch build")


@pytest.mark.parametrize("flags", [dict(), dict(tie_embeddings=False, qkv_bias=True, shift_logits=True)])
@torch.inference_mode()
def test_int8_logits_stay_close_to_float32(flags):
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny", **flags)).eval()
    tokens = torch.randint(0, 512, (2, 48))
    want, _ = model(tokens)
    quantize_int8(model)
    got, _ = model(tokens)
    assert sum(isinstance(m, torch.nn.Linear) and type(m) is torch.nn.Linear for m in model.layers.modules()) == 0
    p, q = want.softmax(-1), got.softmax(-1)
    kl = (p * (p.log() - q.log())).sum(-1).mean()
    assert kl < 1e-3 and (want.argmax(-1) == got.argmax(-1)).float().mean() > 0.9
    assert (got - want).abs().max() < 0.1 * want.abs().max()


def test_the_engine_uses_int8_on_cpu_only_when_asked_or_auto(tiny_checkpoint):
    auto = load_engine(LaunchSettings(str(tiny_checkpoint), device="cpu", threads=1))
    fp32 = load_engine(LaunchSettings(str(tiny_checkpoint), device="cpu", threads=1, precision="fp32"))
    assert auto.model.int8_head is not None and fp32.model.int8_head is None
    reqs = [CanvasRequest("def f(x):\n    return", "\n", 6), CanvasRequest("import os\n", "x = 1\n", 8)]
    cfg = SamplerConfig(policy="one", trailing_fillers=False, block_size=0, heal=False)  # one position per pass
    got, want = auto.fill(reqs, cfg), fp32.fill(reqs, cfg)
    assert [r.forwards for r in got] == [r.forwards for r in want] == [6, 8]
    quantize_int8(fp32.model)  # the same weights quantized by hand: the auto engine decoded with exactly these
    by_hand = fp32.fill(reqs, cfg)
    assert [(r.token_ids, r.confidence) for r in got] == [(r.token_ids, r.confidence) for r in by_hand]
    assert [r.confidence for r in got] != [r.confidence for r in want]  # and not with the float32 ones
    with pytest.raises(ValueError, match="CPU"):
        load_engine(LaunchSettings(str(tiny_checkpoint), device="cuda", precision="int8"))
    with pytest.raises(ValueError, match="precision"):
        LaunchSettings(str(tiny_checkpoint), device="cpu", precision="fp8")


@pytest.mark.parametrize("tied", [True, False])
@torch.inference_mode()
def test_no_float_weight_of_a_quantized_matrix_stays_alive(tied):
    """The int8 copy replaces each float matrix: the model holds no float Linear any more, and the
    original tensors (a block's and the untied head's) are freed, not kept by the model or a copy."""
    model = DiffusionTransformer(ModelConfig.preset("tiny", tie_embeddings=tied)).eval()
    gone = [weakref.ref(model.layers[0].mlp.up_proj.weight), weakref.ref(model.layers[-1].attn.q_proj.weight)]
    if not tied:
        gone.append(weakref.ref(model.lm_head.weight))
    quantize_int8(model)
    gc.collect()
    assert [type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.Linear)] == []
    assert model.lm_head is None and [r() for r in gone] == [None] * len(gone)
    assert {n for n, p in model.named_parameters() if p.ndim == 2} == {"embed.weight"}  # the input needs it
    logits, _ = model(torch.randint(0, 512, (1, 8)))
    assert logits.shape == (1, 8, 512)


@torch.inference_mode()
def test_a_bf16_model_quantizes_to_the_int8_weights_of_its_float32_copy():
    """load_engine loads a bf16 folder as stored for int8: widening is exact, so the result must be the
    float32 load's, bit for bit, and compute in float32."""
    torch.manual_seed(0)
    wide = DiffusionTransformer(ModelConfig.preset("tiny", qkv_bias=True)).eval()
    with torch.no_grad():
        for p in wide.parameters():
            p.copy_(p.bfloat16().float())  # values a bf16 checkpoint can hold
    narrow = copy.deepcopy(wide).to(torch.bfloat16)
    quantize_int8(wide)
    quantize_int8(narrow)
    assert {p.dtype for p in narrow.parameters()} == {torch.float32}
    tokens = torch.randint(0, 512, (2, 24))
    assert torch.equal(wide(tokens)[0], narrow(tokens)[0])


def test_an_int8_load_of_a_bf16_folder_equals_quantizing_its_float32_load(tmp_path):
    from diffusion_lsp.bench.pretrained import write_folder

    folder = write_folder(tmp_path / "dream", TINY_QWEN, tokenizer_vocab=400)
    int8 = load_engine(LaunchSettings(str(folder), device="cpu", threads=1, precision="int8"))
    fp32 = load_engine(LaunchSettings(str(folder), device="cpu", threads=1, precision="fp32"))
    quantize_int8(fp32.model)
    ids = torch.tensor([int8.tokenizer.encode("def f(x):\n    return x + 1\n")])
    with torch.inference_mode():
        assert torch.equal(int8.model(ids)[0], fp32.model(ids)[0])
