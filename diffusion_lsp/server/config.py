"""Editor settings as a defaulted dataclass tree.

Settings arrive as JSON from `initializationOptions` and `workspace/didChangeConfiguration`, with
camelCase or snake_case keys, optionally under a "diffusionLsp" section. A bad value falls back to
its default and an unknown key is ignored; each is reported as one line the server shows with
window/showMessage (the jedi-language-server `initialization_options.py` habit): a typo in the
settings must never stop completions.
What a model claims: model/families/claims.py; the settings completions and next edits share, each defined
once: protocol/request_knobs.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..protocol.backend import FILL_TIMEOUT_S
from ..context.languages import LANGUAGE_IDS, LanguageSpec
from ..model.families.claims import Claims
from ..protocol.request_knobs import ACCEPTANCE, DEBOUNCE, DRAFTS, ENABLE, MAX_CONTEXT_TOKENS, SHOW_ABOVE
from ..protocol.settings import CONFIDENCE_CUT, LaunchSettings, SamplerConfig, check, parse_tree, validate, within
from ..nextedit.settings import NextEditSettings
from ..worker.spec import IDLE_EXIT_S, LOAD_TIMEOUT_S

SECTIONS = ("diffusionLsp", "diffusion-lsp", "diffusion_lsp")


@dataclass
class CompletionSettings:
    """Editor settings `completion.*`; the knobs next edits share with them are defined once."""

    enable: bool | None = ENABLE.field(True)  # on for every model: no default left to its claims
    debounce_ms: int = DEBOUNCE.field()
    max_context_tokens: int = MAX_CONTEXT_TOKENS.field()
    # 0.5: every token shown is one the model thinks more likely than not. On CPython's test suite
    # (`eval confidence`, 500 lines) it shows 14-15% of positions against 25-34% at 0.3, and the
    # shown ones are right as far as they go 34% (at a line's indentation) and 56% (3 characters
    # typed) of the time, against 27% and 30%
    confidence_cut: float = CONFIDENCE_CUT.field(0.5)
    # drop (after one re-sample) a fill that breaks the parse
    reject_parse_errors: bool = field(default=True, metadata=check(
        None, "true or false", doc="drop a fill that breaks the file's parse, after one re-sample"))
    # single-line completions: the fills' time budget (past it the rest is committed at once), and a
    # parse-error re-sample starts only within its first half; None: no budget
    line_budget_ms: float | None = field(default=200.0, metadata=check(
        lambda v: 0 < v <= 60_000, "between 0 and 60000", exclusive_minimum=0, maximum=60_000,
        doc="time budget of a single-line fill (ms): past it the rest is committed at once; null: none"))
    # None: the languages the model claims; the embedded model claims Python only
    languages: list[str] | None = field(default=None, metadata=check(
        None, "a list of language ids, or null",
        doc='languages with completions and next edits ("*": all); null: those the model was trained on'))
    disabled_languages: list[str] = field(default_factory=list, metadata=check(
        None, "a list of language ids", doc="editor language ids with no completions"))
    max_line_chars: int = field(default=5000, metadata=within(
        80, 1_000_000, doc="no completion on a line longer than this"))
    drafts: bool = DRAFTS.field()
    cache_size: int = field(default=256, metadata=within(0, 100_000, doc="recent results kept for type-ahead"))
    acceptance: bool = ACCEPTANCE.field()
    show_above: float | None = SHOW_ABOVE.field()
    feedback: bool = field(default=True, metadata=check(
        None, "true or false", doc="keep which suggestions you accepted on this machine (never sent anywhere) so "
                                   "`diffusion-lsp calibrate --feedback` can refit what is shown"))

    def __post_init__(self):
        validate(self)


@dataclass
class WorkerSettings:
    socket: str | None = field(default=None, metadata=check(
        None, "a socket path",
        doc="a shared worker socket (its folder private, 0700); null: one per model and device in a private folder"))
    # a fill not answered by then is answered empty; a worker that then ignores a ping is restarted
    fill_timeout_s: float = field(default=FILL_TIMEOUT_S, metadata=within(
        0.1, 3600, doc="a fill not answered in this many seconds is answered empty; a hung worker is restarted"))
    idle_exit_s: float = field(default=IDLE_EXIT_S, metadata=within(
        0, 7 * 86_400, note="a week", doc="the worker exits after this many seconds with no editor connected"))
    load_timeout_s: float = field(default=LOAD_TIMEOUT_S, metadata=within(
        1, 86_400, note="a day", doc="a model not loaded in this many seconds is reported as failed to load"))


@dataclass
class Config:
    model: LaunchSettings = field(default_factory=LaunchSettings)
    sampling: SamplerConfig = field(default_factory=SamplerConfig)
    completion: CompletionSettings = field(default_factory=CompletionSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    next_edit: NextEditSettings = field(default_factory=NextEditSettings)


def parse_config(raw, base: Config | None = None) -> tuple[Config, list[str]]:
    """Settings JSON (dict or None) -> (Config, problems). Keys absent from `raw`, and bad values,
    keep their value in `base`: the defaults, or the `serve` command line's. Parse every settings
    snapshot against the same base, so that a key the user removes goes back to its default. An
    empty list is no settings too: Lua clients encode an empty table as [] (Neovim's did)."""
    base = base or Config()
    problems: list[str] = []
    if raw is None or raw == []:
        return base, problems
    if not isinstance(raw, dict):
        return base, [f"settings should be an object, got {raw!r} (ignored)"]
    for section in SECTIONS:
        if isinstance(raw.get(section), dict):
            raw = raw[section]
            break
    return parse_tree(Config, raw, base, "", problems), problems


def with_claims(cfg: Config, claims: Claims) -> Config:
    """`cfg` with the settings left to the model (null) filled in from what it claims: next edits
    only for a model that claims them, completions only in its languages."""
    completion, next_edit = cfg.completion, cfg.next_edit
    if completion.enable is None:  # every model writes code (where: its languages, below)
        completion = dataclasses.replace(completion, enable=True)
    if completion.languages is None:
        languages = ["*"] if claims.languages is None else list(claims.languages)
        completion = dataclasses.replace(completion, languages=languages)
    if next_edit.enable is None:
        next_edit = dataclasses.replace(next_edit, enable=claims.next_edits)
    return dataclasses.replace(cfg, completion=completion, next_edit=next_edit)


def serves_language(cfg: Config, spec: LanguageSpec) -> bool:
    """Whether `completion.languages` (filled in by with_claims) lets the model write `spec`'s code;
    names are canonical names or editor language ids ("typescript" covers tsx)."""
    names = cfg.completion.languages
    if names is None or "*" in names:
        return True
    wanted = {LANGUAGE_IDS.get(n.lower(), n.lower()) for n in names}
    return spec.name in wanted or (spec.name == "tsx" and "typescript" in wanted)
