"""`diffusion-lsp calibrate FOLDER...`: fit the acceptance model that decides what the server shows,
for any checkpoint (--model DIR) or remote model (--backend openai ...), on any code.

Lines of the folders are retyped (retype.py), every candidate is scored as the server scores it,
and a logistic regression of "exactly right" is fitted on the candidates' features. Its bar
(`show_above`) is the lowest at which what would be shown on these lines is exactly right at least
TARGET_PRECISION of the time. With one FOLDER and no --out, the model goes to
FOLDER/.diffusion-lsp/acceptance/, recorded on this machine as made for that workspace, where the
server takes it up; --out writes it anywhere (beside a model's weights: acceptance.json).

Fit on code that no figure you report uses: the folders you calibrate on are tuning data."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

from .. import jsonout
from ..acceptance.features import FEATURES
from ..acceptance.model import FILE, AcceptanceModel
from ..context.repo import repo_files
from ..context.tokens import model_token_counter
from ..engine import model_folder
from ..errors import UserError
from ..input_files import InputFile
from ..workspace_files import output_path, write_file
from ..options import add_launch_args, command_backend, launch_settings
from ..acceptance.chooser import shown_index
from ..acceptance.feedback import read_feedback
from ..candidate import Candidate, Request, Source
from ..context.records import Document
from . import edits_command
from . import saved_rows
from .edits_command import add_replay_args
from .metrics import rates_head, rates_row
from .retype import Case, Judged, judge, pick

# the bar's target: what is shown is exactly right this often on the calibration lines. Chosen by
# leaving one calibration package out (click, rich, jinja2, trio, attrs; 300 lines each) and
# measuring it at each bar: 0.2 showed 28.6% of lines, 15.1% right, 53% precision, 13.5% wrong;
# 0.25 (the lowest bar reaching 0.6 on all five) 25.9%, 15.1%, 58.5%, 10.8%: as many right, fewer wrong
TARGET_PRECISION = 0.6
BARS = [round(0.05 * i, 2) for i in range(1, 20)]

LINES = 300  # lines retyped per folder
SHOWN_ALONE = (Source.MODEL, Source.LOOKUP, Source.LINE, Source.LAST)  # each source's rows, in this order
FEEDBACK = "feedback"  # the package of the rows read from the editor's feedback: one candidate each, the one shown


def register(sub) -> None:
    c = sub.add_parser("calibrate", help="fit the acceptance model that decides which completions are shown")
    c.add_argument("folders", nargs="*", metavar="FOLDER", help="source folders whose lines are retyped")
    c.add_argument("--lines", type=int, default=LINES, help=f"lines retyped per folder (default {LINES})")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--held-out", action="store_true",
                   help="only the folders' held-out files (those `adapt` does not train on)")
    c.add_argument("--out", metavar="FILE", type=output_path,
                   help="where the model goes (default with one FOLDER: FOLDER/.diffusion-lsp/acceptance/acceptance.json)")
    c.add_argument("--save-cases", metavar="FILE", type=output_path,
                   help="also write the scored candidates (JSON lines)")
    c.add_argument("--cases", metavar="FILE", type=InputFile, action="append", default=[],
                   help="fit on candidates saved by --save-cases instead of retyping (repeatable)")
    c.add_argument("--feedback", action="store_true",
                   help="also fit on what you accepted in your editor (kept on this machine by the language server)")
    c.add_argument("--edits", action="store_true",
                   help="fit the next-edit acceptance model instead: each FOLDER is a git work tree whose recent "
                        "commits are replayed (default out: FOLDER/.diffusion-lsp/acceptance/edit_acceptance.json)")
    add_replay_args(c)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    add_launch_args(c)
    c.set_defaults(run=run)


def shown(judged: list[Judged], model: AcceptanceModel, bar: float) -> list[tuple[int | None, float]]:
    """Per case, (the index of the candidate shown or None, the best P)."""
    out = []
    for j in judged:  # as the server picks
        ps = [model.p(f) for f in j.feats]
        out.append((shown_index(model, j.offers, ps, bar), max(ps, default=0.0)))
    return out


def rates(judged: list[Judged], picks: list[int | None]) -> dict:
    """Shown share, exactly right (share of all lines), precision, partly right and wrong shown."""
    n = max(len(judged), 1)
    shown_n = sum(k is not None for k in picks)
    right = sum(k is not None and j.exact[k] for j, k in zip(judged, picks))
    part = sum(k is not None and j.partly[k] for j, k in zip(judged, picks))
    return {"shown": shown_n / n, "exact": right / n, "precision": right / shown_n if shown_n else None,
            "partly": part / n, "wrong": (shown_n - right) / n}


def by_source(judged: list[Judged], source: Source) -> dict:
    """The rates when `source`'s candidate is shown whenever there is one. A feedback row holds only
    what was shown, not every source's candidate: it counts as nothing shown."""
    return rates(judged, [next((i for i, o in enumerate(j.offers) if o.source is source), None)
                          if j.case.package != FEEDBACK else None for j in judged])


def _feedback(feats: dict[str, float], kept: bool, partly: bool) -> Judged:
    """A row of the editor's feedback: the candidate shown (its source from its features), its
    features and what the user did with it."""
    source = next((s for s in Request.COMPLETION.sources if feats.get(f"source_{s.value}") == 1.0), Source.MODEL)
    return Judged(Case(Document("", "", ""), 0, "", "", FEEDBACK), [Candidate.at(0, "", source)], [feats],
                  [kept], [partly])


def over_bars(judged: list[Judged], model: AcceptanceModel) -> list[dict]:
    return [{"bar": b, **rates(judged, [k for k, _ in shown(judged, model, b)])} for b in BARS]


def pick_bar(table: list[dict], target: float = TARGET_PRECISION) -> float:
    """The lowest bar whose precision reaches `target`; the most precise one when none does."""
    ok = [r for r in table if r["precision"] is not None and r["precision"] >= target]
    if ok:
        return ok[0]["bar"]
    scored = [r for r in table if r["precision"] is not None]
    return max(scored, key=lambda r: r["precision"])["bar"] if scored else 0.5


def calibrated(judged: list[Judged], fitted_on: dict) -> tuple[AcceptanceModel, list[dict]]:
    rows = [f for j in judged for f in j.feats]
    labels = [y for j in judged for y in j.exact]
    if not rows or not any(labels) or all(labels):
        raise UserError(f"cannot fit on {len(rows)} candidates with {sum(labels)} exactly right: "
                        "retype more lines (--lines) or other folders")
    model = AcceptanceModel(edits_command.fitted(rows, labels, FEATURES), 0.5, "exact", fitted_on)
    table = over_bars(judged, model)
    return AcceptanceModel(model.weights, pick_bar(table), "exact",
                           {**fitted_on, "candidates": len(rows), "right": sum(labels)}), table


def collect(args, launch) -> list[Judged]:
    judged = []
    for file in args.cases:
        judged += saved_rows.records(file, Judged.from_json, "saved candidates")
    if args.feedback:
        judged += [_feedback(feats, kept, partly) for feats, kept, partly in read_feedback()]
    if not args.folders:
        return judged
    backend = command_backend(launch)
    count = model_token_counter(model_folder(launch.path)) if launch.backend == "local" else None
    cases = []
    for k, folder in enumerate(args.folders):
        files, _ = repo_files(folder)
        files = [f for f in files if f.held_out] if args.held_out else files
        if not files:
            raise UserError(f"{folder}: no source files to retype")
        cases += pick(files, args.lines, random.Random(args.seed + k), Path(folder).name)

    async def go():
        try:
            return await judge(backend, cases, count=count, progress=not args.json)
        finally:
            await backend.close()

    fresh = asyncio.run(go())
    if args.save_cases:
        write_file(args.save_cases, "".join(json.dumps(j.to_json()) + "\n" for j in fresh), "--save-cases")
    return judged + fresh


def _stray_options(args) -> None:
    """Options of the other model than the one fitted are refused, not ignored: `--edits-from FILE`
    without --edits fitted the completion model and said nothing of FILE."""
    given = ({"--edits-from": args.edits_from, "--save-edits": args.save_edits, "--no-model": args.no_model,
              "--edit-cases": args.edit_cases != edits_command.CASES} if not args.edits else
             {"--cases": args.cases, "--save-cases": args.save_cases, "--feedback": args.feedback,
              "--held-out": args.held_out, "--lines": args.lines != LINES})
    stray = [name for name, value in given.items() if value]
    if stray:
        raise UserError(f"{', '.join(stray)} " + ("belong to the next-edit model: add --edits" if not args.edits
                        else "belong to the completion model, not to --edits"))


def run(args) -> int:
    _stray_options(args)
    if args.edits:
        if not args.folders and not args.edits_from:
            raise UserError("give a FOLDER (a git work tree) to replay, or --edits-from FILE")
        if not args.out and len(args.folders) != 1:
            raise UserError("--out FILE is needed unless exactly one FOLDER is given")
        got = edits_command.calibrate(args, launch_settings(args))
        if args.json:
            print(jsonout.dumps(got))
        return 0
    if not args.folders and not args.cases and not args.feedback:
        raise UserError("give a FOLDER to retype, --cases FILE or --feedback")
    if not args.out and len(args.folders) != 1:
        raise UserError("--out FILE is needed unless exactly one FOLDER is given")
    launch = launch_settings(args)
    workspace, out = edits_command.destination(args, FILE)
    judged = collect(args, launch)
    fitted_on = {"folders": sorted({j.case.package for j in judged} | {Path(f).name for f in args.folders}),
                 "cases": len(judged),
                 "model": launch.remote_model if launch.backend == "openai" else (launch.path or "embedded")}
    model, table = calibrated(judged, fitted_on)
    trusted = edits_command.written(model, out, workspace)
    result = {"out": str(out), "show_above": model.show_above, "weights": model.weights, "table": table,
              "sources": {s.value: by_source(judged, s) for s in SHOWN_ALONE},
              "cases": len(judged), "trusted": trusted}
    if args.json:
        print(jsonout.dumps(result))
        return 0
    print_table(f"{len(judged)} lines retyped; the model's bar: P >= {model.show_above:g}", judged, model, table)
    print(f"wrote {out}" + (" (the server uses it in this workspace)" if trusted else ""))
    return 0


def print_table(title: str, judged: list[Judged], model: AcceptanceModel, table: list[dict], file=None) -> None:
    file = file or sys.stdout
    print(title, file=file)
    columns = ("shown", "exact", "precision", "partly", "wrong")
    print(rates_head(22, columns), file=file)

    def line(name: str, r: dict) -> None:
        print(rates_row(name, r, 22, columns), file=file)

    for s in SHOWN_ALONE:
        if any(o.source is s for j in judged if j.case.package != FEEDBACK for o in j.offers):
            line(f"{s.value} alone", by_source(judged, s))
    line(f"acceptance (P >= {model.show_above:g})", rates(judged, [k for k, _ in shown(judged, model, model.show_above)]))
    print("precision / coverage over the bar:", file=file)
    for r in table:
        line(f"  P >= {r['bar']:.2f}", r)
    weights = sorted(model.weights.items(), key=lambda kv: -abs(kv[1]))
    print("weights (largest first): " + ", ".join(f"{n} {w:+.2f}" for n, w in weights[:12]), file=file)
