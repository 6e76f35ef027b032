"""Adapting a model to one repository (`diffusion-lsp adapt`, `eval repo --adapt-minutes`): the
repository's files that are not held out (context/repo.py) become a corpus, the edits its git history
made to them become next-edit rows (data/git_history.py, data/edits.py), and the model is trained
on them from its own weights with the objective it was trained with (train/loop.py `--init`), for a
budget of minutes. Nothing leaves the machine, and the tokenizer is kept, so caches and the
checkpoint format stay what they were.

Folders: OUT (default REPO/.diffusion-lsp/model, where the language server looks) holds the adapted
checkpoint, written only when the training has saved, and `adapt.json` (what was adapted and the
figures). OUT/run/ holds the training run (corpus/, edits/, checkpoint/, train_state.pt,
log.jsonl): a rerun with the same repository files continues it (Ctrl-C saves; --minutes is a total
over restarts); once the files changed, or with `fresh`, a new run starts from the base model.

Nothing is written through a symlink a repository brought: the default OUT is used only when
REPO/.diffusion-lsp and everything in it is a real folder or file (`default_out`); otherwise the
user names --out. Each model written is recorded for its repository outside it (local_state.py),
which is what lets the language server use it without a setting.

Our own (small) models are trained whole. A model too large for that, a Hugging Face checkpoint
of a supported family, gets low-rank adapters instead (model/families/lora.py; rank 16 unless `lora_rank`
says otherwise): OUT then holds adapter.json and adapter.safetensors, a few MB beside the name and
fingerprint of the base model, and loading OUT merges them into the base.
Weights checked by model/families/checkpoint.py, adapters model/families/lora.py's, claims model/families/claims.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..data.edits import cap_no_edit, mine_pair
from ..data.git_history import file_pairs
from ..context.repo import ADAPTED_DIR, SourceFile
from ..errors import UserError
from ..local_state import trust
from ..workspace_files import check_in, copy_in, no_link_below, write_in

RUN_FORMAT = 1
MIN_EDITS = 20  # fewer mined edits than this are too few rows to mix in
EDIT_RATE = 0.2  # share of next-edit rows when there are enough
CHECKPOINT_FILES = ("model.safetensors", "tokenizer.json", "config.json")  # config.json last: the loader's key
ADAPTER_FILES = ("adapter.safetensors", "adapter.json")  # adapter.json last
HF_LORA_RANK = 16


@dataclass(frozen=True)
class Plan:
    repo: Path
    base: Path  # a checkpoint folder of our format
    out: Path
    minutes: float = 10.0
    steps: int | None = None  # a budget in optimizer steps instead of minutes (tests, reproducible runs)
    fresh: bool = False  # start a new run even when OUT/run holds one for the same files
    lora_rank: int | None = None  # None: whole weights for our format, HF_LORA_RANK for a Hugging Face model
    lr: float = 1e-3  # chosen on a tuning repository (cattrs, 10 minutes): 3e-4 gained 6.3 points, 1e-3 9.3
    batch_size: int = 16
    seq_len: int = 512
    threads: int = 0
    device: str = "auto"

    def __post_init__(self):
        if not self.minutes > 0 or (self.steps is not None and self.steps < 1):
            raise UserError(f"--minutes and --steps must be positive, got {self.minutes}, {self.steps}")
        if self.lora_rank is not None and not 0 <= self.lora_rank <= 1024:
            raise UserError(f"--lora-rank must be from 0 (whole weights) to 1024, got {self.lora_rank}")

    @property
    def run_dir(self) -> Path:
        return self.out / "run"

    @property
    def place(self) -> tuple[Path, PurePath]:
        """(a folder, OUT relative to it) for workspace_files: the repository and ADAPTED_DIR for the
        default OUT (every folder below the repository checked), else --out's parent and name."""
        if self.out == self.repo / ADAPTED_DIR:
            return self.repo, ADAPTED_DIR
        return self.out.parent, PurePath(self.out.name)


def default_out(repo: Path) -> Path:
    """REPO/.diffusion-lsp/model, where the server looks, once it is sure that writing there stays
    inside the repository: .diffusion-lsp and the model folder are real folders or absent (a
    repository may commit `.diffusion-lsp -> /elsewhere`, whose run/ would be deleted), and nothing
    under .diffusion-lsp is a symlink (a committed `.diffusion-lsp/model/adapt.json -> ~/.bashrc` would be
    written through); a UserError saying which and what to do."""
    check_in(repo, ADAPTED_DIR, folder=True)  # workspace_files: the one set of checks for a workspace
    if (repo / ADAPTED_DIR.parent).is_dir():
        no_link_below(repo / ADAPTED_DIR.parent)
    return repo / ADAPTED_DIR


def _files_digest(files: list[SourceFile], base: Path) -> str:
    """What a run trained on: the training files' paths and texts, and the base model's config."""
    h = hashlib.sha256((base / "config.json").read_bytes() if (base / "config.json").is_file() else b"")
    for f in files:
        h.update(f"{f.path}\0{len(f.text)}\0".encode())
        h.update(f.text.encode())
    return h.hexdigest()[:16]


def base_config(base: Path) -> tuple[dict, bool]:
    """(the base model's config.json, whether it is a Hugging Face checkpoint); a UserError saying
    why it cannot be adapted."""
    from ..model.families.checkpoint import CheckpointError, read_config  # torch: kept off --help
    from ..model.families.pretrained import is_hf_folder, read_hf_config

    try:
        if base.is_dir() and is_hf_folder(base):
            config, _ = read_hf_config(base)  # an unsupported family is refused here
            return config, True
        return read_config(base), False
    except CheckpointError as e:
        raise UserError(str(e)) from None


def write_corpus(folder: Path, train: list[SourceFile], held: list[SourceFile], base: Path, name: str) -> None:
    """train.jsonl and val.jsonl as `data build` writes them, and the base model's tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, files in (("train", train), ("val", held)):
        with (folder / f"{split}.jsonl.tmp").open("w", encoding="utf-8") as f:
            for s in files:
                f.write(json.dumps({"package": name, "version": "", "license": "", "path": s.path,
                                    "language": s.language, "text": s.text.replace("\r\n", "\n")},
                                   ensure_ascii=False) + "\n")
        os.replace(folder / f"{split}.jsonl.tmp", folder / f"{split}.jsonl")
    if (base / "tokenizer.json").is_file():  # what a run from scratch would read; a run from `init` uses init's
        shutil.copyfile(base / "tokenizer.json", folder / "tokenizer.json")


def write_edits(folder: Path, repo: Path, train: list[SourceFile], base: Path) -> int:
    """Next-edit records from the git history of the training files -> how many (train.jsonl)."""
    from ..context.tokens import model_token_counter

    count = model_token_counter(base)
    records = [rec for pair in file_pairs(repo, {f.path for f in train})
               for rec in mine_pair(f"git {pair.commit[:12]}", pair.path, pair.old, pair.new, count)]
    records = cap_no_edit(records)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "train.jsonl").open("w", encoding="utf-8") as f:
        f.writelines(r.to_json() + "\n" for r in records)
    return len(records)


def _run_matches(plan: Plan, digest: str) -> bool:
    try:
        meta = json.loads((plan.run_dir / "adapt_run.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("format") == RUN_FORMAT and meta.get("digest") == digest and \
        meta.get("base") == str(plan.base.resolve())


def train_config(plan: Plan, edits: int, base_model: dict, lora_rank: int):
    """The training run: the base model's own shape (`base_model`, its config.json "model"), or
    adapters of `lora_rank` on it."""
    from .config import MODEL_KEYS, TrainConfig
    from .objective import ObjectiveConfig

    # the objective the embedded model was trained with last (stage 3): half FIM, whole-line middles
    # cut at text line starts, half the canvases noised block by block as the sampler decodes them
    mixed = edits >= MIN_EDITS
    return TrainConfig(corpus=str(plan.run_dir / "corpus"), out=str(plan.run_dir), init=str(plan.base),
                       edits=str(plan.run_dir / "edits") if mixed else None, edit_rate=EDIT_RATE if mixed else 0.0,
                       model={} if lora_rank else {k: base_model[k] for k in MODEL_KEYS
                                                   if k in base_model and k != "max_seq_len"},
                       seq_len=min(plan.seq_len, base_model.get("max_seq_len", plan.seq_len)), lora_rank=lora_rank,
                       batch_size=plan.batch_size, lr=plan.lr, warmup_steps=30,
                       minutes=None if plan.steps else plan.minutes, steps=plan.steps, eval_every=0, eval_batches=0, save_every_minutes=2.0,
                       threads=plan.threads, device=plan.device,
                       objective=ObjectiveConfig(fim_rate=0.5, text_lines=0.5, block_noise=0.5))


def check_trained(run_ckpt: Path) -> None:
    """UserError when the run's weights are no model (training that diverged leaves NaN in them), before
    they replace OUT's model and are recorded as trusted (weight_problem)."""
    from safetensors import safe_open

    from ..model.families.checkpoint import weight_problem

    weights = run_ckpt / (ADAPTER_FILES if (run_ckpt / ADAPTER_FILES[-1]).is_file() else CHECKPOINT_FILES)[0]
    with safe_open(str(weights), framework="pt") as f:
        for name in f.keys():
            if (problem := weight_problem(f.get_tensor(name))) is not None:
                raise UserError(f"the training diverged: its {weights.name} holds {problem[0]} in {name}; nothing "
                                "was published (a base model whose outputs are not finite, or a learning rate too "
                                "high, does this)")


def publish(run_ckpt: Path, plan: Plan, extra: dict) -> None:
    """The run's checkpoint (or adapters) as OUT's model, its config.json (adapter.json) carrying
    `extra`; each file is written by workspace_files (beside its place and renamed over it, never
    through a link swapped in during the run), the JSON last, so a reader sees the old model or the
    new; the files of the other kind, from an earlier run, are removed."""
    adapter = (run_ckpt / ADAPTER_FILES[-1]).is_file()
    files, other = (ADAPTER_FILES, CHECKPOINT_FILES) if adapter else (CHECKPOINT_FILES, ADAPTER_FILES)
    for name in other:
        (plan.out / name).unlink(missing_ok=True)  # a link is removed, never what it points to
    meta = json.loads((run_ckpt / files[-1]).read_text())
    meta.update(extra)
    root, rel = plan.place
    for name in files:
        if name == files[-1]:
            write_in(root, rel / name, json.dumps(meta, indent=2) + "\n")
        else:
            copy_in(root, rel / name, run_ckpt / name)


def adapt(plan: Plan, files: list[SourceFile], progress: bool = True) -> dict:
    """Train plan.base on the repository's training files (`files`: the repository's list, the held-out
    ones are kept out) -> a summary; the adapted model is in plan.out."""
    from ..model.families.checkpoint import CheckpointError
    from .loop import train
    from .state import TrainError

    config, hf = base_config(plan.base)
    rank = plan.lora_rank if plan.lora_rank is not None else HF_LORA_RANK if hf else 0
    if hf and not rank:
        raise UserError(f"{plan.base} is a Hugging Face checkpoint: it is adapted with low-rank adapters "
                        "(--lora-rank 1 or more; 16 when not given), not whole")
    train_files = [f for f in files if not f.held_out]
    held = [f for f in files if f.held_out]
    if not train_files:
        raise UserError(f"{plan.repo}: no source file to adapt to ({len(files)} found, all held out)")
    digest = f"{_files_digest(train_files, plan.base)}/rank{rank}"  # another rank is another run
    resumed = not plan.fresh and _run_matches(plan, digest)
    if not resumed:
        if plan.run_dir.is_symlink():
            plan.run_dir.unlink()  # the link, never what it points to
        shutil.rmtree(plan.run_dir, ignore_errors=True)
        plan.run_dir.mkdir(parents=True)
        write_corpus(plan.run_dir / "corpus", train_files, held, plan.base, plan.repo.resolve().name)
        (plan.run_dir / "adapt_run.json").write_text(json.dumps(
            {"format": RUN_FORMAT, "digest": digest, "base": str(plan.base.resolve()),
             "edits": write_edits(plan.run_dir / "edits", plan.repo, train_files, plan.base)}))
        _ignore_in_git(plan)
    edits = json.loads((plan.run_dir / "adapt_run.json").read_text())["edits"]
    cfg = train_config(plan, edits, {} if hf else config.get("model", {}), rank)
    try:
        summary = train(cfg, progress_bar=progress)
    except (TrainError, CheckpointError) as e:
        raise UserError(str(e)) from None
    if not any((plan.run_dir / "checkpoint" / f).is_file() for f in ("config.json", ADAPTER_FILES[-1])):
        raise UserError(f"{plan.run_dir}: the training saved no checkpoint")
    info = {"repo": str(plan.repo.resolve()), "base": str(plan.base.resolve()),
            "minutes": round(summary["elapsed_s"] / 60, 2),
            "train_files": len(train_files), "held_out_files": len(held), "edit_records": edits,
            "steps": summary["step"], "tokens": summary["tokens"], "resumed": resumed,
            "languages": sorted({f.language for f in train_files}), "lora_rank": rank}
    adapted = {"adapted": {k: info[k] for k in ("repo", "base", "minutes", "steps", "tokens", "lora_rank")}}
    # what the model claims stays the base model's: minutes on one repository teach it no new language
    # (adapters claim what their base does: the claims are read there)
    check_trained(plan.run_dir / "checkpoint")
    publish(plan.run_dir / "checkpoint", plan, adapted if rank else {"claims": config.get("claims", {}), **adapted})
    info["trusted"] = trust(plan.out, plan.repo)  # the server uses it for this repository without asking
    return info


def _ignore_in_git(plan: Plan) -> None:
    """A .gitignore of `*` in the .diffusion-lsp folder OUT is in (as pytest does for its cache), so
    the adapted model and its run never show as untracked files."""
    root, rel = plan.place
    rel = rel.parent if rel.parent.name == ".diffusion-lsp" else rel
    if not os.path.lexists(root / rel / ".gitignore"):  # a dangling link is no place to write either
        write_in(root, rel / ".gitignore", "# made by diffusion-lsp adapt\n*\n")
