"""Lines of real code retyped as a user writes them, and every candidate the server would weigh at
each, with its features and whether it was right: the material `diffusion-lsp calibrate` fits an
acceptance model on, and `eval repo` reports.

A case is a non-blank line of a source file picked at random: the cursor is at its indentation
(a new line) or, half the time, after a random word of it (the user typed that far), and the rest
of the line is taken out (its line break stays); the rest of the file is there. At each case the
candidates are made as the server makes them (server/completion.py): the context, the drafts from
the file, one fill with the server's settings (the drafts verified where the backend can score),
the fill cut by post-processing. A candidate is exactly right when it writes the rest of the line
(trailing blanks aside), and partly right when the rest of the line starts with it."""

from __future__ import annotations

import random
import re
import sys
import time
from dataclasses import dataclass, field

from ..acceptance.completion_candidates import offers
from ..acceptance.features import Spot, features
from ..context.drafts import drafts_for
from ..context.gather import gather
from ..candidate import Candidate, Request
from ..context.records import ContextBudget, Document
from ..context.repo import SourceFile
from ..server.completion import finish, fill_request
from ..server.config import Config
from . import saved_rows

_STOPS = re.compile(r"\w+|[^\w\s]")  # a word or one punctuation character: where a user may pause


@dataclass
class Case:
    doc: Document
    offset: int
    truth: str  # the rest of the line, which the user would type
    typed: str  # what is typed of the line before the cursor (after its indentation)
    package: str = ""


def sample_lines(files: list[SourceFile], n: int, rng: random.Random):
    """(file, its lines, a line number) for n lines spread uniformly over the files' lines of two or
    more non-blank characters (the first line of each file aside; all of them when fewer), in order."""
    spots = []
    for k, f in enumerate(files):
        lines = f.text.split("\n")
        spots += [(k, i) for i in range(1, len(lines)) if len(lines[i].strip()) >= 2]
    for k, i in sorted(rng.sample(spots, min(n, len(spots)))):
        yield files[k], files[k].text.split("\n"), i


def pick(files: list[SourceFile], n: int, rng: random.Random, package: str = "", mid: float = 0.5) -> list[Case]:
    """n cases spread uniformly over the files' non-blank lines; a share `mid` of them mid-line."""
    cases = []
    for f, lines, i in sample_lines(files, n, rng):
        line = lines[i]
        body = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        cut = 0
        if rng.random() < mid:
            stops = [m.end() for m in _STOPS.finditer(body) if m.end() < len(body)]
            cut = rng.choice(stops) if stops else 0
        start = sum(len(x) + 1 for x in lines[:i])
        typed = body[:cut]
        text = f.text[:start] + indent + typed + f.text[start + len(line):]
        cases.append(Case(Document(f"file:///{f.path}", text, f.language), start + len(indent) + len(typed),
                          body[cut:].rstrip(), typed, package))
    return cases


def exact(text: str, truth: str) -> bool:
    return text.rstrip() == truth.rstrip() and bool(text.strip())


def partly(text: str, truth: str) -> bool:
    t = text.rstrip()
    return bool(t.strip()) and truth.startswith(t)


@dataclass
class Judged:
    """One case's candidates, their features and labels."""

    case: Case
    offers: list[Candidate] = field(default_factory=list)
    feats: list[dict] = field(default_factory=list)
    exact: list[bool] = field(default_factory=list)
    partly: list[bool] = field(default_factory=list)
    ms: float = 0.0

    def to_json(self) -> dict:
        return {"package": self.case.package, "truth": self.case.truth, "typed": self.case.typed,
                "offers": [{"text": o.text, "source": o.source.value} for o in self.offers],
                "feats": self.feats, "exact": self.exact, "partly": self.partly}

    @classmethod
    def from_json(cls, raw: dict) -> Judged:
        """ValueError saying which field is wrong (the saved_rows checks)."""
        offers = saved_rows.listed(raw, "offers")
        if not all(isinstance(o, dict) for o in offers):
            raise ValueError("'offers' must hold one object per candidate")
        n = len(offers)
        case = Case(Document("", "", ""), 0, saved_rows.text(raw, "truth"), saved_rows.text(raw, "typed"),
                    saved_rows.text(raw, "package", ""))
        return cls(case, [Candidate.at(0, saved_rows.text(o, "text"), saved_rows.source(o, Request.COMPLETION))
                          for o in offers],
                   saved_rows.features(raw, n), saved_rows.flags(raw, "exact", n), saved_rows.flags(raw, "partly", n))


async def judge(backend, cases: list[Case], cfg: Config | None = None, count=None, progress: bool = False,
                key: str = "retype") -> list[Judged]:
    """Every case's candidates through `backend`, as the server makes them with `cfg`."""
    from tqdm import tqdm  # kept off --help

    cfg = cfg or Config()
    cc = cfg.completion
    out = []
    probe = backend.capabilities.probe
    for i, c in enumerate(tqdm(cases, desc=key, unit="case", file=sys.stderr, leave=False,
                               disable=not progress or None)):
        ctx = gather(c.doc, c.offset, budget=ContextBudget.split(cc.max_context_tokens),
                     **({"count_tokens": count} if count else {}))
        drafts = drafts_for(c.doc, c.offset) if cc.drafts else []
        order = fill_request(cfg, ctx, ctx.max_tokens, cc.line_budget_ms,
                             candidates=tuple(d.text for d in drafts) if probe else ())
        t0 = time.perf_counter()
        fill = await backend.fill(f"{key}-{i}", order)
        ms = (time.perf_counter() - t0) * 1e3
        sug, _ = finish(ctx, fill, cc.confidence_cut, cc.reject_parse_errors)
        found = offers(sug, fill, drafts)
        spot = Spot.at(c.doc.text, c.offset, ctx.language)
        out.append(Judged(c, found, [features(o, spot, [x for x in found if x is not o]) for o in found],
                          [exact(o.text, c.truth) for o in found], [partly(o.text, c.truth) for o in found], ms))
    return out
