"""The one-shot GPU training recipe, on the CPU: the token pack (data/pack.py) round-trips and refuses
what is not one; the recipe's choice of shape; and `train-recipe --dry-run` end to end, its
checkpoint split into parts that join into one that loads and fills."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from conftest import corpus_texts
from diffusion_lsp.data.pack import pack, unpack
from diffusion_lsp.data.token_files import PackError, TokenFiles, has_split
from diffusion_lsp.train.recipe import TOKENS_PER_PARAM, choose


def _corpus(folder, tokenizer, n_train=40):
    """Files of stdlib lines drawn at random: alike in kind, none repeating another (as a real corpus)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [line for t in corpus_texts() for line in t.splitlines(keepends=True)]
    rng = np.random.default_rng(0)
    with (folder / "train.jsonl").open("w") as f:
        for _ in range(n_train):
            f.write(json.dumps({"text": "".join(rng.choice(lines, 40))}) + "\n")
    (folder / "val.jsonl").write_text(json.dumps({"text": "".join(rng.choice(lines, 200))}) + "\n")
    tokenizer.hf.save(str(folder / "tokenizer.json"))
    return folder


def test_a_pack_round_trips_into_a_corpus_that_training_reads(tokenizer, tmp_path):
    corpus = _corpus(tmp_path / "corpus", tokenizer)
    meta = pack(corpus, tokenizer, tmp_path / "c.tar.xz", max_mb=100)
    got = unpack(tmp_path / "c.tar.xz", tmp_path / "unpacked")
    assert got == meta and meta["train_files"] == 40 and meta["train_tokens"] == meta["train_tokens_in_corpus"]
    assert not (tmp_path / "unpacked" / "train.jsonl").exists() and has_split(tmp_path / "unpacked", "train")
    want = TokenFiles.load(corpus / "train.jsonl", tokenizer)
    have = TokenFiles.load(tmp_path / "unpacked" / "train.jsonl", tokenizer)
    assert np.array_equal(np.asarray(have.ids), np.asarray(want.ids)) and np.array_equal(have.offsets, want.offsets)
    assert TokenFiles.load(tmp_path / "unpacked" / "val.jsonl", tokenizer).n_tokens == meta["val_tokens"] > 0


def test_a_pack_keeps_whole_train_files_under_its_budget(tokenizer, tmp_path):
    corpus = _corpus(tmp_path / "corpus", tokenizer, n_train=400)
    whole, out = tmp_path / "whole.tar.xz", tmp_path / "small.tar.xz"
    pack(corpus, tokenizer, whole, max_mb=100)
    budget = whole.stat().st_size * 0.8 / 2**20
    meta = pack(corpus, tokenizer, out, max_mb=budget)
    assert 0 < meta["train_files"] < 400 and meta["train_tokens"] < meta["train_tokens_in_corpus"]
    # the compressed size is estimated from the ratio of the ids' first 4 M: a part may compress a little
    # worse than that
    assert out.stat().st_size <= budget * 2**20 * 1.1
    unpack(out, tmp_path / "u")
    unpacked = TokenFiles.load(tmp_path / "u" / "train.jsonl", tokenizer)
    full = TokenFiles.load(corpus / "train.jsonl", tokenizer)
    assert np.array_equal(unpacked.offsets, full.offsets[: meta["train_files"] + 1])  # the first files, whole


def test_a_damaged_foreign_or_mismatched_pack_is_refused(tokenizer, tmp_path):
    corpus = _corpus(tmp_path / "corpus", tokenizer)
    good = tmp_path / "c.tar.xz"
    pack(corpus, tokenizer, good, max_mb=100)
    broken = tmp_path / "broken.tar.xz"
    broken.write_bytes(good.read_bytes()[:200])
    with pytest.raises(PackError, match="not a readable token pack"):
        unpack(broken, tmp_path / "x")
    evil = tmp_path / "evil.tar.xz"  # a member outside the folder, and no pack.json
    with tarfile.open(evil, "w:xz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(PackError, match="pack.json"):
        unpack(evil, tmp_path / "y")
    assert not (tmp_path / "escaped.txt").exists()
    unpack(good, tmp_path / "z")
    from diffusion_lsp.model.network.tokenizer import train_bpe

    other = train_bpe(corpus_texts()[:1], vocab_size=300)
    with pytest.raises(PackError, match="another tokenizer"):
        TokenFiles.load(tmp_path / "z" / "train.jsonl", other)


def test_the_recipe_takes_the_largest_shape_that_fits_and_is_fed():
    rates = [{"params": 5e6, "tokens_per_s": 4e6}, {"params": 20e6, "tokens_per_s": 2e6},
             {"params": 40e6, "tokens_per_s": 1e6}]
    assert choose(rates, 400, max_mb=60) == 1  # 40 M: 80 MB in bf16, over the 60 allowed
    assert choose(rates, 400, max_mb=100) == 1  # 40 M would see 400 M tokens < 20 x 40 M
    assert choose(rates, 800, max_mb=100) == 2
    assert choose(rates, 10, max_mb=100) == 0 and TOKENS_PER_PARAM == 20  # none is fed: the smallest


@pytest.mark.slow  # trains two tiny candidates and the chosen one on the CPU: about a minute
def test_the_recipe_dry_run_writes_a_checkpoint_that_joins_loads_and_fills(tokenizer, tmp_path):
    corpus = _corpus(tmp_path / "corpus", tokenizer, n_train=200)
    pack(corpus, tokenizer, tmp_path / "c.tar.xz", max_mb=100)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "train-recipe", "--pack", str(tmp_path / "c.tar.xz"),
                           "--out", str(out), "--minutes", "0.8", "--dry-run", "--split-mb", "0.02"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((out / "recipe.json").read_text())
    assert len(record["candidates"]) == 2 and all(c["tokens_per_s"] > 0 for c in record["candidates"])
    assert record["summary"]["step"] > 0 and len(record["parts"]) > 1
    model = out / "model"
    with (model / "model.safetensors").open("wb") as whole:
        for part in record["parts"]:
            whole.write((model / part).read_bytes())
            (model / part).unlink()
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.model.decoding.canvas import CanvasRequest
    from diffusion_lsp.protocol.settings import LaunchSettings

    engine = load_engine(LaunchSettings(path=str(model), precision="fp32"))
    chosen = record["candidates"][record["chosen"]]
    assert engine.model.config.dim == chosen["dim"] and engine.model.config.n_layers == chosen["layers"]
    assert json.loads((model / "config.json").read_text())["dtype"] == "bfloat16"
    (result,) = engine.fill([CanvasRequest("def f(x):\n    return ", "\n", 6)])
    assert result.forwards >= 1 and len(result.token_ids) >= 1
