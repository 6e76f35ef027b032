"""Int8 weights for CPU inference: close to float32, and the engine picks them on CPU."""

from __future__ import annotations

import pytest
import torch

from diffusion_lsp.engine import load_engine
from diffusion_lsp.model.canvas import FillRequest
from diffusion_lsp.model.config import ModelConfig
from diffusion_lsp.model.quantize import int8_available, quantize_int8
from diffusion_lsp.model.settings import LaunchSettings, SamplerConfig
from diffusion_lsp.model.transformer import DiffusionTransformer

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
    reqs = [FillRequest("def f(x):\n    return", "\n", 6), FillRequest("import os\n", "x = 1\n", 8)]
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
        LaunchSettings(str(tiny_checkpoint), device="cpu", precision="fp16")
