"""What the product may show, written once: a `Candidate` is a span of a document and the text that
replaces it, from one `Source`, with the evidence an acceptance model reads (acceptance/).

Completions and next edits are both candidates. A completion is a candidate whose span starts at the
cursor (it inserts there, and may write over characters after it on its line); a next edit is any
span. Every shape a request passes through (the model's fill as post-processing cut it, a draft from
the user's code, the rest of a change at its next sites, the last edit made again, the model's edit)
is one of these; the LSP and Copilot wire shapes are made from it at the server's edge only.

A source's kind (from the user's code, a repeat of what was just done, or the model) and whether it
is the change's own sites are properties of the member, never a position in a tuple: a new source
declares them where it is defined. Each request kind lists its sources in the order its acceptance
model's features name them (`Request.sources`), which is the order of a model file's weights; each
kind has its own acceptance model (acceptance/model.py KINDS)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """Where a candidate's text comes from."""

    CODE = "code"  # the user's own code alone: a line written elsewhere, a change's remaining sites
    REPEAT = "repeat"  # what was just done, done again: the last edit at its next occurrence, the last suggestion
    MODEL = "model"  # the model wrote it


class Source(str, Enum):
    """Who proposed a candidate. The value is the name the acceptance model's features and a model
    file's `fitted_on.seen` use (`source_<value>`); it never changes once a model file names it."""

    # kind, whether the candidate is the change's own site (a rename's, a signature's: the user's
    # change itself, continued), and what it is
    MODEL = ("model", Kind.MODEL, False, "the model's fill (a completion) or its edit of a region (a next edit)")
    LAST = ("last", Kind.REPEAT, False, "the document's last suggestion, while what was typed since matches it")
    LOOKUP = ("lookup", Kind.CODE, False, "the text that followed the typed tail where it stands elsewhere")
    LINE = ("line", Kind.CODE, False, "the line analogous to the cursor's, from a sibling block")
    RENAME = ("rename", Kind.CODE, True, "a renamed name at its next sites in its scope")
    SIGNATURE = ("signature", Kind.CODE, True, "a changed signature reaching its calls")
    ARGUMENT = ("argument", Kind.CODE, True, "an argument changed at one call, changed at the analogous calls")
    IMPORTED = ("imported", Kind.CODE, True, "a signature changed in another open document, at its calls here")
    REPEAT = ("repeat", Kind.REPEAT, False, "the last edit's change made again at its next occurrence")
    DRAFT = ("draft", Kind.MODEL, False, "the last edit made again where the model preferred it to what stands")
    UNWRAP = ("unwrap", Kind.CODE, True, "a wrapper removed from an argument at one call, removed at the other calls")

    def __new__(cls, value: str, kind: Kind, followed: bool, about: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind, member.followed, member.about = kind, followed, about
        return member

    def __str__(self) -> str:
        return self.value


class Request(str, Enum):
    """What a candidate answers; each kind has its own acceptance model."""

    COMPLETION = "completion"
    EDIT = "edit"

    @property
    def sources(self) -> tuple[Source, ...]:
        """The sources this request's candidates come from, in its features' order."""
        return _SOURCES[self]


_SOURCES = {
    Request.COMPLETION: (Source.MODEL, Source.LAST, Source.LOOKUP, Source.LINE),
    Request.EDIT: (Source.RENAME, Source.SIGNATURE, Source.ARGUMENT, Source.IMPORTED, Source.REPEAT, Source.MODEL,
                   Source.DRAFT, Source.UNWRAP),
}


@dataclass(frozen=True)
class Candidate:
    """`text` in place of the document's [start, end) (str offsets), from `source`, with its evidence."""

    start: int
    end: int
    text: str
    source: Source
    # the evidence: what each source knows of its candidate (a source that knows nothing leaves the default)
    conf: tuple[float, ...] = ()  # the model's probability of each of its tokens; () when none scored them
    confidence: float | None = None  # the model's confidence in a whole edit; None: no model judged it
    match: float = 0.0  # lookup: characters of the repeated tail; line: word overlap of the two lines
    lines_away: int = 0  # how far its source text is from the cursor; -1: another document
    agree: int = 0  # other drafters that wrote the same text
    kept: str = ""  # the model's verdict on a draft it verified: "whole", "part", "rejected"; "" none
    origin: str = ""  # the document a followed change was made in, when another (its uri)

    def __post_init__(self):
        if not 0 <= self.start <= self.end:
            raise ValueError(f"a candidate's span must be 0 <= start <= end, not [{self.start}, {self.end})")

    @classmethod
    def at(cls, offset: int, text: str, source: Source, replace_chars: int = 0, **evidence) -> Candidate:
        """A completion: `text` inserted at `offset`, writing over the `replace_chars` characters after it."""
        return cls(offset, offset + replace_chars, text, source, **evidence)

    @property
    def replace_chars(self) -> int:
        """The characters after the span's start that it writes over (a completion's, on the cursor's line)."""
        return self.end - self.start

    def apply(self, doc: str) -> str:
        return doc[:self.start] + self.text + doc[self.end:]

    def same(self, other: Candidate, doc: str) -> bool:
        """Whether the two leave `doc` the same."""
        return self.apply(doc) == other.apply(doc)


@dataclass(frozen=True)
class Choice:
    """What a request shows, if anything, and why."""

    shown: Candidate | None  # None: nothing
    p: float | None  # its P; None: chosen by the rules (no acceptance model, or a source it was not measured on)
    scored: list[tuple[Candidate, float]]  # every candidate with its P (empty under the rules)
    feats: dict[str, float] | None = None  # the shown candidate's features (None under the rules)
