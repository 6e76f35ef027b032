"""The settings that travel, each defined once and torch-free: how to sample a fill (`SamplerConfig`)
and how to launch a model (`LaunchSettings`).

The language server reads them from the editor's settings, sends a SamplerConfig to the worker
over the socket (`to_wire` / `from_wire`), the worker batches requests by it (it is frozen, so it
is its own batch key), and the command line and the benchmarks make their flags from the same
fields (`add_args` / `from_args`). Each field carries its own check in its metadata
(`check(test, need)`): `__post_init__` refuses a bad value with a ValueError naming it (`validate`), and
the editor settings parser (server/config.py) falls back to the default and reports it instead.
A setting two groups hold is one `Knob` both take: one bound, one message (tests/test_settings_knobs.py).
Shared: `confidence_cut` (sampler, completions) and what completions and next edits share (request_knobs.py).
Read by: the settings schema (server/schema.py), the sampler (model/decoding/sampler.py, its policies
model/decoding/policies.py, drafts verified by model/decoding/verify.py), the servers' profiles (backend/profiles.py) and
serve-api's bodies (api/bodies.py)."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field

POLICIES = ("threshold", "topk", "eb", "one")  # the sampler's unmasking policies
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
FLOAT_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # a float precision -> its torch dtype
BACKENDS = ("local", "openai")  # the model in a worker process, or an OpenAI-compatible FIM API
SERVERS = ("generic", "vllm", "sglang", "mercury")  # what speaks that API: each has its profile of requests
REMOTE_FORMATS = ("completions", "chat")  # a fill as a completion (FIM), or asked of an instruct model in a chat turn
# a fill-in-the-middle prompt template by name -> the template ({prefix} and {suffix} where they go), each the
# model family's own order: Qwen2.5-Coder / CodeGemma, StarCoder(2), DeepSeek-Coder (SGLang's
# code_completion_parser.py registers these three alike), CodeLlama and Codestral (as serve-api reads
# them), Seed-Coder (suffix first: its tech report trains SPM, <[fim-suffix]>SUFFIX<[fim-prefix]>PREFIX<[fim-middle]>)
FIM_TEMPLATES = {
    "qwen": "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>",
    "starcoder": "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>",
    "deepseek": "<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>",
    "codellama": "<PRE> {prefix} <SUF>{suffix} <MID>",
    "seed-coder": "<[fim-suffix]>{suffix}<[fim-prefix]>{prefix}<[fim-middle]>",
    "codestral": "[SUFFIX]{suffix}[PREFIX]{prefix}",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def check(test, need: str, **more) -> dict:
    """Field metadata: `test(value)` must hold; `need` says what a good value is, for messages.
    More keys: `flag` (the command-line flag, when not --field-name / --no-field-name), `dest` (its
    argparse name, when not the field's), `help` (the flag's), `doc` (the editor setting's, when the
    flag's help does not fit it), `minimum` / `maximum` / `exclusive_minimum` / `enum` (for the
    settings schema; `within` and `one_of` set them), `editor=False` (not an
    editor setting: the server derives it)."""
    return {"check": test, "need": need, **more}


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def within(lo, hi, note: str = "", need: str | None = None, **more) -> dict:
    """`check` for a number in [lo, hi]; the bounds also travel as `minimum` / `maximum` (the
    editors' settings schemas)."""
    need = need or f"between {_num(lo)} and {_num(hi)}" + (f" ({note})" if note else "")
    return check(lambda v: lo <= v <= hi, need, minimum=lo, maximum=hi, **more)


def one_of(choices, need: str | None = None, **more) -> dict:
    """`check` for one of `choices` (also the schemas' `enum`)."""
    return check(lambda v: v in choices, need or " or ".join(choices), enum=list(choices), **more)


_OWN = object()  # Knob.field without a default: the knob's own


@dataclass(frozen=True, eq=False)
class Knob:
    """One setting defined once: its name, type, check (`check` / `within` metadata) and default. A
    settings group takes it as a field, `debounce_ms: int = DEBOUNCE.field()`, passing a default
    only where its request needs another; a name in two groups is one Knob in both."""

    name: str
    hint: object
    meta: dict
    default: object = None

    def field(self, default=_OWN, **more) -> dataclasses.Field:
        """The field of a group that takes this knob; `more` adds to its metadata (`editor=False`)."""
        return field(default=self.default if default is _OWN else default,
                     metadata={**self.meta, **more, "knob": self})


def coerce(value, hint) -> tuple[bool, object]:
    """(ok, value) for a JSON value against a field's type hint: no bool for an int, no NaN."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return type(None) in args, None
        return coerce(value, next(a for a in args if a is not type(None)))
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        try:  # an integer of 400 digits is not a float: float() and math.isfinite overflow on it
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))
        except OverflowError:
            ok = False
        return ok, float(value) if ok else value
    if hint is str:
        return isinstance(value, str), value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):  # a str enum's member by its value
        ok = isinstance(value, str) and value in hint._value2member_map_
        return ok, hint(value) if ok else value
    if typing.get_origin(hint) is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value), value
    raise TypeError(f"settings field type {hint!r} is not supported")


def field_problem(f: dataclasses.Field, hint, value) -> str | None:
    """Why `value` is not valid for field `f`, or None when it is."""
    ok, coerced = coerce(value, hint)
    test = f.metadata.get("check")
    if ok and test is not None and coerced is not None and not test(coerced):
        ok = False
    if ok:
        return None
    need = f.metadata.get("need") or getattr(hint, "__name__", str(hint))
    return f"{f.name}={value!r} is not valid ({need})"


@functools.cache
def hints(cls) -> dict:
    """A class's resolved field types (get_type_hints costs ~100 us: once per class, not per request)."""
    return typing.get_type_hints(cls)


def snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower().replace("-", "_")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def parse_tree(cls, raw: dict, base, path: str, problems: list[str]):
    """A dataclass tree from settings JSON (camelCase or snake_case keys): `base` with the values of
    `raw` that are valid; each bad value keeps its value in `base`, and each bad value or unknown key
    is one line in `problems` (the editor shows them; a typo must never stop completions)."""
    field_hints = hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        name = snake(str(key))
        where = f"{path}{camel(name)}"
        if name not in fields or fields[name].metadata.get("editor") is False:
            problems.append(f"unknown setting {path}{key} (ignored)")
            continue
        f, hint, current = fields[name], field_hints[name], getattr(base, name)
        if dataclasses.is_dataclass(hint):
            if isinstance(value, dict):
                values[name] = parse_tree(hint, value, current, where + ".", problems)
            else:
                problems.append(f"{where} should be an object, got {value!r} (ignored)")
            continue
        why = field_problem(f, hint, value)
        if why is None:
            values[name] = coerce(value, hint)[1]
        else:
            need = f.metadata.get("need") or getattr(hint, "__name__", str(hint))
            shown = current.value if isinstance(current, enum.Enum) else current  # as the user writes it
            problems.append(f"{where}: {json.dumps(value, default=repr)} is not valid ({need}); using the default "
                            f"{json.dumps(shown, default=repr)}")  # as JSON: what a settings file spells
    try:
        return dataclasses.replace(base, **values)
    except ValueError as e:  # the values are each fine but not together (e.g. a backend without its URL)
        problems.append(f"{path.rstrip('.') or 'settings'}: {e} (ignored)")
        return base


def validate(obj) -> None:
    """ValueError naming the first field of the settings group `obj` whose value fails its check."""
    hints_ = hints(type(obj))
    for f in dataclasses.fields(obj):
        why = field_problem(f, hints_[f.name], getattr(obj, f.name))
        if why is not None:
            raise ValueError(why)


def _from_dict(cls, raw):
    """Strict: a dict with known keys and valid values (missing keys keep their defaults)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{cls.__name__} should be an object, got {type(raw).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in raw if k not in names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    hints_ = hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in raw:
            ok, values[f.name] = coerce(raw[f.name], hints_[f.name])
            if not ok:
                raise ValueError(field_problem(f, hints_[f.name], raw[f.name]))
    return cls(**values)


# the sampler stops at it; completions cut their fill at it (the server passes completion.confidenceCut); 0: none
CONFIDENCE_CUT = Knob("confidence_cut", float, within(
    0, 1, need="in [0, 1]", doc="a fill ends at its first token less sure than this",
    help="stop at the first token below this confidence"), 0.0)


@dataclass(frozen=True)
class SamplerConfig:
    """How one fill is decoded. Frozen: equal configs decode in one batch."""

    policy: str = field(default="threshold", metadata=one_of(POLICIES, help="unmasking policy"))
    threshold: float = field(default=0.9, metadata=check(
        lambda v: 0 < v <= 1, "in (0, 1]", exclusive_minimum=0, maximum=1,
        help="threshold policy: commit every position this sure"))
    k: int = field(default=2, metadata=within(1, 1024, help="topk policy: positions committed per step"))
    gamma: float = field(default=0.5, metadata=check(
        lambda v: 0 < v <= 100, "in (0, 100]", exclusive_minimum=0, maximum=100,
        help="eb policy: entropy budget per step (nats)"))
    # semi-autoregressive blocks (LLaDA); 0: the whole canvas is one block. 8: on held-out code a
    # whole-canvas confidence order commits the far fillers first and squeezes the fill to nothing
    block_size: int = field(default=8, metadata=within(0, 4096, note="0: one block",
                                                       help="semi-autoregressive block size (0: one block)"))
    # `help` says what a flag does, `doc` what the editor setting does (for a flag that turns it off)
    use_cache: bool = field(default=True, metadata=check(
        None, "true or false", flag="--no-cache", help="recompute the whole context every step",
        doc="keep the context's keys and values between denoising steps (off: recompute it every step)"))
    refresh_every: int | None = field(default=None, metadata=check(lambda v: v >= 1, ">= 1", minimum=1,
                                                                    help="refresh the context cache every K steps"))
    time_budget_ms: float | None = field(default=None, metadata=within(
        0, 600_000, help="past this, commit the rest greedily"))
    heal: bool = field(default=True, metadata=check(
        None, "true or false", help="no token healing at the cursor",
        doc="token healing: re-decode the partial word before the cursor with the fill"))
    trailing_fillers: bool = field(default=True, metadata=check(
        None, "true or false", help="keep decoding after a committed filler (by default a filler ends the fill)",
        doc="on: a committed filler ends the fill; off: keep decoding after it"))
    reuse_context: bool = field(default=True, metadata=check(
        None, "true or false", help="do not start a fill from the same document's last fill (its context's "
                                    "keys and values, where they still fit)",
        doc="start a fill from the document's last fill where it still fits (model/decoding/reuse.py)"))
    # drafts: each token judged with (stride - 1) / stride of its neighbours visible,
    # in `draft_stride` passes; a draft whose tokens' geometric-mean probability is `draft_accept` is kept
    # whole, else the prefix of tokens at least `draft_keep` likely (or the model's own first choice)
    draft_stride: int = field(default=2, metadata=within(1, 16, help="passes that score a draft's tokens"))
    draft_accept: float = field(default=0.2, metadata=check(
        lambda v: 0 < v <= 1, "in (0, 1]", exclusive_minimum=0, maximum=1,
        help="keep a draft whole when its tokens' geometric-mean probability is at least this"))
    draft_keep: float = field(default=0.5, metadata=check(
        lambda v: 0 < v <= 1, "in (0, 1]", exclusive_minimum=0, maximum=1,
        help="keep a draft's tokens up to the first one the model finds less likely than this (and not its "
             "first choice)"))
    # done once a real token committed below this confidence has no masked position before it: a caller
    # that drops a fill's tail from its first token below this (the server's confidenceCut) needs no more
    confidence_cut: float = CONFIDENCE_CUT.field(editor=False)

    def __post_init__(self):
        validate(self)

    def to_wire(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, raw) -> SamplerConfig:
        """ValueError naming the bad key or value."""
        return _from_dict(cls, raw)

    def replace(self, **changes) -> SamplerConfig:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class LaunchSettings:
    """Which model to load and where: `load_engine`, the worker's command line, `model.*` settings."""

    path: str | None = field(default=None, metadata=check(None, "a checkpoint folder", flag="--model", dest="model",
                                                           help="checkpoint folder (default: the embedded model)"))
    device: str = field(default="auto", metadata=check(lambda v: bool(_DEVICE.fullmatch(v)),
                                                        "auto, cpu, mps, cuda or cuda:N",
                                                        help="cpu, cuda, cuda:1, ... (default: cuda when present)",
                                                        doc="auto, cpu, mps, cuda or cuda:N (auto: cuda when present)"))
    threads: int | None = field(default=None, metadata=within(1, 1024,
                                                              help="torch threads on CPU (default: the idle cores)"))
    # bf16 / fp16 on CPU run, but slower than fp32 where the CPU has no 16-bit float instructions: the
    # embedded model on a 2-core AVX2 EPYC, one forward [4, 256] fp32 176 ms, bf16 1036 ms, fp16 810 ms
    precision: str = field(default="auto", metadata=one_of(
        PRECISIONS, "auto, fp32, bf16, fp16 or int8 (int8: CPU only)",
        help="weights: auto is int8 on CPU (where torch has the int8 kernels), on GPU bf16 for our own format "
             "(where supported) and the checkpoint's own for a Hugging Face one; bf16 and fp16 are for GPUs "
             "(slow on CPU)",
        doc="weights: auto is int8 on CPU (model/network/quantize.py), on GPU bf16 for our own format (where supported) "
            "and the checkpoint's own for a Hugging Face one; bf16 and fp16 are for GPUs (slow on CPU)"))
    backend: str = field(default="local", metadata=one_of(
        BACKENDS,
        help="local: the model in a worker process; openai: an OpenAI-compatible FIM API (--base-url)"))
    base_url: str | None = field(default=None, metadata=check(
        lambda v: v.startswith(("http://", "https://")), "an http:// or https:// URL",
        help="the API's base URL, e.g. https://api.inceptionlabs.ai/v1 (backend openai)"))
    remote_model: str | None = field(default=None, metadata=check(
        lambda v: 0 < len(v) <= 256, "a model name", help="the API's model name, e.g. mercury-edit (backend openai)"))
    api_key_env: str | None = field(default=None, metadata=check(
        lambda v: bool(_ENV_NAME.fullmatch(v)), "an environment variable name",
        help="the environment variable that holds the API key (the key itself is never a setting)"))
    server: str = field(default="generic", metadata=one_of(
        SERVERS, help="what serves the API (backend openai): generic asks /fim/completions, then /completions with "
                      "suffix; vllm gets the FIM template in the prompt (vLLM refuses suffix); sglang gets suffix "
                      "(applied by its --completion-template) or the FIM template; mercury is Inception's API"))
    fim_template: str | None = field(default=None, metadata=check(
        lambda v: v in FIM_TEMPLATES or ("{prefix}" in v and "{suffix}" in v),
        f"{', '.join(FIM_TEMPLATES)} or a template holding {{prefix}} and {{suffix}}",
        help=f"the model's fill-in-the-middle prompt ({', '.join(FIM_TEMPLATES)} or a template holding {{prefix}} "
             "and {suffix}) for a server that takes no suffix (backend openai)"))
    chat_template: str | None = field(default=None, metadata=check(
        lambda v: 0 < len(v) <= 4096, "a file path", editor=False,
        help="a jinja chat template file for a model that has none (serve-api's /v1/chat/completions); a "
             "checkpoint's own template is used without it"))
    remote_format: str = field(default="completions", metadata=one_of(
        REMOTE_FORMATS, help="completions: a fill-in-the-middle completion; chat: an instruct model asked for the "
                             "code at the cursor in /chat/completions (backend openai)"))

    def __post_init__(self):
        validate(self)
        if self.backend == "openai" and (self.base_url is None or self.remote_model is None):
            raise ValueError("backend openai needs base_url and remote_model")
        if self.backend == "openai" and self.remote_format == "completions":
            if self.server == "vllm" and self.fim_template is None:
                raise ValueError("server vllm needs fim_template (vLLM's /completions refuses suffix): "
                                 f"{', '.join(FIM_TEMPLATES)} or a template holding {{prefix}} and {{suffix}}; "
                                 "or remote_format chat for an instruct model")
            if self.server == "mercury" and self.fim_template is not None:
                raise ValueError("server mercury fills at /fim/completions with suffix: it takes no fim_template")

    def to_argv(self) -> list[str]:
        """The flags `add_args` reads back into these settings."""
        return to_argv(self)

    @classmethod
    def from_wire(cls, raw) -> LaunchSettings:
        return _from_dict(cls, raw)

    def replace(self, **changes) -> LaunchSettings:
        return dataclasses.replace(self, **changes)


# ---- command-line flags, made from the fields ----

def _flag(f: dataclasses.Field, default) -> str:
    if "flag" in f.metadata:
        return f.metadata["flag"]
    name = f.name.replace("_", "-")
    return f"--no-{name}" if default is True else f"--{name}"


def add_args(p: argparse.ArgumentParser, cls, defaults=None, only: tuple[str, ...] | None = None) -> None:
    """One flag per field of `cls` (or of `only`), with `defaults` (an instance) as the defaults.
    A true boolean becomes --no-NAME; values are checked by the class when `from_args` builds it."""
    defaults = defaults if defaults is not None else cls()
    for f in dataclasses.fields(cls):
        if only is not None and f.name not in only:
            continue
        default, hint = getattr(defaults, f.name), hints(cls)[f.name]
        flag, dest, help_ = _flag(f, default), f.metadata.get("dest", f.name), f.metadata.get("help")
        if hint is bool:
            p.add_argument(flag, dest=dest, action="store_false" if default else "store_true", default=default,
                           help=help_)
            continue
        base = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
        choices = f.metadata.get("enum")
        p.add_argument(flag, dest=dest, type=base, default=default, choices=choices,
                       help=f"{help_} (default {default})" if help_ and "default" not in help_ else help_)


def from_args(cls, args: argparse.Namespace, **overrides):
    """The instance `add_args` flags describe; ValueError naming a bad value."""
    values = {f.name: getattr(args, f.metadata.get("dest", f.name)) for f in dataclasses.fields(cls)
              if hasattr(args, f.metadata.get("dest", f.name))}
    return cls(**{**values, **overrides})


def to_argv(obj) -> list[str]:
    """Flags for the fields of `obj` that differ from their defaults."""
    defaults, out = type(obj)(), []
    for f in dataclasses.fields(obj):
        value, default = getattr(obj, f.name), getattr(defaults, f.name)
        if value == default:
            continue
        flag = _flag(f, default)
        out += [flag] if isinstance(default, bool) else [flag, str(value)]
    return out
