"""Editor settings as a defaulted dataclass tree.

Settings arrive as JSON from `initializationOptions` and `workspace/didChangeConfiguration`, with
camelCase or snake_case keys, optionally under a "diffusionLsp" section. A bad value falls back to
its default and an unknown key is ignored; each is reported as one line the server shows with
window/showMessage (the jedi-language-server `initialization_options.py` habit): a typo in the
settings must never stop completions."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field

from ..engine import PRECISIONS  # no torch: engine imports it only when loading

# model/policies.py POLICIES, repeated here so the server process never imports torch (a test checks)
POLICIES = ("threshold", "topk", "eb", "one")
SECTIONS = ("diffusionLsp", "diffusion-lsp", "diffusion_lsp")


def _check(test, need: str):
    return {"check": test, "need": need}


@dataclass
class ModelSettings:
    path: str | None = None  # checkpoint folder; None: `serve --model`, else the embedded model
    device: str = field(default="auto", metadata=_check(lambda v: bool(re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v)),
                                                         "auto, cpu, mps, cuda or cuda:N"))
    threads: int | None = field(default=None, metadata=_check(lambda v: v is None or v >= 1, ">= 1"))
    precision: str = field(default="auto", metadata=_check(lambda v: v in PRECISIONS,
                                                           "auto, fp32 or int8 (int8: CPU only)"))


@dataclass
class SamplingSettings:
    policy: str = field(default="threshold", metadata=_check(lambda v: v in POLICIES, " or ".join(POLICIES)))
    threshold: float = field(default=0.9, metadata=_check(lambda v: 0 < v <= 1, "in (0, 1]"))
    heal: bool = True  # token healing at the cursor
    block_size: int = field(default=8, metadata=_check(lambda v: v >= 0, ">= 0 (0: one block)"))
    time_budget_ms: float | None = field(default=None, metadata=_check(lambda v: v is None or v > 0, "> 0"))


@dataclass
class CompletionSettings:
    enable: bool = True
    debounce_ms: int = field(default=0, metadata=_check(lambda v: 0 <= v <= 5000, "between 0 and 5000"))
    max_context_tokens: int = field(default=512, metadata=_check(lambda v: 32 <= v <= 8192, "between 32 and 8192"))
    confidence_cut: float = field(default=0.3, metadata=_check(lambda v: 0 <= v <= 1, "in [0, 1]"))
    reject_parse_errors: bool = True  # drop (after one re-sample) a fill that breaks the parse
    # single-line completions: the fills' time budget (past it the rest is committed at once), and a
    # parse-error re-sample starts only within its first half; None: no budget
    line_budget_ms: float | None = field(default=200.0, metadata=_check(lambda v: v is None or v > 0, "> 0"))
    disabled_languages: list[str] = field(default_factory=list)  # editor languageIds
    max_line_chars: int = field(default=5000, metadata=_check(lambda v: v >= 80, ">= 80"))
    cache_size: int = field(default=256, metadata=_check(lambda v: v >= 0, ">= 0"))


@dataclass
class WorkerSettings:
    socket: str | None = None  # shared worker socket; None: one per (model, device) in a private dir
    idle_exit_s: float = field(default=600.0, metadata=_check(lambda v: v >= 0, ">= 0"))


@dataclass
class Config:
    model: ModelSettings = field(default_factory=ModelSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    completion: CompletionSettings = field(default_factory=CompletionSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)


def snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower().replace("-", "_")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def _coerce(value, hint) -> tuple[bool, object]:
    """(ok, value) for a JSON value against a field's type hint."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return type(None) in args, None
        return _coerce(value, next(a for a in args if a is not type(None)))
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return ok, float(value) if ok else value
    if hint is str:
        return isinstance(value, str), value
    if typing.get_origin(hint) is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value), value
    raise TypeError(f"settings field type {hint!r} is not supported")


def _parse(cls, raw: dict, base, path: str, problems: list[str]):
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        name = snake(str(key))
        where = f"{path}{camel(name)}"
        if name not in fields:
            problems.append(f"unknown setting {path}{key} (ignored)")
            continue
        f, hint, current = fields[name], hints[name], getattr(base, name)
        if dataclasses.is_dataclass(hint):
            if isinstance(value, dict):
                values[name] = _parse(hint, value, current, where + ".", problems)
            else:
                problems.append(f"{where} should be an object, got {value!r} (ignored)")
            continue
        ok, coerced = _coerce(value, hint)
        check = f.metadata.get("check")
        if ok and check is not None and coerced is not None and not check(coerced):
            ok = False
        if ok:
            values[name] = coerced
        else:
            need = f.metadata.get("need") or getattr(hint, "__name__", str(hint))
            problems.append(f"{where}: {value!r} is not valid ({need}); using the default {current!r}")
    return dataclasses.replace(base, **values)


def parse_config(raw, base: Config | None = None) -> tuple[Config, list[str]]:
    """Settings JSON (dict or None) -> (Config, problems). Keys absent from `raw`, and bad values,
    keep their value in `base`: the defaults, or the `serve` command line's. Parse every settings
    snapshot against the same base, so that a key the user removes goes back to its default."""
    base = base or Config()
    problems: list[str] = []
    if raw is None:
        return base, problems
    if not isinstance(raw, dict):
        return base, [f"settings should be an object, got {raw!r} (ignored)"]
    for section in SECTIONS:
        if isinstance(raw.get(section), dict):
            raw = raw[section]
            break
    return _parse(Config, raw, base, "", problems), problems
