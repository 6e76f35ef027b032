"""What a next-edit rule is: one object with one signature, `(documents, history) -> Proposal`,
registered in rules.py's RULES. A rule reads what it needs of the open documents (`Documents`: the
text, its language, the cursor, the other open documents) and of what the user did (`History`: the
steps per document, the change each document's follow is following, the rules' budget), and
proposes candidates (candidate.py) of its one `Source`: the source's kind and whether it is the
change's own sites are the member's, so the acceptance model, the chooser and the table read them
from there.

A rule whose source is `followed` carries a change on (a rename at its sites, a signature at its
calls): its candidates are the change's sites from `history.budget.start` on (at most
budget.most), one candidate per site, in order, and the table groups them nearest the cursor
(rules.py). Its proposal names the `Change` it follows (a rename: scope.py; a signature: calls.py;
an argument: analogous.py; a wrapper removed: unwrap.py), which the server keeps per document
(`History.following`) so that the next request may go on with it. Any other rule's candidates
are shown as they are (a repeat of the last edit)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Protocol

from ..candidate import Candidate, Source
from ..context.languages import LanguageSpec
from .budget import UNBOUNDED, Budget
from .history import Step


class Change:
    """What the user changed that a followed rule carries on: a rename, a changed signature, an
    argument, a wrapper removed. Each rule knows its own change by its type; the server keeps the
    newest per document (History.following)."""

    __slots__ = ()


@dataclass(frozen=True)
class Other:
    """Another open document, as a rule may read it."""

    uri: str
    text: str
    module: str  # its file's name without its extension: what an import names it by


@dataclass(frozen=True)
class Documents:
    """The document being edited, where the cursor is, and the other open documents."""

    text: str
    spec: LanguageSpec
    cursor: int  # a str offset into text
    uri: str = ""
    others: tuple[Other, ...] = ()  # of the same language, the most recently edited first


@dataclass(frozen=True)
class History:
    """What the user did, as the rules read it."""

    steps: Mapping[str, Sequence[Step]]  # per document (its uri), oldest first
    following: Mapping[str, Change] = field(default_factory=dict)  # per document, the change followed last
    budget: Budget = field(default_factory=lambda: UNBOUNDED)  # the rules' bounds

    @classmethod
    def of_one(cls, steps: Sequence[Step], going_on: Change | None = None, budget: Budget = UNBOUNDED,
               uri: str = "") -> History:
        """The history of one document (`uri`) alone: its `steps` and the change `going_on` there."""
        return cls({uri: steps}, {uri: going_on} if going_on is not None else {}, budget)

    def of(self, uri: str) -> list[Step]:
        """`uri`'s steps, oldest first."""
        return list(self.steps.get(uri, ()))

    def going_on(self, uri: str) -> Change | None:
        """The change `uri`'s follow followed last, if any."""
        return self.following.get(uri)

    def at(self, start: int) -> History:
        """The same history, its walks for sites beginning at offset `start` (Budget.at)."""
        return replace(self, budget=self.budget.at(start))


@dataclass(frozen=True)
class Proposal:
    """What a rule proposes: its candidates, and the change they carry on (None: none, a repeat)."""

    candidates: tuple[Candidate, ...] = ()
    change: Change | None = None


NOTHING = Proposal()


class Rule(Protocol):
    """One next-edit rule: `source` says what its candidates are; `whole_step`: it is asked only
    when the document's newest step leaves no line half typed (rules.half_typed)."""

    source: ClassVar[Source]
    whole_step: ClassVar[bool]

    def __call__(self, documents: Documents, history: History) -> Proposal:
        ...


def site(start: int, end: int, text: str, source: Source, origin: str = "") -> Candidate:
    """One site of a followed change: [start, end) becomes `text`."""
    return Candidate(start, end, text, source, origin=origin)


def sites_of(spans: Sequence[tuple[int, int, str]], source: Source, origin: str = "") -> tuple[Candidate, ...]:
    """The sites (start, end, new text), in order, as candidates of `source`."""
    return tuple(site(s, e, new, source, origin) for s, e, new in spans)
