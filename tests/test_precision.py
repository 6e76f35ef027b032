"""16-bit weights (issue 22): precision bf16 / fp16 load every checkpoint format (ours, a Hugging Face
folder, an adapter folder) in that dtype on any device, "auto" picks bf16 for our own format on a
CUDA GPU that has it, and "auto" on CPU is what it was (int8 where torch has the kernels, else fp32)."""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil

import pytest
import torch

from test_checkpoint_limits import hf_folder  # noqa: F401 (a fixture)
from diffusion_lsp.engine import load_engine
from diffusion_lsp.engine.loading import _float_dtype
from diffusion_lsp.model.families import lora
from diffusion_lsp.model.network import quantize
from diffusion_lsp.model.decoding.canvas import CanvasRequest
from diffusion_lsp.model.families.pretrained import load_folder
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig, add_args, from_args

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
IDS = torch.tensor([[5, 17, 42, 3, 99, 7, 250, 11]])
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def dtypes(model) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters()}


def logits(model, ids=IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(ids)[0].float()  # [S, V]


def cpu(path, precision: str):
    return load_engine(LaunchSettings(str(path), device="cpu", threads=1, precision=precision))


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint, tmp_path_factory):
    """An adapter folder over a copy of the tiny checkpoint, with a non-zero update to merge."""
    root = tmp_path_factory.mktemp("adapted")
    base = shutil.copytree(tiny_checkpoint, root / "base")
    model, _, _ = load_folder(base)
    lora.add_adapters(model, rank=2, alpha=8)
    for name, p in model.named_parameters():
        if name.endswith("lora_b"):
            p.data.fill_(0.01)
    return lora.save_adapter(root / "adapter", model, base)


@pytest.mark.parametrize("precision", DTYPES)
def test_16_bit_precisions_load_our_own_format_in_that_dtype(tiny_checkpoint, precision):
    """Our format stores float32 and loaded float32 whatever was asked; now the weights are cast, and
    the logits stay those of the float32 model within the 16-bit rounding."""
    got, want = cpu(tiny_checkpoint, precision), cpu(tiny_checkpoint, "fp32")
    assert dtypes(got.model) == {DTYPES[precision]} and dtypes(want.model) == {torch.float32}
    a, b = logits(got.model), logits(want.model)
    assert (a - b).abs().max() < 0.05 * b.abs().max()


@pytest.mark.parametrize("precision", DTYPES)
def test_16_bit_precisions_load_a_hugging_face_folder_in_that_dtype(hf_folder, precision):  # noqa: F811
    got, want = cpu(hf_folder, precision), cpu(hf_folder, "fp32")
    assert dtypes(got.model) == {DTYPES[precision]} and dtypes(want.model) == {torch.float32}
    a, b = logits(got.model), logits(want.model)
    assert (a - b).abs().max() < 0.05 * b.abs().max()


@pytest.mark.parametrize("precision", DTYPES)
def test_16_bit_precisions_load_an_adapter_folder_merged_in_that_dtype(adapter, precision):
    got, want = cpu(adapter, precision), cpu(adapter, "fp32")
    assert dtypes(got.model) == {DTYPES[precision]}  # no float32 adapter matrix left beside the merged weights
    assert got.meta["adapter"]["rank"] == 2
    a, b = logits(got.model), logits(want.model)
    assert (a - b).abs().max() < 0.05 * b.abs().max()
    base = cpu(adapter.parent / "base", "fp32")
    assert not torch.allclose(logits(base.model), b, atol=1e-3)  # the update was merged, not dropped


def test_a_bf16_fill_on_cpu_runs_end_to_end(tiny_checkpoint):
    engine = cpu(tiny_checkpoint, "bf16")
    reqs = [CanvasRequest("def f(x):\n    return", "\n", 6), CanvasRequest("import os\n", "x = 1\n", 8)]
    cfg = SamplerConfig(policy="one", trailing_fillers=False, block_size=0, heal=False)  # one position per pass
    results = engine.fill(reqs, cfg)
    assert [r.forwards for r in results] == [6, 8]
    for r in results:
        assert r.text == "".join(r.pieces) and r.text.strip()
        assert len(r.confidence) == r.tokens > 0 and all(0 < c <= 1 and math.isfinite(c) for c in r.confidence)


def test_a_bad_precision_is_refused_naming_the_field_and_the_good_values(tiny_checkpoint):
    for bad in ("fp8", "bfloat16", "BF16", ""):
        with pytest.raises(ValueError, match=r"precision.*auto, fp32, bf16, fp16 or int8"):
            LaunchSettings(str(tiny_checkpoint), device="cpu", precision=bad)
        with pytest.raises(ValueError, match="precision"):
            LaunchSettings.from_wire({"precision": bad})


def test_the_16_bit_precisions_travel_as_flags_and_wire_values():
    for precision in DTYPES:
        launch = LaunchSettings(device="cpu", precision=precision)
        assert launch.to_argv() == ["--device", "cpu", "--precision", precision]
        p = argparse.ArgumentParser()
        add_args(p, LaunchSettings)
        assert from_args(LaunchSettings, p.parse_args(launch.to_argv())) == launch
        assert LaunchSettings.from_wire({"precision": precision}).precision == precision


def test_auto_on_cpu_is_int8_where_torch_has_the_kernels(tiny_checkpoint):
    auto = cpu(tiny_checkpoint, "auto")
    assert (auto.model.int8_head is not None) == quantize.int8_available()
    assert _float_dtype("auto", "cpu", tiny_checkpoint) is None  # not bf16: CPU auto loads float32 as before


def test_auto_on_cpu_without_int8_kernels_is_float32_for_every_format(tiny_checkpoint, hf_folder,  # noqa: F811
                                                                      adapter, monkeypatch):
    monkeypatch.setattr(quantize, "int8_available", lambda: False)
    for folder in (tiny_checkpoint, hf_folder, adapter):
        auto, fp32 = cpu(folder, "auto"), cpu(folder, "fp32")
        assert auto.model.int8_head is None and dtypes(auto.model) == {torch.float32}
        assert torch.equal(logits(auto.model), logits(fp32.model))


def test_auto_on_cuda_is_bf16_for_our_own_format_where_the_gpu_has_it(tiny_checkpoint, hf_folder,  # noqa: F811
                                                                      adapter, monkeypatch):
    """The choice alone (no GPU here): bf16 for our format and an adapter over it when the GPU has
    native bf16, else the loader's float32; a Hugging Face folder keeps its own dtype (None)."""
    monkeypatch.setattr(torch.cuda, "device", contextlib.nullcontext)
    for native in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True, n=native: n)
        want = torch.bfloat16 if native else None
        assert _float_dtype("auto", "cuda", tiny_checkpoint) is want
        assert _float_dtype("auto", "cuda:1", adapter) is want
        assert _float_dtype("auto", "cuda", hf_folder) is None
        assert _float_dtype("auto", "mps", tiny_checkpoint) is None
    for precision, dtype in {**DTYPES, "fp32": torch.float32}.items():
        assert _float_dtype(precision, "cuda", hf_folder) is dtype


@needs_cuda
@pytest.mark.parametrize("precision", ["auto", "bf16", "fp16"])
def test_16_bit_weights_on_a_gpu(tiny_checkpoint, hf_folder, precision):  # noqa: F811
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    want = DTYPES.get(precision, torch.bfloat16 if native else torch.float32)
    engine = load_engine(LaunchSettings(str(tiny_checkpoint), device="cuda", precision=precision))
    assert dtypes(engine.model) == {want} and {p.device.type for p in engine.model.parameters()} == {"cuda"}
    assert engine.fill([CanvasRequest("def f(x):\n    return", "\n", 6)])[0].forwards > 0
    hf = load_engine(LaunchSettings(str(hf_folder), device="cuda", precision=precision))
    assert dtypes(hf.model) == {DTYPES.get(precision, torch.float32)}  # auto: the folder's own (float32 here)


def test_every_float_precision_has_its_dtype(tiny_checkpoint):
    """Every float value of the setting has its dtype: a new one added to PRECISIONS without a dtype
    fails here, not at a user's load."""
    from diffusion_lsp.protocol.settings import PRECISIONS

    for precision in PRECISIONS:
        if precision not in ("auto", "int8"):
            assert isinstance(_float_dtype(precision, "cpu", tiny_checkpoint), torch.dtype)
