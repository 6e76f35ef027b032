"""`diffusion-lsp eval nep`: next-edit prediction (Lu et al. 2025, arXiv 2508.10074) on nep_test.jsonl,
the model beside two baselines in one run (nep_baselines.py), the change's own sites, and what the
language server shows with next edits off (those and repeat-the-last-edit, judged by the next-edit
acceptance model: acceptance/edits.py; when the model has one), scored as the benchmark does
(nep_metrics.py).

A record needs `new_file` (its path and language), `old_contents` (before the commit's edits),
`current_contents` (after the earlier ones) and `new_contents` (after the next one), all strings;
`id` (str or int) names it, else its 0-based line in the file. An optional `cursor`,
`{"line": int, "character": int}` 0-based in current_contents, the character counted in Python str
characters, says where the user is; without one the cursor is where the last edit (old -> current)
ended, as an editor leaves it (history.last_change_end), or at the file's start when there is none.

A predictor is `predict(case) -> str | None`, the whole predicted file or None for no edit, or an
object with `.text` (str | None) and `.forwards` (int); the baselines (nep_baselines.py) are wrapped as such."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import jsonout
from ..context.languages import LanguageSpec, language_for
from ..errors import UserError
from ..input_files import InputFile, parse_json
from ..linediff import opcodes
from ..workspace_files import check_file, output_path, write_file
from ..nextedit.history import last_change_end
from ..nextedit.settings import ASKED
from ..options import add_launch_args, command_backend, launch_settings, paragraphs
from .humaneval import DATA_ENV, default_data_dir
from .edits_command import edit_acceptance
from .nep_baselines import no_edit, repeat_last_edit
from .nep_metrics import score, summarize

REQUIRED = ("new_file", "old_contents", "current_contents", "new_contents")
BASELINES = (("no edit", no_edit), ("repeat last edit", repeat_last_edit))


@dataclass(frozen=True)
class NepCase:
    id: str | int
    path: str
    language: LanguageSpec | None
    old: str
    current: str
    new: str
    cursor: tuple[int, int]  # 0-based (line, character) in `current`

    @property
    def label(self) -> str:
        """The file extension, the per-language grouping: py, java, go, c, cpp, js, ts."""
        tail = self.path.rsplit("/", 1)[-1]
        return tail.rsplit(".", 1)[-1].lower() if "." in tail.lstrip(".") else "(none)"


# where a user gets the data: the help and the error when it is missing say it
SOURCE = ("the next-edit prediction test set (Lu et al. 2025, arXiv 2508.10074, Apache-2.0): nep_test.jsonl, "
          "a copy of dataset/crawl/test.jsonl of https://github.com/lurf21/NextEditPrediction")


def default_data() -> Path:
    return default_data_dir().parent / "next-edit-prediction" / "nep_test.jsonl"


def case_from(record, index: int, where: str) -> NepCase:
    """One record -> NepCase; ValueError naming `where` (file and line) when it is malformed."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    for key in REQUIRED:
        if key not in record:
            raise ValueError(f"{where}: missing field {key!r}")
        if not isinstance(record[key], str):
            raise ValueError(f"{where}: field {key!r} must be a string, got {type(record[key]).__name__}")
    rid = record.get("id", index)
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise ValueError(f"{where}: field 'id' must be a string or an integer, got {rid!r}")
    old, current = record["old_contents"], record["current_contents"]
    if "cursor" in record:
        cursor = _cursor(record["cursor"], current, where)
    else:
        cursor = last_change_end(old, current) or (0, 0)
    path = record["new_file"]
    return NepCase(rid, path, language_for(None, path), old, current, record["new_contents"], cursor)


def _cursor(value, current: str, where: str) -> tuple[int, int]:
    ok = isinstance(value, dict) and all(
        isinstance(value.get(k), int) and not isinstance(value.get(k), bool) and value[k] >= 0
        for k in ("line", "character"))
    if not ok:
        raise ValueError(f'{where}: cursor must be {{"line": int >= 0, "character": int >= 0}}, got {value!r}')
    lines = current.splitlines(keepends=True) or [""]
    line, col = value["line"], value["character"]
    width = len(lines[line].rstrip("\r\n")) if line < len(lines) else 0  # line == len(lines): after the last newline
    if line > len(lines) or col > width:
        raise ValueError(f"{where}: cursor {line}:{col} is outside current_contents")
    return line, col


def unedited(case: NepCase) -> NepCase:
    """The case's file before the commit touched it, with no history and the cursor where its first
    edit will start: no edit is right here, so any suggestion is noise."""
    a, b = case.old.splitlines(keepends=True), case.current.splitlines(keepends=True)
    ops = [op for op in opcodes(a, b) if op[0] != "equal"]
    line = min(ops[0][1], max(0, len(a) - 1)) if ops else 0
    return NepCase(f"{case.id}/unedited", case.path, case.language, case.old, case.old, case.old, (line, 0))


MAX_RECORD = 16 << 20  # bytes of one record: the dataset's largest is under 1 MB


def load_cases(path: InputFile | str | Path, limit: int | None = None) -> list[NepCase]:
    """The records of a JSON-lines file, read by input_files a line at a time (each at most
    MAX_RECORD bytes, its JSON checked by parse_json); ValueError naming the line."""
    file = path if isinstance(path, InputFile) else InputFile(str(path))
    if not os.path.lexists(file.path):
        raise FileNotFoundError(f"next-edit data not found: {file}. The evaluation reads {SOURCE}; pass it with "
                                f"--data, or set {DATA_ENV} to a folder that holds next-edit-prediction/nep_test.jsonl")
    cases = []
    with file.open() as f:
        for i, raw in enumerate(iter(lambda: f.readline(MAX_RECORD + 1), b"")):
            if limit is not None and len(cases) >= limit:
                break
            where = f"{file} line {i + 1}"
            if len(raw) > MAX_RECORD:
                raise ValueError(f"{where}: a record of more than {MAX_RECORD >> 20} MB")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 (bad byte at offset {e.start})") from None
            if line.strip():
                cases.append(case_from(parse_json(line, where), i, where))
    return cases


def run_predictor(name: str, predict, cases: list[NepCase], progress: bool = False) -> tuple[dict, list[str]]:
    """-> (its table row, the predicted file per case: the current one where no edit was suggested)."""
    from tqdm import tqdm  # kept off --help

    scores, outputs = [], []
    for case in tqdm(cases, desc=name, unit="rec", file=sys.stderr, disable=None if progress else True):
        t0 = time.perf_counter()
        out = predict(case)
        ms = (time.perf_counter() - t0) * 1e3
        if out is None or isinstance(out, str):
            text, forwards = out, None
        else:
            text, forwards = getattr(out, "text", out), getattr(out, "forwards", None)
        if text is not None and not isinstance(text, str):
            raise RuntimeError(f"{name} predicted {type(text).__name__} for {case.id!r}, not str or None")
        predicted = case.current if text is None else text
        scores.append(score(case.current, case.new, predicted, ms, forwards))
        outputs.append(predicted)
    return summarize(name, scores, [c.label for c in cases]), outputs


def register(ev) -> None:
    n = ev.add_parser("nep", help="next-edit prediction: exact, partial and position match beside baselines",
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      description=paragraphs("Next-edit prediction: exact, partial and position match of the "
                                             "model's next edit, beside baselines that need no model.",
                                             f"The data: {SOURCE}."))
    n.add_argument("--data", default=None, metavar="FILE", type=InputFile,
                   help=f"a jsonl of next-edit records (default: {default_data()}, from ${DATA_ENV} when set)")
    n.add_argument("--limit", type=int, default=None, help="first N records only")
    n.add_argument("--predictions", default=None, metavar="OUT.jsonl", type=output_path,
                   help='write {"id", "predicted"} per record for the model (the no-edit baseline with --no-model)')
    n.add_argument("--no-model", action="store_true", help="baselines only; loads no model")
    n.add_argument("--json", action="store_true", help="print one JSON object")
    n.add_argument("--no-noise-cases", action="store_true",
                   help="skip the derived no-edit cases (each record's file before its commit, no history) "
                        "the noise rate is measured on when the data has no record with current == new")
    n.add_argument("--mode", choices=ASKED, default=None,
                   help="the model's decoding mode (default: the editor default, nextEdit.mode)")
    n.add_argument("--no-drafts", action="store_true",
                   help="refine without drafts (nextEdit.drafts: the last edit made again at analogous sites)")
    add_launch_args(n)
    n.set_defaults(run=run)


def model_predictor(args):
    """predict(case) with the model: nextedit.run.predict_file at the editor's default
    nextEdit.* settings (--mode aside), over the backend the flags name; imported only here, as it
    needs the model's libraries."""
    launch = launch_settings(args)
    try:
        from ..nextedit.run import predict_file
        from ..nextedit.settings import NextEditSettings
    except ImportError as e:
        raise UserError(f"no next-edit model predictor ({e}); run with --no-model for the baselines") from None
    from ..protocol.failure import BackendError
    from ..context.tokens import approx_tokens, model_token_counter
    from ..engine import model_folder

    settings = NextEditSettings(drafts=not args.no_drafts, **({} if args.mode is None else {"mode": args.mode}))
    backend = command_backend(launch)
    count = approx_tokens if launch.backend == "openai" else model_token_counter(model_folder(launch.path))
    runner = asyncio.Runner()  # one loop for the whole run: a remote backend's connections live in it

    def predict(c):
        try:
            return runner.run(predict_file(backend, c.path, c.old, c.current, c.cursor, c.language, count, settings))
        except BackendError as e:
            raise UserError(f"{c.id}: {e}") from None
    return predict


def follow_the_change(c: NepCase) -> str | None:
    """The rest of the last change (a rename, a signature) at its next sites, from the code alone."""
    from ..nextedit.history import steps_between
    from ..nextedit.follow import follow_text

    if c.language is None:
        return None
    return follow_text(c.current, c.language, steps_between(c.path, c.old, c.current), c.cursor)


def shown_by_default(acceptance):
    """predict(case): what the language server shows with next edits off (its default for a model that
    does not claim them): the change's own sites and repeat-the-last-edit, judged by the next-edit
    acceptance model."""
    from ..acceptance.chooser import choose
    from ..acceptance.edits import features_at
    from ..nextedit.history import steps_between
    from ..nextedit.repeat import offset_of
    from .edit_replay import code_offers

    def predict(c: NepCase) -> str | None:
        offers = code_offers(c.path, c.old, c.current, c.cursor)
        steps = len(steps_between(c.path, c.old, c.current))
        shown = choose(acceptance, offers, features_at(c.current, offset_of(c.current, c.cursor), steps)).shown
        return None if shown is None else shown.apply(c.current)
    return predict


def run(args) -> int:
    path = args.data or InputFile(str(default_data()))
    try:
        cases = load_cases(path, args.limit)
    except (OSError, ValueError) as e:
        raise UserError(str(e)) from None
    if not cases:
        raise UserError(f"{path}: no records")
    runs = [] if args.no_model else [("model", model_predictor(args), True)]
    runs += [(name, lambda c, f=f: f(c.old, c.current, c.cursor), False) for name, f in BASELINES]
    runs.append(("follow the change", follow_the_change, False))
    if (acceptance := edit_acceptance(None, launch_settings(args))) is not None:
        runs.append(("shown, next edits off", shown_by_default(acceptance), False))
    if args.predictions:  # refused before the run
        check_file(args.predictions, "--predictions")
    results = [run_predictor(name, predict, cases, progress) for name, predict, progress in runs]
    rows = [row for row, _ in results]
    noise_note = None
    if rows[0]["noise_rate"] is None and not args.no_noise_cases:  # no record where no edit is right
        quiet = [unedited(c) for c in cases]
        for row, (name, predict, progress) in zip(rows, runs):
            noisy, _ = run_predictor(name + " (unedited)", predict, quiet, progress)
            row["noise_rate"] = noisy["noise_rate"]
        noise_note = (f"noise rate: on {len(quiet)} derived cases where no edit is right (each record's file "
                      "before its commit, no history, the cursor where its first edit starts)")
    if args.predictions:
        write_file(args.predictions, "".join(jsonout.dumps({"id": case.id, "predicted": text}) + "\n"
                                             for case, text in zip(cases, results[0][1], strict=True)), "--predictions")
    if args.json:
        print(jsonout.dumps({"data": str(path), "n": len(cases), "rows": rows, "noise_cases": noise_note}))
    else:
        print_table(f"Next-edit prediction, {path.name}: {len(cases)} records", rows, noise_note=noise_note)
    return 0


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def print_table(title: str, rows: list[dict], file=None, noise_note: str | None = None) -> None:
    file = file or sys.stdout  # looked up now: tests capture it
    print(title, file=file)
    head = ("run", "exact", "partial", "position", "edit rate", "wrong-edit", "noise rate", "p50 ms", "fwd")
    print(f"{head[0]:>17}" + "".join(f"{h:>11}" for h in head[1:]), file=file)
    for r in rows:
        cells = [_pct(r[k]) for k in ("exact", "partial", "position", "edit_rate", "wrong_edit_rate", "noise_rate")]
        cells += [f"{r['p50_ms']:.1f}", "-" if r["forwards"] is None else f"{r['forwards']:.1f}"]
        print(f"{r['name']:>17}" + "".join(f"{c:>11}" for c in cells), file=file)
    if noise_note:
        print(noise_note, file=file)
    elif rows and rows[0]["noise_rate"] is None:
        print("noise rate: n/a (no such records: no record has current == new)", file=file)
    langs = list(rows[0].get("partial_by_language", {})) if rows else []
    print("partial match by language", file=file)
    print(f"{'run':>17}" + "".join(f"{k:>7}" for k in langs), file=file)
    for r in rows:
        by = r["partial_by_language"]
        print(f"{r['name']:>17}" + "".join(f"{_pct(by[k]['partial']):>7}" for k in langs), file=file)
