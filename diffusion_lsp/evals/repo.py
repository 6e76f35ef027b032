"""`diffusion-lsp eval repo REPO`: single-line completion on a repository's held-out files, as the
editor asks for it, for each way of answering side by side.

A case is a non-blank line of a held-out file (data/repo.py) picked at random: the line's text is
taken out (its line break stays), the cursor sits after its indentation, and the rest of the file
is there, as when a user writes a line into existing code. The rows:
- copy-previous-line: the line above, again (the trivial baseline);
- drafts alone: the first draft from the file itself (context/drafts.py), shown unverified;
- model: the server's context (context/gather.py) and fill, no drafts;
- model + drafts: the same with the drafts, verified by the model (model/verify.py).
Exact match and edit similarity are of the whole line the system writes; "shown" is what the server
would show with completion.confidenceCut (a fill cut at its first doubted token, nothing when its
first is doubted): the share of cases with something shown, and the share shown and exactly right.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import statistics
import time
from dataclasses import dataclass, field

from ..backend.orders import FillOrder
from ..context.drafts import drafts_for
from ..context.gather import gather
from ..context.records import ContextBudget, Document
from ..data.repo import SourceFile, repo_files
from ..errors import UserError
from ..options import add_launch_args, engine_for, launch_settings
from ..server.completion import finish
from ..server.config import CompletionSettings
from .metrics import edit_similarity, exact_match


def register(ev):
    r = ev.add_parser("repo", help="single-line completion on a repository's held-out files: the model, "
                                   "drafts from the code, both, beside copy-previous-line")
    r.add_argument("repo", metavar="REPO", help="a repository or source folder")
    r.add_argument("--lines", type=int, default=200, help="lines to complete (default 200)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", action="store_true", help="print one JSON object")
    add_launch_args(r)
    r.set_defaults(run=run)


@dataclass
class Case:
    doc: Document
    offset: int
    line: str  # the line's text after its indentation
    previous: str  # the nearest non-blank line above, stripped


@dataclass
class Row:
    name: str
    guesses: list[str] = field(default_factory=list)  # the whole line written
    shown: list[str] = field(default_factory=list)  # what the server would show ("" when nothing)
    forwards: int = 0
    tokens: int = 0
    ms: list[float] = field(default_factory=list)

    def report(self, cases: list[Case]) -> dict:
        lines = [c.line for c in cases]
        n = max(len(cases), 1)
        out = {"exact_match": sum(map(exact_match, self.guesses, lines)) / n,
               "edit_similarity": sum(map(edit_similarity, self.guesses, lines)) / n}
        if self.shown:
            out["shown"] = sum(bool(s.strip()) for s in self.shown) / n
            out["shown_exact"] = sum(bool(s.strip()) and exact_match(s, x) for s, x in zip(self.shown, lines)) / n
        if self.tokens:
            out["forwards_per_token"] = self.forwards / self.tokens
        if self.ms:
            out["p50_ms"] = statistics.median(self.ms)
        return out


def pick_cases(files: list[SourceFile], n: int, rng: random.Random) -> list[Case]:
    """n lines spread uniformly over the held-out files' non-blank lines (all of them when fewer)."""
    spots = []
    for k, f in enumerate(files):
        lines = f.text.split("\n")
        spots += [(k, i) for i in range(1, len(lines)) if len(lines[i].strip()) >= 2]
    cases = []
    for k, i in sorted(rng.sample(spots, min(n, len(spots)))):
        f = files[k]
        lines = f.text.split("\n")
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        start = sum(len(x) + 1 for x in lines[:i])
        text = f.text[:start] + indent + f.text[start + len(line):]
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        cases.append(Case(Document(f"file:///{f.path}", text, f.language), start + len(indent), line.strip(),
                          previous))
    return cases


async def _model_row(name: str, backend, cases: list[Case], settings: CompletionSettings, drafts: bool) -> Row:
    row = Row(name)
    for i, c in enumerate(cases):
        ctx = gather(c.doc, c.offset, budget=ContextBudget.split(settings.max_context_tokens))
        candidates = tuple(d.text for d in drafts_for(c.doc, c.offset)) if drafts else ()
        t0 = time.perf_counter()
        fill = await backend.fill(f"{name}-{i}", FillOrder(ctx.prefix, ctx.suffix, ctx.max_tokens, one_line=True,
                                                         candidates=candidates))
        row.ms.append((time.perf_counter() - t0) * 1e3)
        row.forwards, row.tokens = row.forwards + fill.forwards, row.tokens + fill.tokens
        row.guesses.append(fill.text.split("\n", 1)[0])
        sug, _ = finish(ctx, fill, settings.confidence_cut, settings.reject_parse_errors)
        row.shown.append("" if sug is None else sug.text.split("\n", 1)[0])
    return row


def measure(engine_load, cases: list[Case], settings: CompletionSettings) -> list[Row]:
    """The model rows for one engine: without drafts, then with them verified."""
    from ..backend.local import LocalBackend

    backend = LocalBackend.loading(engine_load)

    async def both():
        try:
            return [await _model_row("model", backend, cases, settings, drafts=False),
                    await _model_row("model + drafts", backend, cases, settings, drafts=True)]
        finally:
            await backend.close()

    return asyncio.run(both())


def run(args) -> int:
    launch = launch_settings(args)
    files, skipped = repo_files(args.repo)
    held = [f for f in files if f.held_out]
    if not held:
        raise UserError(f"{args.repo}: no held-out source file among {len(files)} (need more files)")
    cases = pick_cases(held, args.lines, random.Random(args.seed))
    settings = CompletionSettings()
    rows = [Row("copy-previous-line", [c.previous for c in cases]),
            Row("drafts alone", [next(iter(d.text.strip() for d in drafts_for(c.doc, c.offset)), "") for c in cases])]
    rows += measure(functools.partial(engine_for, launch), cases, settings)
    result = {"repo": args.repo, "files": len(files), "held_out_files": len(held), "skipped": skipped,
              "lines": len(cases), "rows": {r.name: r.report(cases) for r in rows}}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.repo}: {len(files)} source files, {len(held)} held out; {len(cases)} lines")
    print(f"{'':22} {'exact':>7} {'edit sim':>9} {'shown':>7} {'shown+right':>12} {'fwd/tok':>8} {'p50 ms':>7}")
    for name, rep in result["rows"].items():
        cells = [f"{rep['exact_match']:7.1%}", f"{rep['edit_similarity']:9.1%}",
                 f"{rep['shown']:7.1%}" if "shown" in rep else f"{'':7}",
                 f"{rep['shown_exact']:12.1%}" if "shown_exact" in rep else f"{'':12}",
                 f"{rep['forwards_per_token']:8.2f}" if "forwards_per_token" in rep else f"{'':8}",
                 f"{rep['p50_ms']:7.0f}" if "p50_ms" in rep else f"{'':7}"]
        print(f"{name:22} " + " ".join(cells))
    return 0
