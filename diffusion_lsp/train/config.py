"""Training run configuration: one dataclass, saved in train_state.pt and compared on resume.
Next-edit records: data/edits.py; adapters: model/families/lora.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..model.network.config import strict_from_dict
from .objective import ObjectiveConfig

AUTOCAST = ("auto", "bf16", "off")
# model shape options that may override a preset (ModelConfig field names)
MODEL_KEYS = ("dim", "n_layers", "n_heads", "n_kv_heads", "hidden_dim", "max_seq_len")


@dataclass
class TrainConfig:
    corpus: str  # folder with train.jsonl, val.jsonl (optional) and tokenizer.json
    out: str  # run folder: checkpoint/, train_state.pt, log.jsonl
    init: str | None = None  # a new run starts from this checkpoint's weights and tokenizer (fresh optimizer)
    edits: str | None = None  # folder with next-edit records train.jsonl, val.jsonl
    edit_rate: float = 0.0  # fraction of rows that are next-edit rows (needs edits)
    preset: str = "small"  # ModelConfig preset; vocab_size always follows the tokenizer
    model: dict = field(default_factory=dict)  # overrides of MODEL_KEYS
    seq_len: int = 256
    batch_size: int = 32  # rows per rank per step
    lr: float = 1e-3  # peak learning rate
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 100
    warmup_frac: float = 0.05  # warmup also ends once this fraction of the budget is used
    weight_decay: float = 0.1  # on matrices only, not norms
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    minutes: float | None = None  # total training-time budget across restarts
    steps: int | None = None  # total optimizer steps across restarts
    eval_every: int = 200  # steps between validation losses (0: never)
    eval_batches: int = 4  # validation batches of each kind (plain and FIM)
    save_every_minutes: float = 10.0
    autocast: str = "auto"  # auto: bf16 on CUDA and on CPUs with native bf16, else fp32
    seed: int = 0
    threads: int = 0  # torch threads per process; 0: available cores / local processes
    device: str = "auto"  # auto: cuda when available, else cpu
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    lora_rank: int = 0  # > 0: train low-rank adapters of this rank on init's frozen weights
    lora_alpha: float | None = None  # the adapters' scale is alpha / rank; None: 2 * rank

    def __post_init__(self):
        if isinstance(self.objective, dict):
            self.objective = ObjectiveConfig(**self.objective)
        self.betas = tuple(self.betas)
        unknown = sorted(set(self.model) - set(MODEL_KEYS))
        if unknown:
            raise ValueError(f"unknown model override keys: {', '.join(unknown)}")
        if self.minutes is None and self.steps is None:
            raise ValueError("give a budget: minutes or steps")
        if self.minutes is not None and self.minutes <= 0 or self.steps is not None and self.steps <= 0:
            raise ValueError(f"minutes and steps must be positive, got {self.minutes}, {self.steps}")
        if self.autocast not in AUTOCAST:
            raise ValueError(f"autocast must be one of {', '.join(AUTOCAST)}, got {self.autocast!r}")
        if not 0.0 <= self.edit_rate <= 1.0 or (self.edit_rate > 0 and not self.edits):
            raise ValueError(f"edit_rate must be in [0, 1] and needs an edits folder, got {self.edit_rate}")
        if not 0.0 <= self.warmup_frac < 1.0:
            raise ValueError(f"warmup_frac must be in [0, 1), got {self.warmup_frac}")
        if self.seq_len < 8 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError(f"bad seq_len/batch_size/lr: {self.seq_len}, {self.batch_size}, {self.lr}")
        if self.lora_rank < 0 or (self.lora_rank and not self.init):
            raise ValueError(f"lora_rank must be >= 0 and needs init (the base model), got {self.lora_rank}")
        if self.eval_every < 0 or self.eval_batches < 0 or self.warmup_steps < 0 or self.threads < 0:
            raise ValueError("eval_every, eval_batches, warmup_steps and threads must be >= 0")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        return strict_from_dict(cls, d, "train config")
