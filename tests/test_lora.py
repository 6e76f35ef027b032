"""Low-rank adapters (model/families/lora.py): a fresh adapter changes nothing, merged and unmerged agree,
an adapter folder loads as its base with the update merged and refuses a base that changed; and
`adapt` trains adapters on a Hugging Face checkpoint (a tiny random qwen2 folder) instead of its
whole weights, which the server's quick check and every loader take."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from test_adapt import make_repo, needs_git
from test_checkpoint_limits import hf_folder  # noqa: F401 (a fixture)
from diffusion_lsp.cli import main
from diffusion_lsp.model.families import lora
from diffusion_lsp.model.families.checkpoint import CheckpointError
from diffusion_lsp.model.families.claims import GENERAL, read_claims
from diffusion_lsp.model.families.pretrained import load_folder
from diffusion_lsp.model.families.quick_check import problem
from diffusion_lsp.context.repo import ADAPTED_DIR


def logits(model, ids):
    with torch.no_grad():
        return model(ids)[0]


IDS = torch.tensor([[5, 17, 42, 3, 99, 7, 250, 11]])


def test_a_fresh_adapter_is_the_base_and_merging_keeps_what_training_changed(tiny_checkpoint):
    base, _, _ = load_folder(tiny_checkpoint)
    want = logits(base, IDS)
    model, _, _ = load_folder(tiny_checkpoint)
    lora.add_adapters(model, rank=4)
    assert torch.equal(logits(model, IDS), want)  # B starts at zero
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all(".lora_" in n for n in trained)
    assert len(trained) == 2 * 7 * model.config.n_layers  # A and B of 7 projections per layer
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if name.endswith("lora_b"):
            p.data.normal_(0, 0.05)
    unmerged = logits(model, IDS)
    assert (unmerged - want).abs().max() > 1e-3
    assert torch.allclose(logits(lora.merge(model), IDS), unmerged, atol=1e-5)


def test_an_adapter_folder_loads_as_its_base_with_the_update_merged(tiny_checkpoint, tmp_path):
    base = shutil.copytree(tiny_checkpoint, tmp_path / "base")
    model, _, _ = load_folder(base)
    lora.add_adapters(model, rank=2, alpha=8)
    for name, p in model.named_parameters():
        if name.endswith("lora_b"):
            p.data.fill_(0.01)
    want = logits(model, IDS)
    folder = lora.save_adapter(tmp_path / "adapter", model, base, extra={"train": {"step": 3}})
    assert sorted(f.name for f in folder.iterdir()) == ["adapter.json", "adapter.safetensors"]
    assert (folder / "adapter.safetensors").stat().st_size < (base / "model.safetensors").stat().st_size / 4
    loaded, tok, meta = load_folder(folder)
    assert torch.allclose(logits(loaded, IDS), want, atol=1e-5)
    assert meta["adapter"]["rank"] == 2 and meta["adapter"]["alpha"] == 8 and meta["adapter"]["train"]["step"] == 3
    assert problem(folder) is None
    assert read_claims(folder) == read_claims(base)  # adapters claim what their base does

    config = json.loads((base / "config.json").read_text())
    config["train"] = {"step": 99}  # the base changed after the adapter was trained
    (base / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="changed since it was adapted"):
        load_folder(folder)
    (base / "config.json").write_text("[1, 2")  # cut short: the server's check says so, it does not raise
    assert "cannot be read" in problem(folder)
    shutil.rmtree(base)
    with pytest.raises(CheckpointError, match="is not there"):
        load_folder(folder)
    assert "is not there" in problem(folder)


@needs_git
def test_adapt_trains_adapters_on_a_hugging_face_checkpoint(hf_folder, tmp_path, capsys):  # noqa: F811
    root = tmp_path / "r"
    make_repo(root, files=12)
    before = (hf_folder / "model.safetensors").read_bytes()
    code = main(["adapt", str(root), "--model", str(hf_folder), "--steps", "20", "--lr", "1e-2",
                 "--lines", "4", "--no-progress", "--json", "--precision", "fp32"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    out = root / ADAPTED_DIR
    assert {"adapter.json", "adapter.safetensors", "adapt.json"} <= {f.name for f in out.iterdir()}
    assert not (out / "model.safetensors").exists() and (hf_folder / "model.safetensors").read_bytes() == before
    meta = json.loads((out / "adapter.json").read_text())
    assert meta["rank"] == 16 and meta["adapted"]["lora_rank"] == 16 and meta["train"]["step"] == 20
    assert problem(out) is None and read_claims(out) == GENERAL
    assert report["adapted"]["lora_rank"] == 16
    base, adapted = report["loss"]["base"], report["loss"]["adapted"]
    assert adapted["loss@0.5"] < base["loss@0.5"]  # the adapters learnt the repository's code
    # a Hugging Face model is never trained whole
    assert main(["adapt", str(root), "--model", str(hf_folder), "--steps", "2", "--lora-rank", "0", "--no-eval",
                 "--json"]) == 2
    assert "low-rank adapters (--lora-rank 1 or more" in capsys.readouterr().err
