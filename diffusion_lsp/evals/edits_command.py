"""`diffusion-lsp eval edits REPO...`: what the server would show as the next edit on replayed
commits (edit_replay.py), judged against the rest of each commit, source by source, by the rules and
by the next-edit acceptance model; `calibrate --edits REPO...` fits that model.

Figures are shares of the replayed cases: shown (a candidate was shown), right (what was shown makes
the lines it touches read as the commit has them), wrong (shown and not right), precision (right
among shown)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path

from .. import jsonout
from ..acceptance.chooser import shown_index
from ..acceptance.edits import EDIT_FEATURES
from ..acceptance.model import AcceptanceModel, fit
from ..candidate import Kind, Request, Source
from ..errors import UserError
from ..input_files import InputFile, parse_json
from ..local_state import MAX_STATE_BYTES
from ..workspace_files import check_in, output_path, write_file, write_trusted
from . import saved_rows
from .edit_replay import JudgedEdit, judge_cases, replay_cases
from .metrics import rates_head, rates_row

# the bar: the one where right - WRONG_COST x wrong (shares of cases) is largest. A wrong next edit
# costs more than a right one saves (it rewrites code away from the cursor, to be read and undone).
# Leaving one of the five calibration repositories out at a time (the model and its bar from the
# other four, measured on it; next edits off), costs of 1 / 1.5 / 2 / 3 gave 4.6 / 3.7 / 2.0 / 1.1%
# right at 60 / 58 / 54 / 57% precision, where the rules gave 0.9% at 57%: more right edits at about
# the rules' precision, which differs more from one repository to the next than between the costs.
# A precision target of 0.8 picked bars from 0.7 to 0.85 on a dozen shown edits.
WRONG_COST = 2.0
BARS = [round(0.05 * i, 2) for i in range(1, 20)]
CASES = 300  # cases per repository
FOLLOWED = tuple(s for s in Request.EDIT.sources if s.followed)  # the rules, next edits off: the change's own sites
MODELS = tuple(s for s in Request.EDIT.sources if s.kind is Kind.MODEL)  # ... and with them on, then the model's


def register(ev) -> None:
    e = ev.add_parser("edits", help="next edits on replayed commits: shown, right and wrong, by source, "
                                    "by the rules and by the acceptance model")
    e.add_argument("repos", nargs="*", metavar="REPO", help="git work trees whose recent commits are replayed")
    add_replay_args(e)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--acceptance", metavar="FILE", type=InputFile,
                   help="a next-edit acceptance model (default: the model's own edit_acceptance.json)")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    from ..options import add_launch_args
    add_launch_args(e)
    e.set_defaults(run=run)


def add_replay_args(p) -> None:
    p.add_argument("--edit-cases", type=int, default=CASES, metavar="N",
                   help=f"cases replayed per repository (default {CASES})")
    p.add_argument("--no-model", action="store_true", help="only the candidates that need no model")
    p.add_argument("--save-edits", metavar="FILE", type=output_path,
                   help="also write the judged candidates (JSON lines)")
    p.add_argument("--edits-from", metavar="FILE", type=InputFile, action="append", default=[],
                   help="judged candidates saved by --save-edits instead of replaying (repeatable)")


def rates(judged: list[JudgedEdit], picks: list[int | None]) -> dict:
    n = max(len(judged), 1)
    shown = sum(k is not None for k in picks)
    right = sum(k is not None and j.right[k] for j, k in zip(judged, picks))
    return {"shown": shown / n, "right": right / n, "precision": right / shown if shown else None,
            "wrong": (shown - right) / n, "n_shown": shown}


def first_of(judged: list[JudgedEdit], sources: tuple[Source, ...]) -> list[int | None]:
    """Per case, the first candidate from `sources` (the rules: the code's sites, then the model's)."""
    return [next((i for s in sources for i, o in enumerate(j.offers) if o.source is s), None) for j in judged]


def accepted(judged: list[JudgedEdit], model: AcceptanceModel, bar: float) -> list[int | None]:
    """Per case, the candidate the acceptance model shows at `bar`, as the server picks it."""
    return [shown_index(model, j.offers, [model.p(f) for f in j.feats], bar) for j in judged]


def view(judged: list[JudgedEdit]) -> list[JudgedEdit]:
    """The cases as the server sees them with next edits off (the default for a model that does not
    claim them): the candidates of every kind but the model's."""
    out = []
    for j in judged:
        keep = [i for i, o in enumerate(j.offers) if o.source.kind is not Kind.MODEL]
        out.append(JudgedEdit(j.case_id, j.repo, [j.offers[i] for i in keep], [j.feats[i] for i in keep],
                              [j.right[i] for i in keep]))
    return out


def over_bars(judged: list[JudgedEdit], model: AcceptanceModel) -> list[dict]:
    return [{"bar": b, **rates(judged, accepted(judged, model, b))} for b in BARS]


def pick_bar(table: list[dict], cost: float = WRONG_COST) -> float:
    """The bar where right - cost x wrong is largest (the higher bar of a tie)."""
    return max(table, key=lambda r: (r["right"] - cost * r["wrong"], r["bar"]))["bar"] if table else 0.5


def calibrated(judged: list[JudgedEdit], fitted_on: dict) -> tuple[AcceptanceModel, list[dict]]:
    rows = [f for j in judged for f in j.feats]
    labels = [y for j in judged for y in j.right]
    if not any(labels) or all(labels):
        raise UserError(f"cannot fit on {len(rows)} candidates with {sum(labels)} right: replay more commits "
                        "(--edit-cases) or other repositories")
    seen = Counter(o.source.value for j in judged for o in j.offers)
    fitted_on = {**fitted_on, "candidates": len(rows), "right": sum(labels), "seen": dict(sorted(seen.items()))}
    model = AcceptanceModel(fitted(rows, labels, EDIT_FEATURES), 0.5, "right", fitted_on, kind="edit")
    table = over_bars(view(judged), model)  # the bar is set where users are: next edits off
    return dataclasses.replace(model, show_above=pick_bar(table)), table


def fitted(rows: list[dict], labels: list[bool], names) -> dict[str, float]:
    """`fit`, refused in one line (UserError) when it gives weights the server would refuse."""
    try:
        return fit(rows, labels, names=names)
    except ValueError as e:
        raise UserError(f"cannot fit on {len(rows)} candidates: {e}") from None


def destination(args, name: str) -> tuple[Path | None, Path]:
    """(the workspace or None, where calibrate's model goes): --out anywhere, else
    FOLDER/.diffusion-lsp/acceptance/`name`, checked now by workspace_files (a link the repository
    brought, or a FIFO where the file goes, is refused before minutes of replaying)."""
    from ..acceptance.model import WORKSPACE_DIR

    for flag, saved in (("--save-cases", getattr(args, "save_cases", None)), ("--save-edits", args.save_edits)):
        if saved:  # the other files it writes, checked now too
            check_in(Path(saved).parent, Path(saved).name, flag=flag)
    if args.out:
        out = Path(args.out)
        check_in(out.parent, out.name)
        return None, out
    check_in(args.folders[0], WORKSPACE_DIR / name)
    return Path(args.folders[0]), Path(args.folders[0]) / WORKSPACE_DIR / name


def written(model: AcceptanceModel, out: Path, workspace: Path | None) -> bool | None:
    """Write `model` to `out` once its bytes load as the server loads them (local_state.read_state's
    reader and cap, then AcceptanceModel.from_json), through workspace_files, and record it for
    `workspace` only then -> whether it was recorded (None: --out, never recorded). One line
    (UserError) when the server would not use it: nothing is written then."""
    text = json.dumps(model.to_json(), indent=1) + "\n"
    try:
        if len(text.encode("utf-8")) > MAX_STATE_BYTES:
            raise ValueError(f"{len(text.encode('utf-8')):,} bytes, more than the {MAX_STATE_BYTES:,} it reads")
        AcceptanceModel.from_json(parse_json(text, str(out)), str(out), model.kind)
    except ValueError as e:
        raise UserError(f"{out}: refused: the server would not load this model ({e})") from None
    if workspace is None:
        write_file(out, text)
        trusted = None
    else:
        trusted = write_trusted(workspace, out.relative_to(workspace), text)[1]
    try:  # and what was written, read back by the server's own loader, before anyone says "wrote"
        AcceptanceModel.load(out, model.kind)
    except ValueError as e:
        raise UserError(f"{out}: written, but the server would not load it ({e})") from None
    return trusted


def collect(args, launch, cases: list | None = None) -> list[JudgedEdit]:
    """The judged candidates of --edits-from files and of the repositories' cases (`cases`, else
    replayed now)."""
    judged = []
    for file in args.edits_from:
        judged += saved_rows.records(file, JudgedEdit.from_json, "saved next-edit candidates")
    cases = replayed(args) if cases is None else cases
    if not cases:
        return judged
    fresh = asyncio.run(_judge(cases, None if args.no_model else launch, progress=not args.json))
    if args.save_edits:
        write_file(args.save_edits, "".join(json.dumps(j.to_json()) + "\n" for j in fresh), "--save-edits")
    return judged + fresh


def replayed(args) -> list:
    """The cases of the repositories named (REPO... or calibrate's FOLDER...), each its own seed."""
    cases = []
    for k, repo in enumerate(getattr(args, "repos", None) or getattr(args, "folders", [])):
        found = replay_cases(repo, args.edit_cases, args.seed + k)
        if not found:
            raise UserError(f"{repo}: no commit to replay (a git work tree with commits that change source "
                            "files in two places or more)")
        cases += found
    return cases


async def _judge(cases, launch, progress: bool) -> list[JudgedEdit]:
    if launch is None:
        return await judge_cases(cases, progress=progress)
    from ..context.tokens import approx_tokens, model_token_counter
    from ..engine import model_folder
    from ..nextedit.settings import NextEditSettings
    from ..options import command_backend

    backend = command_backend(launch)
    count = approx_tokens if launch.backend == "openai" else model_token_counter(model_folder(launch.path))
    try:
        return await judge_cases(cases, backend, count, NextEditSettings(enable=True), progress)
    finally:
        await backend.close()


def report(judged: list[JudgedEdit], model: AcceptanceModel | None) -> dict:
    """Each source alone; by the rules and by `model`, with the model's next edits off (the default:
    candidates from the code alone) and on (nextEdit.enable, when the model's were replayed)."""
    present = [s for s in Request.EDIT.sources if any(o.source is s for j in judged for o in j.offers)]
    out = {"cases": len(judged), "sources": {s.value: rates(judged, first_of(judged, (s,))) for s in present},
           "rules, next edits off (default): the change's own sites": rates(judged, first_of(judged, FOLLOWED))}
    if model is not None:
        out[f"acceptance, next edits off (default; P >= {model.show_above:g})"] = rates(
            judged, accepted(view(judged), model, model.show_above))
    if any(s in present for s in MODELS):
        out["rules, nextEdit.enable: those, else the model's"] = rates(judged, first_of(judged, FOLLOWED + MODELS))
        if model is not None:
            out[f"acceptance, nextEdit.enable (P >= {model.show_above:g})"] = rates(
                judged, accepted(judged, model, model.show_above))
    if model is not None:
        out["bars (next edits off)"] = over_bars(view(judged), model)
    return out


def print_report(title: str, got: dict, file=None) -> None:
    file = file or sys.stdout
    print(title, file=file)
    columns = ("shown", "right", "wrong", "precision")
    print(rates_head(62, columns), file=file)

    def line(name: str, r: dict) -> None:
        print(rates_row(name, r, 62, columns), file=file)

    for s, r in got["sources"].items():
        line(f"{s} alone (whenever there is one)", r)
    for name, r in got.items():
        if name.startswith(("rules", "acceptance", "through")):
            line(name, r)
    for r in got.get("bars (next edits off)", []):
        line(f"  P >= {r['bar']:.2f}", r)


def edit_acceptance(file: InputFile | None, launch) -> AcceptanceModel | None:
    """--acceptance FILE, else the model's own edit_acceptance.json, read as the server reads it."""
    from ..acceptance.model import EDIT_FILE
    from ..engine import model_folder

    if file is None:
        folder = model_folder(launch.path) if launch.backend == "local" else None
        if folder is None or not (Path(folder) / EDIT_FILE).is_file():
            return None
        file = InputFile(str(Path(folder) / EDIT_FILE))
    return acceptance_file(file, "edit")


def acceptance_file(file: InputFile, kind: str = "completion") -> AcceptanceModel:
    """The acceptance model in `file`, read by input_files with the server's cap; one line naming
    the file (Refused or UserError) when it cannot be used."""
    raw = file.read_json(MAX_STATE_BYTES)
    try:
        return AcceptanceModel.from_json(raw, str(file), kind)
    except ValueError as e:
        raise UserError(f"{file}: {e}") from None


def calibrate(args, launch) -> dict:
    """`calibrate --edits`: fit the next-edit acceptance model on the replayed commits and save it."""
    from ..acceptance.model import EDIT_FILE

    workspace, out = destination(args, EDIT_FILE)
    judged = collect(args, launch)
    fitted_on = {"repos": sorted({j.repo for j in judged}), "cases": len(judged),
                 "model": launch.remote_model if launch.backend == "openai" else (launch.path or "embedded")}
    model, table = calibrated(judged, fitted_on)
    trusted = written(model, out, workspace)  # the server uses it there
    got = {"out": str(out), "show_above": model.show_above, "weights": model.weights, "trusted": trusted,
           **report(judged, model)}
    if not args.json:
        print_report(f"{len(judged)} replayed commit steps; the next-edit model's bar: P >= {model.show_above:g}",
                     got)
        weights = sorted(model.weights.items(), key=lambda kv: -abs(kv[1]))
        print("weights (largest first): " + ", ".join(f"{n} {w:+.2f}" for n, w in weights[:12]))
        print(f"wrote {out}" + (" (the server uses it in this workspace)" if trusted else ""))
    return got


def run(args) -> int:
    from ..options import launch_settings

    if not args.repos and not args.edits_from:
        raise UserError("give a REPO (a git work tree) to replay, or --edits-from FILE")
    launch = launch_settings(args)
    if args.save_edits:  # refused now, not after the replay
        check_in(Path(args.save_edits).parent, Path(args.save_edits).name, flag="--save-edits")
    model = edit_acceptance(args.acceptance, launch)
    cases = replayed(args)
    judged = collect(args, launch, cases)
    got = report(judged, model)
    if args.json:
        print(jsonout.dumps(got))
    else:
        names = sorted({j.repo for j in judged})
        print_report(f"Next edits on {len(judged)} replayed commit steps of {', '.join(names)}", got)
    return 0
