"""Training: objective rows, masking and weights on toy batches; a tiny model learns; resume."""

from __future__ import annotations

import argparse
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from diffusion_lsp.kernels.linear_ce import weighted_ce
from diffusion_lsp.model.families.checkpoint import load_checkpoint
from diffusion_lsp.model.network.tokenizer import train_bpe
from diffusion_lsp.train import command
from diffusion_lsp.train.config import TrainConfig
from diffusion_lsp.train.data import Batches, newline_table
from diffusion_lsp.data.token_files import TokenFiles
from diffusion_lsp.train.loop import train
from diffusion_lsp.train.objective import (CANVAS_SIZES, Batch, ObjectiveConfig, fim_row, make_batch,
                                           masked_weights, noise, plain_row, select_masked)

TOY = SimpleNamespace(bos_id=0, mask_id=1, filler_id=2)  # ids only: the row functions need no vocabulary


def _source(i: int) -> str:
    name = ["alpha", "beta", "gamma", "delta"][i % 4]
    return (f"def {name}_{i}(x, y):\n    total = x + y * {i}\n    if total > {i % 7}:\n"
            f"        return total - {i}\n    return {name}_{i}(y, x)\n\n\nclass Box{i}:\n"
            f"    def __init__(self, value):\n        self.value = value\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    texts = [_source(i) for i in range(120)]
    for split, part in (("train", texts[:100]), ("val", texts[100:])):
        with (root / f"{split}.jsonl").open("w") as f:
            for j, t in enumerate(part):
                f.write(json.dumps({"package": "toy", "version": "0", "license": "MIT", "path": f"m{j}.py",
                                    "text": t}) + "\n")
    train_bpe(texts, vocab_size=400).hf.save(str(root / "tokenizer.json"))
    return root


def _cfg(corpus, out, **kw) -> TrainConfig:
    base = dict(corpus=str(corpus), out=str(out), preset="tiny", seq_len=64, batch_size=8, lr=3e-3,
                warmup_steps=5, eval_every=0, eval_batches=2, threads=1, device="cpu")
    return TrainConfig(**{**base, **kw})


def test_plain_row_masks_only_real_non_bos_tokens():
    row = plain_row(np.arange(10, 20), 16, TOY)
    assert row.ids.tolist() == [0, *range(10, 20)] + [2] * 5  # bos, tokens, filler padding
    assert row.valid.tolist() == [True] * 11 + [False] * 5
    assert row.maskable.tolist() == [False] + [True] * 10 + [False] * 5
    long = plain_row(np.arange(10, 40), 16, TOY)  # cut to seq_len
    assert long.ids.tolist() == [0, *range(10, 25)] and long.valid.all()


def test_noise_follows_t_and_weights_are_one_over_t():
    rng = np.random.default_rng(0)
    ids = np.tile(np.arange(3, 403), (3, 1))
    maskable = np.ones_like(ids, dtype=bool)
    maskable[:, :1] = False  # bos
    maskable[:, -50:] = False  # padding
    t = np.array([1.0, 0.5, 0.25])
    noisy, masked = noise(ids, maskable, t, mask_id=1, rng=rng)
    assert not masked[~maskable].any() and (noisy[~masked] == ids[~masked]).all() and (noisy[masked] == 1).all()
    assert masked[0, 1:350].all()  # t = 1: everything maskable is masked
    assert abs(masked[1].mean() * 400 / 349 - 0.5) < 0.1 and abs(masked[2].mean() * 400 / 349 - 0.25) < 0.1
    w = masked_weights(torch.from_numpy(masked), torch.tensor(t, dtype=torch.float32))
    counts = masked.sum(1)
    assert torch.equal(w, torch.tensor([1.0] * counts[0] + [2.0] * counts[1] + [4.0] * counts[2]))


def test_loss_is_weighted_mean_and_ignores_padding():
    B, S, D, V = 2, 6, 4, 8
    targets = torch.randint(3, V, (B, S))
    masked = torch.tensor([[0, 1, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0]], dtype=torch.bool)
    t = torch.tensor([0.5, 0.25])
    hidden = torch.zeros(B, S, D)
    hidden[:, 4:] = float("nan")  # padding: must never reach the loss
    batch = Batch(targets, targets, torch.ones(B, S, dtype=torch.bool), masked, t, n_scored=7)
    h, tgt, w = select_masked(hidden, batch, shift=False)
    logits = h @ torch.zeros(D, V)  # uniform prediction: CE = log V at each masked position
    loss = weighted_ce(logits, tgt, w, batch.n_scored)
    assert torch.isfinite(loss)
    assert math.isclose(loss.item(), math.log(V) * (2 / 0.5 + 1 / 0.25) / 7, rel_tol=1e-5)


@pytest.mark.parametrize("line_rate", [0.0, 1.0])
def test_fim_rows_mask_only_the_canvas_with_fillers_after_the_middle(corpus, line_rate):
    tok = train_bpe([_source(i) for i in range(20)], vocab_size=300)
    newline = newline_table(tok)
    cfg = ObjectiveConfig(line_rate=line_rate, max_span=16, text_lines=0.0)
    rng = np.random.default_rng(1)
    files = [np.array(tok.encode(_source(i))) for i in range(20)]
    aligned = with_prefix = 0
    for k in range(200):
        crop = files[k % 20][: 47 + k % 30]
        row = fim_row(crop, 48, tok, newline, cfg, rng)
        canvas = np.flatnonzero(row.maskable)
        assert len(canvas) and (np.diff(canvas) == 1).all()  # one contiguous canvas
        a, b = canvas[0], canvas[-1] + 1
        assert row.ids[0] == tok.bos_id and not row.maskable[0] and row.valid[:b].all()
        fill = row.ids[a:b] == tok.filler_id
        m = int((~fill).sum())
        assert 1 <= m <= 16 and not fill[:m].any() and fill[m:].all()  # real middle, then fillers only
        # the canvas is either m + U(0, max(4, m)) or one of the server's canvas sizes (cut to the row)
        assert len(fill) - m <= max(4, m) or len(fill) in CANVAS_SIZES or b == 48
        # prefix + middle + suffix (fillers and padding dropped) is a contiguous piece of the crop
        real = row.ids[1:][row.valid[1:] & (row.ids[1:] != tok.filler_id)]
        assert any(np.array_equal(crop[s:s + len(real)], real) for s in range(len(crop) - len(real) + 1))
        if a > 1:  # the prefix survived the cut: the span must start a line
            with_prefix += 1
            aligned += bool(newline[row.ids[a - 1]] and newline[row.ids[a + m - 1]])
    if line_rate == 1.0:
        assert aligned > 0.75 * with_prefix > 75  # whole lines whenever the crop has a short enough one


def test_text_line_middles_are_whole_lines_tokenized_on_their_own():
    tok = train_bpe([_source(i) for i in range(20)], vocab_size=300)
    cfg = ObjectiveConfig(line_rate=1.0, text_lines=1.0, max_span=16, canvas_rate=0.0)
    rng = np.random.default_rng(2)
    indented = 0
    for k in range(100):
        crop = np.array(tok.encode(_source(k % 20)))[:60]
        row = fim_row(crop, 64, tok, newline_table(tok), cfg, rng)
        canvas = np.flatnonzero(row.maskable)
        a, b = canvas[0], canvas[-1] + 1
        middle_ids = [int(t) for t in row.ids[a:b] if t != tok.filler_id]
        prefix, middle = tok.decode(row.ids[1:a].tolist()), tok.decode(middle_ids)
        suffix = tok.decode(row.ids[b:][row.valid[b:]].tolist())
        assert prefix + middle + suffix in tok.decode(crop.tolist())  # same text, cut elsewhere
        assert prefix.endswith("\n") and middle.endswith("\n")  # cut at line starts, in text
        assert tok.encode(middle) == middle_ids and tok.encode(prefix) == row.ids[1:a].tolist()
        indented += middle.startswith(" ")  # the indentation is the middle's, not glued to the prefix
    assert indented > 20


def test_batches_are_deterministic_and_scored_positions_counted(corpus):
    tok = train_bpe([_source(i) for i in range(20)], vocab_size=300)
    files = TokenFiles.load(corpus / "train.jsonl", tok)
    assert (corpus / "train.ids.npy").is_file()
    assert TokenFiles.load(corpus / "train.jsonl", tok).n_tokens == files.n_tokens  # from the cache
    data = Batches(files, tok, 64, 8, ObjectiveConfig(), seed=3)
    a, b, c = data.get(7), data.get(7), data.get(8)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.t, b.t) and not torch.equal(a.inputs, c.inputs)
    assert not (a.masked & ~a.key_mask).any() and (a.inputs[a.masked] == tok.mask_id).all()
    assert not a.masked[:, 0].any() and a.masked.sum() <= a.n_scored
    rows = make_batch([np.arange(5, 20)] * 4, 32, tok, newline_table(tok), ObjectiveConfig(fim_rate=0.0),
                      np.random.default_rng(0))
    assert rows.n_scored == 4 * 15 and not rows.key_mask[:, 16:].any()


def test_training_reduces_validation_loss(corpus, tmp_path):
    summary = train(_cfg(corpus, tmp_path / "run", steps=60, eval_every=1, eval_batches=1), progress_bar=False)
    evals = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    first = next(e for e in evals if e["event"] == "eval")
    assert first["step"] == 1 and summary["step"] == 60 and summary["val_loss"] < 0.75 * first["val_loss"]


def test_resume_continues_steps_and_matches_an_uninterrupted_run(corpus, tmp_path, monkeypatch):
    get = Batches.get

    def interrupt_at_6(self, step, fim_rate=None):
        if step == 6:
            raise KeyboardInterrupt  # Ctrl-C: the loop saves, then stops
        return get(self, step, fim_rate)

    monkeypatch.setattr(Batches, "get", interrupt_at_6)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(corpus, tmp_path / "a", steps=10), progress_bar=False)
    monkeypatch.setattr(Batches, "get", get)
    state = torch.load(tmp_path / "a" / "train_state.pt", weights_only=True)
    assert state["step"] == 6 and state["optimizer"]["state"]
    summary = train(_cfg(corpus, tmp_path / "a", steps=10), progress_bar=False)
    assert summary["step"] == 10 and summary["tokens"] == 10 * 8 * 64
    train(_cfg(corpus, tmp_path / "b", steps=10), progress_bar=False)
    resumed, tok, config = load_checkpoint(tmp_path / "a" / "checkpoint")
    straight, _, _ = load_checkpoint(tmp_path / "b" / "checkpoint")
    assert config["train"]["step"] == 10 and tok.vocab_size <= resumed.config.vocab_size
    for (name, p), q in zip(resumed.state_dict().items(), straight.state_dict().values()):
        assert torch.allclose(p, q, atol=1e-5), name


def test_command_time_budget_and_errors(corpus, tmp_path, capsys, monkeypatch):
    from diffusion_lsp.train import loop

    clock = [0.0]  # the loop's clock: 0.25 s per training batch, whatever the machine's speed
    get = Batches.get

    def timed_get(self, step, fim_rate=None):
        if fim_rate is None:  # a training batch (validation batches name their rate)
            clock[0] += 0.25
        return get(self, step, fim_rate)

    monkeypatch.setattr(Batches, "get", timed_get)
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    argv = ["train", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--preset", "tiny", "--seq-len", "32",
            "--batch-size", "4", "--minutes", "0.01", "--steps", "50", "--threads", "1", "--device", "cpu",
            "--no-progress"]
    args = parser.parse_args(argv)
    assert args.run(args) == 0
    assert "step=" in capsys.readouterr().out and (tmp_path / "run" / "checkpoint" / "model.safetensors").is_file()
    state = torch.load(tmp_path / "run" / "train_state.pt", weights_only=True)
    assert state["step"] == 3 and state["elapsed_s"] == 0.75  # 0.6 s budget: it stops after the step that spent it
    from diffusion_lsp.errors import UserError
    for bad in (["--corpus", str(tmp_path / "missing")], ["--preset", "huge", "--out", str(tmp_path / "new")],
                ["--dim", "96", "--out", str(tmp_path / "run")]):
        args = parser.parse_args(argv + bad)
        with pytest.raises(UserError):
            args.run(args)


def test_lr_warms_up_then_decays_over_the_budget():
    from diffusion_lsp.train.loop import lr_at
    cfg = _cfg("c", "o", steps=1000, warmup_steps=20, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(cfg, 0, 0.0) == pytest.approx(0.05) and lr_at(cfg, 9, 0.0) == pytest.approx(0.5)
    assert lr_at(cfg, 100, 0.0) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.1)))
    assert lr_at(cfg, 1000, 0.0) == pytest.approx(0.1)
    timed = _cfg("c", "o", minutes=10, warmup_steps=10_000, lr=1.0)  # warmup capped at 5% of the budget
    assert lr_at(timed, 5, 15.0) == pytest.approx(0.5) and lr_at(timed, 5, 300.0) == pytest.approx(0.55)
