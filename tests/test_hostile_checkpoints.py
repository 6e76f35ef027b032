"""Checkpoint folders and adapters at fault, for every family (issue: reliability round four, item 5):
sizes no model has in a DiffusionGemma config (text and vision towers, the canvas, the image token ids,
its generation_config.json's denoising steps), or that its weights do not hold, and in a mixture of
experts (LLaDA2's experts, its partial_rotary_factor), scale-like floats that are not finite or not sane
(routed_scaling_factor, rope_theta, rms_norm_eps, an adapter's alpha), NaN or infinite weights in a
checkpoint or an adapter, and an adapter's weights that are not a regular file. Each is one
CheckpointError naming the key (or the tensor) found from config.json alone, before any module is
built or any weight is read; the command line says it in one line (exit 2), the worker as its one
"model failed to load" message."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from diffusion_lsp.cli import main
from diffusion_lsp.model.families import lora
from diffusion_lsp.model.families.checkpoint import CheckpointError
from diffusion_lsp.model.families.native_load import load_native
from diffusion_lsp.model.families.pretrained import load_folder
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.worker.process import Worker, load_model

from native_models import write_diffusion_gemma
from test_checkpoint_limits import copy, fifos, hf_folder, never_opened, no_modules, one_line_error  # noqa: F401
from test_families_new import build_llada2

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    return write_diffusion_gemma(tmp_path_factory.mktemp("gemma") / "diffusiongemma")


@pytest.fixture(scope="module")
def llada2(tmp_path_factory) -> Path:
    return build_llada2(tmp_path_factory.mktemp("llada2") / "llada2")[0]


def edited(src: Path, dst: Path, edit) -> Path:
    """A copy of src whose config.json is edit(config) (which changes it in place)."""
    folder = copy(src, dst)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def setting(path: str, value):
    """An edit that sets config.json's `path` ("text_config.num_hidden_layers") to value; None deletes it."""
    *parents, key = path.split(".")

    def edit(config):
        for p in parents:
            config = config[p]
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    return edit


@pytest.fixture
def nothing_built(monkeypatch):
    """Building the DiffusionGemma model (for real or on the meta device) fails the test: a config at fault
    must be refused from config.json alone."""

    def built(self, *args, **kwargs):
        raise AssertionError("the DiffusionGemma model was built")

    monkeypatch.setattr(transformers.DiffusionGemmaForBlockDiffusion, "__init__", built)


GEMMA_FAULTS = [  # config.json key, value -> the error
    ("text_config.num_hidden_layers", 10**6, "text_config.num_hidden_layers should be an integer from 1 to 1024, "
                                             "got 1000000"),
    ("vision_config.num_hidden_layers", 10**6, "vision_config.num_hidden_layers should be an integer from 1 to 1024"),
    ("text_config.vocab_size", 10**9, "text_config.vocab_size should be an integer from 1 to 2097152"),
    ("text_config.hidden_size", 1e9, r"text_config.hidden_size should be an integer from 1 to 65536, got 1000000000.0"),
    ("text_config.num_experts", 10**6, "text_config.num_experts should be an integer from 0 to 1024"),
    ("text_config.moe_intermediate_size", 10**9, "text_config.moe_intermediate_size should be an integer from 0"),
    ("text_config.global_head_dim", 10**6, "text_config.global_head_dim should be an integer from 1 to 4096"),
    ("vision_config.hidden_size", 10**7, "vision_config.hidden_size should be an integer from 1 to 65536"),
    ("vision_config.position_embedding_size", 10**9, "vision_config.position_embedding_size should be an integer"),
    ("vision_config.patch_size", 10**5, "vision_config.patch_size should be an integer from 1 to 4096"),
    ("text_config.rms_norm_eps", math.nan, "text_config.rms_norm_eps should be a positive number, got nan"),
    ("text_config.rope_parameters.full_attention.rope_theta", 1e308,
     r"text_config.rope_parameters.full_attention.rope_theta should be a number from 1 to 1e\+12, got 1e\+308"),
    ("text_config.layer_types", ["full_attention"] * 10**5, "text_config.layer_types should be a list of "
                                                            r"num_hidden_layers \(2\) layer types"),
    ("canvas_length", 10**9, r"canvas_length should be an integer from 1 to 256 \(at most 4096, and two canvases "
                             r"within text_config.max_position_embeddings 512\), got 1000000000"),
    ("canvas_length", 0, "canvas_length should be an integer from 1 to 256"),
    ("image_token_id", None, r"image_token_id is missing \(a diffusiongemma config names its image "
                             r"tokens"),
    ("image_token_id", 10**6, "image_token_id should be a token id from 0 to 399 "
                              r"\(text_config.vocab_size\), got 1000000"),
    ("boi_token_id", -1, "boi_token_id should be a token id from 0 to 399"),
]


@pytest.mark.parametrize("key,value,message", GEMMA_FAULTS,
                         ids=[f"{k}={str(v)[:12]}" for k, v, _ in GEMMA_FAULTS])
def test_a_diffusion_gemma_config_at_fault_is_refused_before_anything_is_built(gemma, tmp_path, nothing_built,
                                                                               key, value, message):
    folder = edited(gemma, tmp_path / "bad", setting(key, value))
    with pytest.raises(CheckpointError, match=f"checkpoint {folder}: config.json {message}"):
        load_native(folder)


def three_layers(config):
    config["text_config"].update(num_hidden_layers=3, layer_types=["sliding_attention"] * 2 + ["full_attention"])


@pytest.mark.parametrize("edit,message", [
    # within the bounds, but more than the weights hold: transformers would build them and fill them at random
    (three_layers, r"the model it describes has model\.\S+\.layers\.2\.\S+, which the weights do not hold"),
    (setting("vision_config.intermediate_size", 128), r"model.encoder.vision_tower.\S+ is \[64, 32\], config.json "
                                                      r"gives \[128, 32\]"),
], ids=["layers", "vision-width"])
def test_a_diffusion_gemma_config_that_the_weights_do_not_hold_is_refused_before_loading(
        gemma, tmp_path, monkeypatch, edit, message):
    folder = edited(gemma, tmp_path / "bad", edit)

    def loaded(*args, **kwargs):
        raise AssertionError("from_pretrained was called")

    monkeypatch.setattr(transformers.DiffusionGemmaForBlockDiffusion, "from_pretrained", loaded)
    with pytest.raises(CheckpointError, match=f"config.json and the weights do not match \\({message}"):
        load_native(folder)


def with_weight(src: Path, dst: Path, name: str | None, value: float, weights: str = "model.safetensors") -> Path:
    """A copy of src whose tensor `name` (None: the first floating one) has `value` at its first element."""
    folder = copy(src, dst)
    state = load_file(str(folder / weights))
    name = name or next(k for k in sorted(state) if state[k].is_floating_point())
    state[name].view(-1)[0] = value
    save_file(state, str(folder / weights))
    return folder


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_diffusion_gemma_weight_that_is_not_finite_is_refused_naming_it(gemma, tmp_path, value):
    name = "model.encoder.vision_tower.encoder.layers.0.mlp.down_proj.linear.weight"
    folder = copy(gemma, tmp_path / "bad")
    state = load_file(str(folder / "model.safetensors"))
    assert name in state
    state[name][3, 5] = value
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=f"model.safetensors holds NaN or infinite values in {name}"):
        load_native(folder)


@pytest.mark.parametrize("changes,message", [
    ({"max_denoising_steps": 10**9}, "max_denoising_steps should be an integer from 1 to 1024, got 1000000000"),
    ({"t_max": math.nan}, "t_max should be a finite number, got nan"),
    ({"sampler_config": {"entropy_bound": math.inf}}, "sampler_config.entropy_bound should be a finite number, got inf"),
])
def test_a_diffusion_gemma_generation_config_at_fault_is_refused_at_load(gemma, tmp_path, changes, message):
    """A fill without a time budget may run every denoising step of a canvas (transformers stops early only
    once the canvas settles): 10^9 of them is a fill that never ends."""
    folder = copy(gemma, tmp_path / "bad")
    gen = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**gen, **changes}))
    with pytest.raises(CheckpointError, match=f"checkpoint {folder}: generation_config.json {message}"):
        load_native(folder)


@fifos
@pytest.mark.parametrize("name", ["generation_config.json", "model.safetensors"])
def test_a_fifo_in_a_diffusion_gemma_folder_is_refused_before_it_is_opened(gemma, tmp_path, name):
    folder = copy(gemma, tmp_path / "fifo")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    with never_opened(folder / name), pytest.raises(CheckpointError, match=rf"{name} is a FIFO \(named pipe\)"):
        load_native(folder)


@pytest.mark.parametrize("key,value,said", [
    ("text_config.num_hidden_layers", 10**6, "config.json text_config.num_hidden_layers should be an integer"),
    ("image_token_id", None, "config.json image_token_id is missing"),
    ("canvas_length", 10**9, "config.json canvas_length should be an integer from 1 to 256"),
])
def test_the_command_line_says_a_diffusion_gemma_config_at_fault_in_one_line(gemma, tmp_path, capsys, key, value,
                                                                             said):
    folder = edited(gemma, tmp_path / "bad", setting(key, value))
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    for argv in (["fim", str(src), "--at", "1:1", "--model", str(folder), "--threads", "1"],
                 ["model", "check", str(folder)]):
        assert said in one_line_error(capsys, argv)


LLADA2_FAULTS = [  # config.json changes -> the error; from config.json alone (no module is built)
    ({"routed_scaling_factor": 1e308}, r"config.json routed_scaling_factor should be a number from 1e-06 to 1000, "
                                       r"got 1e\+308"),
    ({"routed_scaling_factor": math.nan}, "config.json routed_scaling_factor should be a positive number, got nan"),
    ({"num_experts": 10**6}, "config.json num_experts should be an integer from 0 to 1024, got 1000000"),
    ({"moe_intermediate_size": 10**9}, "config.json moe_intermediate_size should be an integer from 0 to 262144"),
    ({"num_shared_experts": 10**6}, "config.json num_shared_experts should be an integer from 0 to 1024"),
    ({"first_k_dense_replace": 10**6}, "config.json first_k_dense_replace should be an integer from 0 to 1024"),
    ({"num_experts": 16, "n_group": 8}, r"config.json and the weights do not match \(num_experts is 16, but layer 1 "
                                        r"of the weights holds 8 experts\)"),
    ({"moe_intermediate_size": 64}, r"config.json and the weights do not match \(num_experts, moe_intermediate_size "
                                    r"and num_shared_experts give \[64, 64\] for "
                                    r"model.layers.1.mlp.experts.0.gate_proj.weight, which is \[32, 64\]\)"),
    ({"rope_theta": 0.5}, "config.json rope_theta should be a number from 1 to 1e\\+12, got 0.5"),
    ({"partial_rotary_factor": math.nan}, "config.json partial_rotary_factor should be a number above 0 and at most 1, "
                                          "got nan"),
    ({"partial_rotary_factor": 1e308}, r"config.json partial_rotary_factor should be a number above 0 and at most 1, "
                                       r"got 1e\+308"),
    ({"rms_norm_eps": 1e-300}, r"config.json rms_norm_eps should be a number from 1e-12 to 1, got 1e-300"),
]


@pytest.mark.parametrize("changes,message", LLADA2_FAULTS, ids=[str(c)[:30] for c, _ in LLADA2_FAULTS])
def test_a_mixture_of_experts_config_at_fault_is_refused_before_any_module_is_built(llada2, tmp_path, no_modules,
                                                                                    changes, message):
    folder = edited(llada2, tmp_path / "bad", lambda config: config.update(changes))
    with pytest.raises(CheckpointError, match=message):
        load_folder(folder)


@pytest.mark.parametrize("fmt", ["ours", "qwen2", "llada2"])
@pytest.mark.parametrize("value", [math.nan, -math.inf])
def test_a_weight_that_is_not_finite_is_refused_naming_it(tiny_checkpoint, hf_folder, llada2, tmp_path, fmt,  # noqa: F811
                                                          value):
    src, name = {"ours": (tiny_checkpoint, "layers.1.mlp.up_proj.weight"),
                 "qwen2": (hf_folder, "model.layers.1.mlp.up_proj.weight"),
                 "llada2": (llada2, "model.layers.2.mlp.experts.5.down_proj.weight")}[fmt]
    folder = with_weight(src, tmp_path / "bad", name, value)
    with pytest.raises(CheckpointError, match=f"model.safetensors holds NaN or infinite values in {name} "):
        load_folder(folder)


def test_a_weight_past_the_load_dtypes_range_is_refused_naming_it(hf_folder, tmp_path):  # noqa: F811
    name = "model.layers.0.self_attn.q_proj.weight"
    folder = with_weight(hf_folder, tmp_path / "big", name, 1e6)  # float32 on disk: finite, inf as float16
    with pytest.raises(CheckpointError, match=f"holds values as large as 1e\\+06 in {name} \\(weights must be at "
                                              "most 65504 in size"):
        load_folder(folder)
    with pytest.raises(CheckpointError, match=f"holds NaN or infinite values in {name}"):
        load_folder(folder, dtype=torch.float16)


@pytest.mark.parametrize("fmt", ["ours", "qwen2", "llada2"])
@pytest.mark.parametrize("value", [3e38, -70000.0])
def test_a_finite_weight_past_float16s_range_is_refused_naming_it(tiny_checkpoint, hf_folder, llada2, tmp_path,  # noqa: F811
                                                                   fmt, value):
    """The re-run probe's case: a finite 3e38 loaded, then overflowed the int8 quantizer's activations at
    the first fill (a "ChooseQuantizationParams" traceback), and gave NaN confidences in fp32."""
    src, name = {"ours": (tiny_checkpoint, "layers.0.attn.q_proj.weight"),
                 "qwen2": (hf_folder, "model.layers.0.self_attn.q_proj.weight"),
                 "llada2": (llada2, "model.layers.2.mlp.experts.5.down_proj.weight")}[fmt]
    folder = with_weight(src, tmp_path / "big", name, value)
    with pytest.raises(CheckpointError, match=re.escape(f"model.safetensors holds values as large as {abs(value):.3g} "
                                                        f"in {name} ")):
        load_folder(folder)
    sane = with_weight(src, tmp_path / "sane", name, -65504.0)
    load_folder(sane)


@pytest.fixture
def adapter(tiny_checkpoint, tmp_path) -> Path:
    """An adapter folder (rank 2, alpha 4) on a copy of the tiny checkpoint, its B small and nonzero."""
    base = copy(tiny_checkpoint, tmp_path / "base")
    model, _, _ = load_folder(base)
    lora.add_adapters(model, rank=2, alpha=4)
    for name, p in model.named_parameters():
        if name.endswith("lora_b"):
            p.data.fill_(0.01)
    return lora.save_adapter(tmp_path / "adapter", model, base)


def with_meta(folder: Path, **changes) -> Path:
    meta = json.loads((folder / "adapter.json").read_text())
    (folder / "adapter.json").write_text(json.dumps({**meta, **changes}))
    return folder


@pytest.mark.parametrize("alpha,said", [(math.nan, "nan"), (1e308, "1e+308"), (-4, "-4"), ("4", "'4'")])
def test_an_adapters_alpha_is_a_sane_number(adapter, alpha, said):
    with_meta(adapter, alpha=alpha)
    with pytest.raises(CheckpointError, match=rf"adapter {adapter}: adapter.json alpha should be a positive number "
                                              rf"of at most 64 × rank = 128, got {re.escape(said)}"):
        load_folder(adapter)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_an_adapter_weight_that_is_not_finite_is_refused_naming_it(adapter, tmp_path, value):
    name = "layers.1.attn.v_proj.lora_a"
    folder = with_weight(adapter, tmp_path / "bad", name, value, weights="adapter.safetensors")
    with pytest.raises(CheckpointError, match=f"adapter.safetensors holds NaN or infinite values in {name} "):
        load_folder(folder)


def test_an_adapter_whose_merged_weights_leave_the_dtype_is_refused_naming_them(adapter):
    state = load_file(str(adapter / "adapter.safetensors"))
    state["layers.0.mlp.down_proj.lora_b"].fill_(60000.0)  # each within float16's range; B A (x alpha / rank)
    state["layers.0.mlp.down_proj.lora_a"].fill_(1.0)  # is 2 x 2 x 60000 per entry, past it
    save_file(state, str(adapter / "adapter.safetensors"))
    load_folder(adapter)  # float32: within range
    with pytest.raises(CheckpointError, match=r"merging the adapter into layers.0.mlp.down_proj.weight gives values "
                                              r"past float16's range \(alpha / rank = 2\)"):
        load_folder(adapter, dtype=torch.float16)


def test_an_adapter_that_does_not_fit_is_refused_from_its_header(adapter, monkeypatch):
    state = load_file(str(adapter / "adapter.safetensors"))
    state["layers.0.attn.q_proj.lora_a"] = torch.zeros(2, 4096)
    save_file(state, str(adapter / "adapter.safetensors"))

    def read(*args, **kwargs):
        raise AssertionError("the adapter's tensors were read")

    monkeypatch.setattr(lora, "load_file", read)
    with pytest.raises(CheckpointError, match="adapter.safetensors does not fit its base model"):
        load_folder(adapter)


@fifos
def test_a_fifo_adapter_is_refused_before_it_is_opened(adapter):
    (adapter / "adapter.safetensors").unlink()
    os.mkfifo(adapter / "adapter.safetensors")
    with never_opened(adapter / "adapter.safetensors"), \
            pytest.raises(CheckpointError, match=r"adapter.safetensors is a FIFO \(named pipe\), not a regular file"):
        load_folder(adapter)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_command_line_says_a_nan_adapter_in_one_line(adapter, tmp_path, capsys, precision):
    """fp32 used to answer an empty fill with confidence NaN and exit 0; int8 to fail in the quantizer."""
    folder = with_weight(adapter, tmp_path / "nan", "layers.0.attn.q_proj.lora_b", math.nan,
                         weights="adapter.safetensors")
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    err = one_line_error(capsys, ["fim", str(src), "--at", "1:1", "--model", str(folder), "--threads", "1",
                                  "--precision", precision, "--json"])
    assert "adapter.safetensors holds NaN or infinite values in layers.0.attn.q_proj.lora_b" in err


def test_model_check_reads_an_adapter_folder_as_the_loader_does(adapter, tmp_path, capsys):
    """The re-run probe's case: `model check` said an adapter folder had no config.json, so every fault
    of an adapter (a NaN weight, alpha, a FIFO) was reported as that."""
    assert main(["model", "check", str(adapter), "--no-reference"]) == 0
    assert "diffusion-lsp checkpoint" in capsys.readouterr().out
    folder = with_weight(adapter, tmp_path / "nan", "layers.0.attn.q_proj.lora_b", math.nan,
                         weights="adapter.safetensors")
    err = one_line_error(capsys, ["model", "check", str(folder), "--no-reference"])
    assert "adapter.safetensors holds NaN or infinite values in layers.0.attn.q_proj.lora_b" in err
    err = one_line_error(capsys, ["model", "check", str(tmp_path), "--no-reference"])
    assert "no checkpoint at" in err and "no adapter.json" in err


def test_the_command_line_says_a_bad_scale_in_one_line(llada2, tmp_path, capsys):
    folder = edited(llada2, tmp_path / "bad", setting("routed_scaling_factor", 1e308))
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    for argv in (["fim", str(src), "--at", "1:1", "--model", str(folder), "--threads", "1"],
                 ["model", "check", str(folder)]):
        assert "config.json routed_scaling_factor should be a number from 1e-06 to 1000" in one_line_error(capsys, argv)


@pytest.mark.parametrize("fault", ["nan", "gemma"])
def test_the_worker_reports_a_checkpoint_at_fault_as_its_one_line_message(hf_folder, gemma, tmp_path, fault):  # noqa: F811
    if fault == "nan":
        folder = with_weight(hf_folder, tmp_path / "w", "model.norm.weight", math.nan)
        said = "model.safetensors holds NaN or infinite values in model.norm.weight"
    else:
        folder = edited(gemma, tmp_path / "w", setting("vision_config.num_hidden_layers", 10**6))
        said = "config.json vision_config.num_hidden_layers should be an integer from 1 to 1024"
    launch = LaunchSettings(str(folder), device="cpu", threads=1)
    worker = Worker(lambda: load_model(launch), launch)
    worker.run()  # returns once the load has failed
    assert worker.state == "failed" and worker.error.startswith(f"checkpoint {folder}: {said}")
    assert "\n" not in worker.error


def test_the_folders_as_written_still_load(gemma, llada2, adapter):
    """The bounds refuse nothing published: the tiny folders in the published layouts load."""
    model, tok, meta, _ = load_native(gemma)
    assert meta["family"] == "diffusiongemma" and model.config.canvas_length == 16
    assert load_folder(llada2)[2]["family"] == "llada2"
    assert load_folder(adapter)[2]["adapter"]["alpha"] == 4


def test_large_finite_weights_are_finite_though_their_sum_overflows():
    from diffusion_lsp.model.families.checkpoint import finite

    big = torch.full((10,), 60000.0, dtype=torch.float16)  # the sum, 6e5, is past float16's range
    assert not torch.isfinite(big.sum()) and finite(big)
    big[7] = math.nan
    assert not finite(big)
    assert not finite(torch.tensor([1.0, math.inf, -math.inf, 2.0]))  # inf - inf is NaN: still caught
    assert finite(torch.tensor([1, 2, 3])) and finite(torch.zeros(0))
