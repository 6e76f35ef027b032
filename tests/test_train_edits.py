"""Next-edit rows (train/edit_rows.py), block noise, and training with edits from a checkpoint."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from diffusion_lsp.engine import DEFAULT_MODEL
from diffusion_lsp.model.network.config import SpecialTokens
from diffusion_lsp.model.network.tokenizer import Tokenizer
from diffusion_lsp.formats.edit_prompt import EDITED, HISTORY, ORIGINAL
from diffusion_lsp.train.config import TrainConfig
from diffusion_lsp.train.data import Batches, newline_table
from diffusion_lsp.data.token_files import TokenFiles
from diffusion_lsp.train.edit_rows import edit_row, load_records
from diffusion_lsp.train.loop import train
from diffusion_lsp.train.objective import ObjectiveConfig, block_noise, make_batch
from diffusion_lsp.train.state import TrainError

RECORD = {
    "kind": "rename", "source": "t", "path": "pkg/m.py",
    "diffs": ["--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -5,1 +5,1 @@\n-    handle = open(path)\n+    fh = open(path)\n"],
    "before": "import os\n" * 80 + "\ndef load(path):\n",
    "old_region": "    fh = open(path)\n    data = handle.read()\n    return data\n",
    "new_region": "    fh = open(path)\n    data = fh.read()\n    return data\n",
    "after": "\n\ndef run(a):\n    return load(a)\n" * 30,
}


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_file(DEFAULT_MODEL / "tokenizer.json", SpecialTokens())


@pytest.mark.parametrize("copy", [True, False])
def test_edit_row_masks_only_the_canvas_after_the_history(tok, copy):
    row = edit_row(RECORD, 256, tok, np.random.default_rng(0), copy=copy)
    assert row.valid.sum() >= 256 - 8 and row.blockable  # long file context: the row is (nearly) filled
    canvas = np.flatnonzero(row.maskable)
    assert len(canvas) and (np.diff(canvas) == 1).all()  # one contiguous canvas
    ids = row.ids.tolist()
    prefix = tok.decode(ids[1:canvas[0]])
    assert ids[0] == tok.bos_id and prefix.startswith(HISTORY + RECORD["diffs"][0])
    assert prefix.endswith("def load(path):\n" + (ORIGINAL + RECORD["old_region"] + EDITED if copy else ""))
    middle = [i for i in row.ids[canvas].tolist() if i != tok.filler_id]
    assert tok.decode(middle) == RECORD["new_region"]
    assert row.ids[canvas[len(middle):]].tolist() == [tok.filler_id] * (len(canvas) - len(middle))
    assert len(canvas) >= len(tok.encode(RECORD["old_region"])) + 4  # slack: the fill may grow
    assert tok.decode(ids[canvas[-1] + 1:]).startswith("\n\ndef run(a):")


def test_edit_row_that_cannot_fit_is_refused(tok):
    assert edit_row(RECORD, 48, tok, np.random.default_rng(0), copy=True) is None


def test_block_noise_decodes_left_to_right():
    maskable = np.zeros(40, dtype=bool)
    maskable[5:30] = True  # a 25-position canvas: blocks of 8, 8, 8, 1
    opened = set()
    rng = np.random.default_rng(0)
    for _ in range(200):
        masked, level, scored = block_noise(maskable, 0.5, 8, rng)
        assert not (masked & ~maskable).any() and not (scored & ~maskable).any()
        first = int(np.flatnonzero(scored)[0])
        b = (first - 5) // 8
        opened.add(b)
        assert not masked[5:first].any() and not scored[5:first].any()  # earlier blocks: clean, not scored
        assert masked[min(first + 8, 30):30].all() and (level[min(first + 8, 30):30] == 1.0).all()  # later: masked
        assert (level[first:min(first + 8, 30)] == 0.5).all() and scored[first:30].all()
    assert opened == {0, 1, 2, 3}


def test_block_noise_weights_the_loss_per_position(tok):
    rng = np.random.default_rng(0)
    crops = [np.array(tok.encode("def f(x):\n    return x + 1\n" * 8))] * 6
    cfg = ObjectiveConfig(fim_rate=1.0, block_noise=1.0, line_rate=0.0, canvas_rate=1.0)
    batch = make_batch(crops, 128, tok, newline_table(tok), cfg, rng)
    assert batch.t.shape == batch.masked.shape
    assert (batch.t[batch.masked] > 0).all() and (batch.t[batch.masked] == 1.0).any()
    plain = make_batch(crops, 128, tok, newline_table(tok), dataclasses.replace(cfg, block_noise=0.0),
                       np.random.default_rng(0))
    assert torch.equal(batch.targets, plain.targets) and plain.t.dim() == 1  # the same rows, noised otherwise
    assert batch.n_scored < plain.n_scored  # clean leading blocks are not scored


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("edits")
    (root / "edits").mkdir()
    for split in ("train", "val"):
        with (root / f"{split}.jsonl").open("w") as f:
            for i in range(20):
                text = f"def f{i}(x):\n    y = x + {i}\n    return y * {i}\n\n\n" * 10
                f.write(json.dumps({"package": "toy", "version": "0", "license": "MIT", "path": f"m{i}.py",
                                    "text": text}) + "\n")
        with (root / "edits" / f"{split}.jsonl").open("w") as f:
            for i in range(10):
                f.write(json.dumps(dict(RECORD, path=f"m{i}.py")) + "\n")
    (root / "tokenizer.json").write_text((DEFAULT_MODEL / "tokenizer.json").read_text())
    return root


def test_batches_mix_edit_rows_deterministically(small_corpus, tok):
    files = TokenFiles.load(small_corpus / "train.jsonl", tok)
    records = load_records(small_corpus / "edits" / "train.jsonl")
    data = Batches(files, tok, 128, 16, ObjectiveConfig(), seed=1, edits=records, edit_rate=0.5)
    a, b = data.get(3), data.get(3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    history = tok.encode(HISTORY)[0]
    n_edit = int((a.targets[:, 1] == history).sum())
    assert 2 <= n_edit <= 14 and len(a.targets) == 16
    only = data.get(3, edit_rate=1.0)
    assert (only.targets[:, 1] == history).all()
    none = Batches(files, tok, 128, 16, ObjectiveConfig(), seed=1).get(3)
    assert torch.equal(none.inputs, data.get(3, edit_rate=0.0).inputs)  # no edits: batches as before


def test_training_from_a_checkpoint_with_edits_reports_val_edit(small_corpus, tmp_path):
    cfg = TrainConfig(corpus=str(small_corpus), out=str(tmp_path / "run"), init=str(DEFAULT_MODEL),
                      edits=str(small_corpus / "edits"), edit_rate=0.5, preset="small",
                      model=dict(dim=192, n_layers=4, n_heads=6, n_kv_heads=2, max_seq_len=512), seq_len=128,
                      batch_size=4, lr=1e-4, steps=2, eval_every=0, eval_batches=1, threads=1, device="cpu",
                      autocast="off", objective=ObjectiveConfig(block_noise=0.5))
    summary = train(cfg, progress_bar=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    start = next(e for e in log if e["event"] == "eval")
    assert start["step"] == 0 and {"val_plain", "val_fim", "val_edit"} <= start.keys()
    assert summary["step"] == 2 and "val_edit" in summary
    with pytest.raises(ValueError, match="edit_rate"):
        TrainConfig(corpus="c", out="o", steps=1, edit_rate=0.5)
    other = dataclasses.replace(cfg, out=str(tmp_path / "other"), model=dict(cfg.model, n_layers=3))
    with pytest.raises(TrainError, match="holds a different model"):
        train(other, progress_bar=False)


def test_records_are_drawn_square_root_balanced_by_kind(tmp_path):
    path = tmp_path / "train.jsonl"
    with path.open("w") as f:
        for kind, n in (("rename", 900), ("mined", 100)):
            for i in range(n):
                f.write(json.dumps(dict(RECORD, kind=kind, path=f"{kind}{i}.py")) + "\n")
    records = load_records(path)
    rng = np.random.default_rng(0)
    mined = sum(records.pick(rng)["kind"] == "mined" for _ in range(4000)) / 4000
    assert abs(mined - 0.25) < 0.03  # sqrt(100) / (sqrt(900) + sqrt(100)), not 0.1
    path.write_text("{}\n")
    with pytest.raises(ValueError, match="not an edit record"):
        load_records(path)
