"""The training loop: AdamW, linear warmup then cosine decay over the planned steps or minutes,
gradient clipping, periodic validation (RUN_DIR/log.jsonl) and checkpoints; resumable, and the
same code under torchrun (DDP; rank 0 evaluates, logs and saves; every rank draws its own data).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from diffusion_lsp.kernels.linear_ce import masked_cross_entropy
from diffusion_lsp.model.families.checkpoint import load_checkpoint
from diffusion_lsp.model.families.lora import add_adapters
from diffusion_lsp.model.families.pretrained import load_folder
from diffusion_lsp.model.network.config import ModelConfig, SpecialTokens
from diffusion_lsp.model.network.tokenizer import Tokenizer
from diffusion_lsp.model.network.transformer import DiffusionTransformer

from .config import TrainConfig
from .data import Batches, newline_table
from ..data.token_files import TokenFiles, has_split
from .edit_rows import EditSet, load_records
from .objective import Batch, select_masked
from .runtime import Runtime, setup
from .state import Progress, TrainError, frozen_dtype, has_run, load_run, save_run

VAL_SEED = 0  # validation batches are the same for every run, so losses compare across runs
SYNC_EVERY = 8  # under torchrun, rank 0's clock is broadcast every this many steps (a blocking sync)


class MaskedDiffusionLoss(nn.Module):
    """Model + objective in one forward (what DDP wraps): hidden states -> only the masked positions
    through the output head -> LLaDA eq. 3 loss."""

    def __init__(self, model: DiffusionTransformer):
        super().__init__()
        self.model = model

    def forward(self, inputs, targets, key_mask, masked, t, n_scored: int):
        B, S = inputs.shape
        positions = torch.arange(S, device=inputs.device).expand(B, S)
        h, _ = self.model.hidden(inputs, positions, key_mask)  # [B, S, D]
        batch = Batch(targets, inputs, key_mask, masked, t, n_scored)
        h, tgt, w = select_masked(h, batch, self.model.config.shift_logits)  # [M, D], [M], [M]
        return masked_cross_entropy(self.model, h, tgt, w, n_scored)  # fused with the head on CUDA


def _call(loss_fn, batch: Batch):
    return loss_fn(batch.inputs, batch.targets, batch.key_mask, batch.masked, batch.t, batch.n_scored)


def model_config(cfg: TrainConfig, tok: Tokenizer) -> ModelConfig:
    """The preset with overrides; vocab follows the tokenizer (rounded up to 64) and max_seq_len
    defaults to the training length, so the sampler never feeds positions the model never saw."""
    overrides = {"max_seq_len": cfg.seq_len, **cfg.model}
    try:
        mc = ModelConfig.preset(cfg.preset, vocab_size=-(-tok.vocab_size // 64) * 64, **overrides)
    except ValueError as e:  # unknown preset, indivisible dim/heads
        raise TrainError(str(e)) from None
    if cfg.seq_len > mc.max_seq_len:
        raise TrainError(f"seq_len {cfg.seq_len} is longer than the model's max_seq_len {mc.max_seq_len}")
    return mc


def lr_at(cfg: TrainConfig, step: int, elapsed_s: float) -> float:
    """Linear warmup, then cosine to lr * min_lr_ratio over the budget. `done` is the fraction of
    the budget used (whichever of steps and minutes is closer to running out); warmup ends after
    warmup_steps or warmup_frac of the budget, whichever comes first (short CPU runs)."""
    done = max(step / cfg.steps if cfg.steps else 0.0, elapsed_s / (60 * cfg.minutes) if cfg.minutes else 0.0)
    warm = max((step + 1) / max(cfg.warmup_steps, 1), done / cfg.warmup_frac if cfg.warmup_frac else 1.0)
    if warm < 1.0:
        return cfg.lr * warm
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * min(done, 1.0)))


def _finished(cfg: TrainConfig, step: int, elapsed_s: float) -> bool:
    return (cfg.steps is not None and step >= cfg.steps) or (cfg.minutes is not None and elapsed_s >= 60 * cfg.minutes)


def _optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    trained = [p for p in model.parameters() if p.requires_grad]  # with adapters: those alone
    decay = [p for p in trained if p.dim() >= 2]  # matrices and the embedding
    rest = [p for p in trained if p.dim() < 2]  # norm weights, biases
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=device.type == "cuda")


@torch.no_grad()
def evaluate(loss_fn: MaskedDiffusionLoss, batches: list[Batch], rt: Runtime, device) -> float:
    loss_fn.eval()
    total = 0.0
    for b in batches:
        with rt.autocast():
            total += float(_call(loss_fn, b.to(device)))
    loss_fn.train()
    return total / max(len(batches), 1)


def _log(out: Path, record: dict):
    with (out / "log.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


def _load_split(path: Path, tok: Tokenizer, rt: Runtime) -> TokenFiles | None:
    if not has_split(path.parent, path.stem):
        return None
    if rt.main:  # one process builds the cache, the others read it
        files = TokenFiles.load(path, tok)
    rt.barrier()
    return files if rt.main else TokenFiles.load(path, tok)


def load_split_records(cfg: TrainConfig, split: str) -> EditSet | None:
    """The next-edit records of one split of cfg.edits (None without edits or that file)."""
    if not cfg.edits:
        return None
    path = Path(cfg.edits) / f"{split}.jsonl"
    if not path.is_file():
        if split == "train" and cfg.edit_rate > 0:
            raise TrainError(f"no train.jsonl in edits folder {cfg.edits}; run `diffusion-lsp data edits`")
        return None
    try:
        return load_records(path)
    except ValueError as e:
        raise TrainError(str(e)) from None


def train(cfg: TrainConfig, progress_bar: bool = True) -> dict:
    """Train (or resume) the run in cfg.out; returns a summary of this invocation."""
    rt = setup(cfg.device, cfg.autocast, cfg.threads)
    try:
        return _train(cfg, rt, progress_bar)
    finally:
        rt.close()


def _prepare(cfg: TrainConfig, rt: Runtime, out: Path):
    corpus = Path(cfg.corpus)
    if not has_split(corpus, "train"):
        raise TrainError(f"no train.jsonl in corpus folder {corpus}")
    if has_run(out) or cfg.init:
        if has_run(out):  # resuming wins over init: the run already started from it
            model, tok, state, prog = load_run(out, rt.device)
        elif cfg.lora_rank:  # adapters on the frozen weights of any model we load (a Hugging Face one too)
            model, tok, _ = load_folder(cfg.init, rt.device, frozen_dtype(rt.device))
            add_adapters(model, cfg.lora_rank, cfg.lora_alpha)
            state, prog = None, Progress()
        else:  # a new run from trained weights: fresh optimizer and budget
            model, tok, _ = load_checkpoint(cfg.init, device=rt.device)
            state, prog = None, Progress()
        if not cfg.lora_rank:  # adapters keep their base model's shape, whatever the preset says
            want, have = model_config(cfg, tok).to_dict(), model.config.to_dict()
            diff = [f"{k}={have[k]} (asked {want[k]})" for k in have if k != "max_seq_len" and have[k] != want[k]]
            if diff:
                where = out if state else cfg.init
                raise TrainError(f"{where} holds a different model: {', '.join(diff)}; use another --out or --init")
            model.config.max_seq_len = want["max_seq_len"]  # a resumed run may train on longer rows
        elif cfg.seq_len > model.config.max_seq_len:
            raise TrainError(f"seq_len {cfg.seq_len} is longer than the model's max_seq_len {model.config.max_seq_len}")
        changed = sorted(k for k, v in cfg.to_dict().items() if state and state["config"].get(k) != v)
        if rt.main and changed:
            print(f"resuming {out} at step {prog.step}; changed settings: {', '.join(changed)}", file=sys.stderr)
    else:
        if not (corpus / "tokenizer.json").is_file():
            raise TrainError(f"no tokenizer.json in corpus folder {corpus}")
        tok = Tokenizer.from_file(corpus / "tokenizer.json", SpecialTokens())
        torch.manual_seed(cfg.seed)  # same initial weights on every rank
        model, state, prog = DiffusionTransformer(model_config(cfg, tok)), None, Progress()
    model.to(rt.device).train()
    opt = _optimizer(model, cfg, rt.device)
    if state is not None:
        opt.load_state_dict(state["optimizer"])
    return model, tok, opt, prog


def _val_batches(cfg: TrainConfig, tok: Tokenizer, rt: Runtime, newline) -> list[tuple[str, list[Batch]]]:
    """The fixed validation batches, by kind (plain, fim, edit); rank 0 evaluates, the others get none."""
    val_path = Path(cfg.corpus) / "val.jsonl"
    val_files = TokenFiles.load(val_path, tok) if rt.main and has_split(val_path.parent, "val") else None
    if val_files is None or not val_files.n_tokens or not cfg.eval_batches:
        return []
    plain_noise = dataclasses.replace(cfg.objective, block_noise=0.0)  # losses compare across runs
    val_edits = load_split_records(cfg, "val")
    val = Batches(val_files, tok, cfg.seq_len, cfg.batch_size, plain_noise, VAL_SEED, 0, newline, val_edits)
    out = [(kind, [val.get(i, fim_rate=rate) for i in range(cfg.eval_batches)])
           for kind, rate in (("plain", 0.0), ("fim", 1.0))]
    if val_edits:  # val's own edit_rate is 0: the rows above have no edit rows
        out.append(("edit", [val.get(i, edit_rate=1.0) for i in range(cfg.eval_batches)]))
    return out


def _bar(cfg: TrainConfig, prog: Progress):
    """A progress bar in steps, or in seconds for a run of --minutes."""
    total = cfg.steps if cfg.steps is not None else round(60 * cfg.minutes)
    timed = cfg.steps is None
    return tqdm(total=total, initial=min(int(prog.elapsed_s), total) if timed else prog.step, dynamic_ncols=True,
                unit="step", bar_format="{l_bar}{bar}| {n}/{total}s{postfix}" if timed else None)


def _optimizer_step(cfg: TrainConfig, rt: Runtime, model: nn.Module, opt, step_fn, batch: Batch, lr: float):
    """One step at learning rate `lr` -> its loss (a tensor: reading it syncs, so the caller rarely does)."""
    for g in opt.param_groups:
        g["lr"] = lr
    with rt.autocast():
        loss = _call(step_fn, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return loss


def _report(out: Path, bar, prog: Progress, window: dict, lr: float, run_eval=None) -> float:
    """The window's mean loss and token rate on the bar, and with `run_eval` an eval record in the
    log -> the mean loss."""
    loss = float(window["loss"]) / window["n"]
    rate = window["tokens"] / (time.perf_counter() - window["t"])
    if bar is not None:
        bar.set_postfix(step=prog.step, loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}", lr=f"{lr:.2e}", refresh=False)
    if run_eval is not None:
        _log(out, {"event": "eval", "step": prog.step, "elapsed_s": round(prog.elapsed_s, 1), "tokens": prog.tokens,
                   "lr": lr, "train_loss": loss, "tokens_per_s": round(rate), **run_eval()})
    return loss


def _distributed(loss_fn: nn.Module, rt: Runtime) -> nn.Module:
    """The loss as each step calls it: wrapped for data parallelism when there are several ranks."""
    if rt.world_size == 1:
        return loss_fn
    ids = [rt.device.index] if rt.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(loss_fn, device_ids=ids)


def measure_rate(cfg: TrainConfig, steps: int = 12, skip: int = 4) -> dict:
    """Training tokens/s of cfg's model on cfg's data and device, from `steps` optimizer steps of a
    fresh model after `skip` more (kernel set-up, allocator warm-up), data pipeline included;
    nothing is saved. -> {"tokens_per_s", "params", "step_s", "peak_mem_mb" (CUDA only)}."""
    rt = setup(cfg.device, cfg.autocast, cfg.threads)
    try:
        corpus = Path(cfg.corpus)
        tok = Tokenizer.from_file(corpus / "tokenizer.json", SpecialTokens())
        torch.manual_seed(cfg.seed)
        model = DiffusionTransformer(model_config(cfg, tok)).to(rt.device).train()
        opt = _optimizer(model, cfg, rt.device)
        data = Batches(TokenFiles.load(corpus / "train.jsonl", tok), tok, cfg.seq_len, cfg.batch_size, cfg.objective,
                       cfg.seed, 0, newline_table(tok))
        loss_fn = MaskedDiffusionLoss(model)
        cuda = rt.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(rt.device)
        for i in range(skip + steps):
            if i == skip:
                if cuda:
                    torch.cuda.synchronize(rt.device)
                t0 = time.perf_counter()
            loss = _optimizer_step(cfg, rt, model, opt, loss_fn, data.get(i).to(rt.device), cfg.lr)
        float(loss.detach())  # waits for the last step
        seconds = time.perf_counter() - t0
        out = {"tokens_per_s": steps * cfg.batch_size * cfg.seq_len / seconds, "step_s": seconds / steps,
               "params": sum(p.numel() for p in model.parameters())}
        if cuda:
            out["peak_mem_mb"] = torch.cuda.max_memory_allocated(rt.device) / 2**20
        return out
    finally:
        rt.close()


def _end(out: Path, rt: Runtime, prog: Progress, train_loss: float, rate: float, run_eval, save) -> dict:
    """The run's summary; with `run_eval` (the run took steps) a last evaluation and a save first."""
    summary = {"event": "end", "step": prog.step, "elapsed_s": round(prog.elapsed_s, 1), "tokens": prog.tokens,
               "train_loss": train_loss, "tokens_per_s": round(rate)}
    if rt.main:
        if run_eval is not None:
            summary |= run_eval()
            save()
        _log(out, summary)
    return summary


def _data(cfg: TrainConfig, tok: Tokenizer, rt: Runtime) -> tuple[Batches, list[tuple[str, list[Batch]]]]:
    """This rank's training batches (its own draws) and the fixed validation batches (_val_batches)."""
    newline = newline_table(tok)
    train_files = _load_split(Path(cfg.corpus) / "train.jsonl", tok, rt)
    edits = load_split_records(cfg, "train")
    train_data = Batches(train_files, tok, cfg.seq_len, cfg.batch_size, cfg.objective, cfg.seed, rt.rank, newline,
                         edits, cfg.edit_rate)
    return train_data, _val_batches(cfg, tok, rt, newline)


def _log_start(out: Path, cfg: TrainConfig, rt: Runtime, model: DiffusionTransformer, prog: Progress) -> None:
    """The run's folder, and the log's start record: the model, its sizes, the runtime and the settings."""
    out.mkdir(parents=True, exist_ok=True)
    _log(out, {"event": "start", "step": prog.step, "params": sum(p.numel() for p in model.parameters()),
               "trained_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
               "model": model.config.to_dict(), "world_size": rt.world_size, "device": str(rt.device),
               "amp": str(rt.amp_dtype), "threads": torch.get_num_threads(), "config": cfg.to_dict()})


def _evaluation(cfg: TrainConfig, rt: Runtime, loss_fn: MaskedDiffusionLoss, val_batches, prog: Progress):
    """The run's evaluation: the validation loss by kind -> its log fields; prog.val_loss the plain and
    fim losses mixed at the objective's fim rate."""
    def run_eval() -> dict:
        losses = {kind: evaluate(loss_fn, bs, rt, rt.device) for kind, bs in val_batches}
        if losses:
            rate = cfg.objective.fim_rate
            prog.val_loss = (1 - rate) * losses["plain"] + rate * losses["fim"]
        return {f"val_{k}": v for k, v in losses.items()} | ({"val_loss": prog.val_loss} if losses else {})
    return run_eval


def _train(cfg: TrainConfig, rt: Runtime, progress_bar: bool) -> dict:
    out = Path(cfg.out)
    model, tok, opt, prog = _prepare(cfg, rt, out)
    train_data, val_batches = _data(cfg, tok, rt)
    loss_fn = MaskedDiffusionLoss(model)
    step_fn = _distributed(loss_fn, rt)
    if rt.main:
        _log_start(out, cfg, rt, model, prog)
    run_eval = _evaluation(cfg, rt, loss_fn, val_batches, prog)

    def save():
        save_run(out, model, tok, opt, prog, cfg.to_dict(), rt.world_size)

    if rt.main and cfg.init and prog.step == 0 and val_batches:  # where the initial weights start from
        _log(out, {"event": "eval", "step": 0, "elapsed_s": 0.0, "tokens": 0, **run_eval()})
    tokens_per_step = cfg.batch_size * cfg.seq_len * rt.world_size
    start_step, start_elapsed, t0 = prog.step, prog.elapsed_s, time.perf_counter()
    last_save = prog.elapsed_s
    window = {"loss": 0.0, "n": 0, "t": t0, "tokens": 0}
    bar = _bar(cfg, prog) if progress_bar and rt.main else None
    summary_loss = float("nan")
    try:
        while True:
            if rt.world_size == 1 or prog.step % SYNC_EVERY == 0:  # every rank: same lr, same last step
                prog.elapsed_s = rt.broadcast_float(start_elapsed + time.perf_counter() - t0)
            if _finished(cfg, prog.step, prog.elapsed_s):
                break
            lr = lr_at(cfg, prog.step, prog.elapsed_s)
            loss = _optimizer_step(cfg, rt, model, opt, step_fn, train_data.get(prog.step).to(rt.device), lr)
            prog.step += 1
            prog.tokens += tokens_per_step
            window["loss"] += loss.detach()
            window["n"] += 1
            window["tokens"] += tokens_per_step
            is_eval = rt.main and cfg.eval_every and prog.step % cfg.eval_every == 0
            if rt.main and (is_eval or time.perf_counter() - window["t"] >= 2.0):  # item() syncs: not every step
                summary_loss = _report(out, bar, prog, window, lr, run_eval if is_eval else None)
                window = {"loss": 0.0, "n": 0, "t": time.perf_counter(), "tokens": 0}
            if bar is not None:
                bar.update(1 if cfg.steps is not None else min(int(prog.elapsed_s), bar.total) - bar.n)
            if rt.main and prog.elapsed_s - last_save >= 60 * cfg.save_every_minutes:
                save()
                last_save = prog.elapsed_s
    except KeyboardInterrupt:
        if rt.world_size == 1 and prog.step > start_step:
            save()
        raise
    finally:
        if bar is not None:
            bar.close()
    run_s = time.perf_counter() - t0
    prog.elapsed_s = start_elapsed + run_s  # only rank 0 saves it
    train_loss = summary_loss if window["n"] == 0 else float(window["loss"]) / window["n"]
    rate = (prog.step - start_step) * tokens_per_step / max(run_s, 1e-9)
    return _end(out, rt, prog, train_loss, rate, run_eval if prog.step > start_step else None, save)
