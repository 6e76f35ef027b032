"""`diffusion-lsp eval repo REPO`: single-line completion on a repository's held-out files, as the
editor asks for it, for each way of answering side by side.

A case is a non-blank line of a held-out file (context/repo.py) picked at random: the line's text is
taken out (its line break stays), the cursor sits after its indentation, and the rest of the file
is there, as when a user writes a line into existing code. The rows:
- copy-previous-line: the line above, again (the trivial baseline);
- drafts alone: the first draft from the file itself (context/drafts.py), shown unverified;
- model: the server's context (context/gather.py) and fill, no drafts;
- model + drafts: the same with the drafts, verified by the model (model/decoding/verify.py).
Then what the server would show on as many held-out lines retyped as a user writes them (retype.py:
at the indentation, or mid-line): each candidate's source alone, and the acceptance model's choice
(acceptance/chooser.py) with its precision / coverage table over the bar.
Exact match and edit similarity are of the whole line the system writes; "shown" is what the server
would show with completion.confidenceCut (a fill cut at its first doubted token, nothing when its
first is doubted): the share of cases with something shown, and the share shown and exactly right.

Beside them, for each model: next edits replayed from the held-out files' recent commits
(repo_edits.py) beside repeating the last edit, and the masked-token loss on held-out crops. With
--adapt-minutes the model is also adapted to the other files (train/adapt.py) and measured the same
way; `diffusion-lsp adapt` prints the same comparison, base before and adapted after.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import jsonout
from ..protocol.requests import FillRequest
from ..context.drafts import drafts_for
from ..context.gather import gather
from ..context.records import ContextBudget, Document
from ..context.repo import SourceFile, repo_files
from ..context.tokens import model_token_counter
from ..engine import model_folder
from ..errors import UserError
from ..input_files import InputFile
from ..options import add_launch_args, engine_for, launch_settings
from ..server.completion import finish
from ..server.config import CompletionSettings
from ..acceptance.model import FILE as ACCEPTANCE_FILE
from ..acceptance.model import AcceptanceModel
from . import calibrate, retype
from .edits_command import acceptance_file
from .heldout import MASK_RATES, masked_token_loss
from .metrics import edit_similarity, exact_match, rates_head, rates_row
from .repo_edits import baseline_row, history_cases
from .repo_edits import model_row as edits_row

LOSS_CROPS, LOSS_SEQ = 32, 256  # held-out crops for the masked-token loss, and their length in tokens


def register(ev):
    r = ev.add_parser("repo", help="single-line completion on a repository's held-out files: the model, "
                                   "drafts from the code, both, beside copy-previous-line")
    r.add_argument("repo", metavar="REPO", help="a repository or source folder")
    r.add_argument("--lines", type=int, default=200, help="lines to complete (default 200)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--no-next-edits", action="store_true",
                   help="skip the next edits replayed from the held-out files' git history")
    r.add_argument("--adapt-minutes", type=float, default=0, metavar="N",
                   help="also adapt the model to the repository's other files for N minutes "
                        "(`diffusion-lsp adapt`) and measure the adapted model beside it")
    r.add_argument("--adapt-out", metavar="DIR", help="where --adapt-minutes puts the adapted model "
                                                      "(default: a new temporary folder)")
    r.add_argument("--acceptance", metavar="FILE", type=InputFile, help="the acceptance model that decides what is shown "
                                                       "(default: the one beside the model's weights)")
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
    cases = []
    for f, lines, i in retype.sample_lines(files, n, rng):
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        start = sum(len(x) + 1 for x in lines[:i])
        text = f.text[:start] + indent + f.text[start + len(line):]
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        cases.append(Case(Document(f"file:///{f.path}", text, f.language), start + len(indent), line.strip(),
                          previous))
    return cases


def _bar(items: list, desc: str, progress: bool):
    """`items` with a progress bar on stderr when `progress` (tqdm is the training loop's too)."""
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="case", file=sys.stderr, leave=False, disable=not progress or None)


async def _model_row(name: str, backend, cases: list[Case], settings: CompletionSettings, drafts: bool,
                     progress: bool = False) -> Row:
    row = Row(name)
    for i, c in enumerate(_bar(cases, name, progress)):
        ctx = gather(c.doc, c.offset, budget=ContextBudget.split(settings.max_context_tokens))
        candidates = tuple(d.text for d in drafts_for(c.doc, c.offset)) if drafts else ()
        t0 = time.perf_counter()
        fill = await backend.fill(f"{name}-{i}", FillRequest(ctx.prefix, ctx.suffix, ctx.max_tokens, one_line=True,
                                                         candidates=candidates))
        row.ms.append((time.perf_counter() - t0) * 1e3)
        row.forwards, row.tokens = row.forwards + fill.forwards, row.tokens + fill.tokens
        row.guesses.append(fill.text.split("\n", 1)[0])
        sug, _ = finish(ctx, fill, settings.confidence_cut, settings.reject_parse_errors)
        row.shown.append("" if sug is None else sug.text.split("\n", 1)[0])
    return row


@dataclass(frozen=True)
class Material:
    """What every model is measured on: the single lines, the same number of lines retyped as a user
    writes them (at the indentation or mid-line), the next edits from the git history and
    the held-out texts for the masked-token loss."""

    cases: list[Case]
    steps: list  # EditStep
    texts: list[str]
    seed: int = 0
    retyped: list = field(default_factory=list)  # retype.Case


def material(root, files: list[SourceFile], lines: int, seed: int = 0, next_edits: bool = True) -> Material:
    held = [f for f in files if f.held_out]
    if not held:
        raise UserError(f"{root}: no held-out source file among {len(files)} (need more files)")
    steps = history_cases(root, files, seed=seed) if next_edits else []
    return Material(pick_cases(held, lines, random.Random(seed)), steps, [f.text for f in held], seed,
                    retype.pick(held, lines, random.Random(seed + 1)))


def baselines(m: Material) -> tuple[dict, dict]:
    """(single-line rows, next-edit rows) of the ways of answering that need no model."""
    rows = [Row("copy-previous-line", [c.previous for c in m.cases]),
            Row("drafts alone", [next(iter(d.text.strip() for d in drafts_for(c.doc, c.offset)), "")
                                 for c in m.cases])]
    return {r.name: r.report(m.cases) for r in rows}, ({"repeat last edit": baseline_row(m.steps)} if m.steps else {})


def _loss(engine, texts: list[str], seed: int) -> dict | None:
    """Masked-token loss on held-out crops (eval heldout's), the same crops and masks for every
    model of one material; None when no held-out file is long enough."""
    try:
        return masked_token_loss(engine, [{"text": t} for t in texts], LOSS_CROPS, LOSS_SEQ, random.Random(seed))
    except UserError:
        return None


def shown_rows(judged: list, acceptance: AcceptanceModel | None) -> dict:
    """What the server would show on the retyped lines: each source alone, and the acceptance model's
    choice at its bar with the precision / coverage table over the bar."""
    out = {f"{s} alone": calibrate.by_source(judged, s) for s in ("model", "lookup", "line")}
    if acceptance is None:
        return {"rows": out, "acceptance": None, "table": []}
    picks = [k for k, _ in calibrate.shown(judged, acceptance, acceptance.show_above)]
    out[f"acceptance (P >= {acceptance.show_above:g})"] = calibrate.rates(judged, picks)
    return {"rows": out, "acceptance": acceptance.origin, "table": calibrate.over_bars(judged, acceptance)}


def measure(name: str, engine_load, count, m: Material, settings: CompletionSettings, progress: bool = False,
            acceptance: AcceptanceModel | None = None) -> dict:
    """One model's figures: {"rows": its single-line rows without and with drafts, "shown": what the
    server would show on the retyped lines, "next_edits": its next-edit row, "loss": its masked-token
    loss}."""
    from ..backend.local import LocalBackend

    backend = LocalBackend.loading(engine_load)
    loss = backend.on_model_thread(_loss, backend.engine, m.texts, m.seed)

    async def rows():
        try:
            plain = await _model_row(name, backend, m.cases, settings, False, progress)
            drafted = await _model_row(f"{name} + drafts", backend, m.cases, settings, True, progress)
            judged = await retype.judge(backend, m.retyped, count=count, progress=progress, key=f"{name}: retyped")
            edits = await edits_row(backend, _bar(m.steps, f"{name}: next edits", progress), count) if m.steps else None
            return {r.name: r.report(m.cases) for r in (plain, drafted)}, shown_rows(judged, acceptance), edits
        finally:
            await backend.close()

    single, shown, edits = asyncio.run(rows())
    return {"rows": single, "shown": {name: shown}, "next_edits": {} if edits is None else {name: edits},
            "loss": {name: loss}}


def compare(m: Material, models: list[tuple], settings: CompletionSettings | None = None,
            progress: bool = False) -> dict:
    """The baselines and each (name, engine loader, token counter, acceptance model or None) of
    `models`, side by side (`progress`: a bar per row on stderr)."""
    settings = settings or CompletionSettings()
    single, edits = baselines(m)
    out = {"rows": single, "shown": {}, "next_edits": edits, "loss": {}}
    for name, load, count, acceptance in models:
        got = measure(name, load, count, m, settings, progress, acceptance)
        for key in out:
            out[key].update(got[key])
    return out


def print_report(title: str, m: Material, result: dict, file=None) -> None:
    file = file or sys.stdout
    print(title, file=file)
    print(f"single-line completion, {len(m.cases)} lines of held-out files", file=file)
    print(f"{'':24} {'exact':>7} {'edit sim':>9} {'shown':>7} {'shown+right':>12} {'fwd/tok':>8} {'p50 ms':>7}",
          file=file)
    for name, rep in result["rows"].items():
        cells = [f"{rep['exact_match']:7.1%}", f"{rep['edit_similarity']:9.1%}",
                 f"{rep['shown']:7.1%}" if "shown" in rep else f"{'':7}",
                 f"{rep['shown_exact']:12.1%}" if "shown_exact" in rep else f"{'':12}",
                 f"{rep['forwards_per_token']:8.2f}" if "forwards_per_token" in rep else f"{'':8}",
                 f"{rep['p50_ms']:7.0f}" if "p50_ms" in rep else f"{'':7}"]
        print(f"{name:24} " + " ".join(cells), file=file)
    if result["next_edits"]:
        print(f"next edits, {len(m.steps)} from the held-out files' git history", file=file)
        print(f"{'':24} {'exact':>7} {'partial':>9} {'position':>9} {'edit rate':>10}", file=file)
        for name, r in result["next_edits"].items():
            print(f"{name:24} {r['exact']:7.1%} {r['partial']:9.1%} {r['position']:9.1%} {r['edit_rate']:10.1%}",
                  file=file)
    elif not m.steps:
        print("next edits: none measured (no git history of the held-out files)", file=file)
    for name, got in result.get("shown", {}).items():
        print_shown(f"{name}: what is shown, {len(m.retyped)} held-out lines retyped (at the indentation or "
                    f"mid-line); acceptance model: {got['acceptance'] or 'none (the rules)'}", got, file)
    losses = {k: v for k, v in result["loss"].items() if v}
    if losses:
        print("masked-token loss on held-out crops (nats; lower is better)", file=file)
        print(f"{'':24} " + " ".join(f"{f'{r:.0%} masked':>11}" for r in MASK_RATES), file=file)
        for name, loss in losses.items():
            print(f"{name:24} " + " ".join(f"{loss[f'loss@{r}']:11.3f}" for r in MASK_RATES), file=file)


def print_shown(title: str, got: dict, file) -> None:
    print(title, file=file)
    columns = ("shown", "exact", "precision", "partly", "wrong")
    print(rates_head(24, columns), file=file)

    def line(name: str, r: dict) -> None:
        print(rates_row(name, r, 24, columns), file=file)

    for name, r in got["rows"].items():
        line(name, r)
    if got["table"]:
        print("  precision / coverage over the bar:", file=file)
        for r in got["table"][1::2]:
            line(f"    P >= {r['bar']:.2f}", r)


def acceptance_of(folder: Path, file: InputFile | None) -> AcceptanceModel | None:
    """--acceptance FILE, else the one beside the model's weights, else None (the rules)."""
    if file is None and not (folder / ACCEPTANCE_FILE).exists():
        return None
    return acceptance_file(file or InputFile(str(folder / ACCEPTANCE_FILE)))


def run(args) -> int:
    launch = launch_settings(args)
    files, skipped = repo_files(args.repo)
    m = material(args.repo, files, args.lines, args.seed, next_edits=not args.no_next_edits)
    count = model_token_counter(model_folder(launch.path))
    models = [("model", functools.partial(engine_for, launch), count,
               acceptance_of(model_folder(launch.path), args.acceptance))]
    adapted = None
    if args.adapt_minutes:
        from ..train.adapt import Plan, adapt

        out = Path(args.adapt_out or tempfile.mkdtemp(prefix="diffusion-lsp-adapt-"))
        adapted = adapt(Plan(Path(args.repo), model_folder(launch.path), out, args.adapt_minutes), files,
                        progress=not args.json)
        models.append(("adapted", functools.partial(engine_for, dataclasses.replace(launch, path=str(out))),
                       count, acceptance_of(out, args.acceptance)))
    result = {"repo": args.repo, "files": len(files), "held_out_files": sum(f.held_out for f in files),
              "skipped": skipped, "lines": len(m.cases), "next_edit_cases": len(m.steps),
              **compare(m, models), "adapted": adapted}
    if args.json:
        print(jsonout.dumps(result))
        return 0
    print_report(f"{args.repo}: {len(files)} source files, {result['held_out_files']} held out", m, result)
    return 0
