"""The next-edit settings group (`nextEdit.*` in the editors) and the decoding modes. What next edits share
with completions (enable, debounceMs, maxContextTokens, drafts, acceptance, showAbove) is defined once in
protocol/request_knobs.py and taken here; the pipeline that reads them: suggest.py."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..protocol.request_knobs import ACCEPTANCE, DEBOUNCE, DRAFTS, ENABLE, MAX_CONTEXT_TOKENS, SHOW_ABOVE
from ..protocol.settings import check, one_of, validate, within


class Mode(enum.StrEnum):
    """How a next edit is decoded. A str enum: its value is what the settings, the statistics and JSON hold."""

    REFINE = "refine"  # remask-and-refine: probe the region, re-mask only the tokens the model doubts
    FULL = "full"  # full re-mask: the old region shown, the whole region re-masked with slack
    API = "api"  # a remote API's edit endpoint rewrites the region

    @property
    def asked(self) -> bool:
        """Whether a user (or a benchmark) may ask for it; API is only chosen for a backend that cannot
        probe and has an edit endpoint."""
        return self is not Mode.API


ASKED = tuple(m for m in Mode if m.asked)  # nextEdit.mode's choices, in order


@dataclass(frozen=True)
class NextEditSettings:
    """Editor settings `nextEdit.*`."""

    enable: bool | None = ENABLE.field()
    debounce_ms: int = DEBOUNCE.field()
    mode: Mode = field(default=Mode.REFINE, metadata=one_of(
        ASKED, doc="refine: re-mask only the tokens the model doubts; full: re-mask the whole region"))
    region_lines: int = field(default=20, metadata=within(1, 200, doc="lines of the editable region"))
    # at most this many tokens of region, and at most a quarter of max_context_tokens
    region_tokens: int = field(default=350, metadata=within(
        8, 4096, doc="tokens of the editable region (at most a quarter of maxContextTokens)"))
    history_steps: int = field(default=5, metadata=within(0, 20, doc="recent edit steps shown to the model"))
    max_context_tokens: int = MAX_CONTEXT_TOKENS.field()
    min_confidence: float = field(default=0.3, metadata=within(
        0, 1, need="in [0, 1]", doc="an edit less sure than this is not shown"))
    doubt: float = field(default=4.0, metadata=within(
        1, 1e6, doc="refine: a token is doubted when the model's own choice is this many times likelier"))
    stride: int = field(default=4, metadata=within(1, 16, doc="refine: interleaved probe passes"))
    max_span_lines: int = field(default=3, metadata=within(1, 200, doc="refine: most lines re-masked at once"))
    jump_lines: int = field(default=3, metadata=within(
        0, 1000, doc="an edit further than this many lines from the cursor is a jump"))
    drafts: bool = DRAFTS.field()
    follow: bool = field(default=True, metadata=check(
        None, "true or false", doc="propose the rest of a rename at its other sites in the name's scope, anywhere in "
                                   "the file, from the code alone (also when the model's own next edits are off)"))
    acceptance: bool = ACCEPTANCE.field()
    show_above: float | None = SHOW_ABOVE.field()

    def __post_init__(self):
        validate(self)
