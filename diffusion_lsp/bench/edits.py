"""`diffusion-lsp bench edits REPO...`: the replayed commits of `eval edits` (evals/edit_replay.py)
typed into the running language server with its default settings, one didChange per change, and
the next edit it answers (textDocument/copilotInlineEdit at the cursor) judged against the rest of
the commit as `eval edits` judges candidates: what a user is shown, not a model of it. Once with
the next-edit acceptance model (the default) and once by the rules (nextEdit.acceptance false),
printed beside `eval edits`' own rows for the same steps (candidates from the code; --model-edits
adds the model's), which the first should equal."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from .. import jsonout
from ..candidate import Candidate, Source
from ..context.languages import language_for
from ..data.edits import apply_hunks
from ..errors import UserError
from ..evals import edits_command
from ..evals.edit_replay import EditCase, JudgedEdit, changes, right
from ..nextedit.edits import minimal_edit
from ..options import add_launch_args, launch_settings
from ..server.positions import offset_at

SETTINGS = {"completion": {"debounceMs": 0}, "nextEdit": {"debounceMs": 0}, "worker": {"idleExitS": 0}}
PASSES = {"through the server, default settings": {},
          "through the server, by the rules (nextEdit.acceptance false)": {"acceptance": False}}


def _typed(lsp, uri: str, before: str, after: str) -> None:
    """One didChange: the span where `before` and `after` differ."""
    e = minimal_edit(before, after, Source.MODEL)  # only its span and text are sent

    def at(offset: int) -> tuple[int, str]:
        start = before.rfind("\n", 0, offset) + 1
        return before.count("\n", 0, offset), before[start:offset]
    if e is not None:
        lsp.change(uri, at(e.start), at(e.end), e.text)


async def _ask(lsp, uri: str, case: EditCase) -> JudgedEdit:
    lsp.open(uri, case.old, language_for(None, case.path).name)
    steps, text = changes(case.old, case.target), case.old
    for k in range(1, case.k + 1):
        now = apply_hunks(case.old, case.target, steps, k)
        _typed(lsp, uri, text, now)
        text = now
    line = case.cursor[0]
    _, edit = await lsp.next_edit(uri, line, case.current.splitlines(keepends=True)[line][:case.cursor[1]]
                                  if line < len(case.current.splitlines()) else "")
    lsp.close(uri)
    if edit is None:
        return JudgedEdit(case.id, case.repo, [], [], [])
    rng = edit["range"]
    start = offset_at(case.current, rng["start"]["line"], rng["start"]["character"], lsp.encoding)
    end = offset_at(case.current, rng["end"]["line"], rng["end"]["character"], lsp.encoding)
    # the reply does not name its source: `right` reads only the span and its text
    shown = Candidate(start, end, edit["text"], Source.MODEL)
    return JudgedEdit(case.id, case.repo, [shown], [{}], [right(case.current, shown, case.target)])


async def through_server(cases: list[EditCase], launch, progress: bool = False) -> dict[str, list[JudgedEdit]]:
    """Per pass (PASSES), each case's answer: no candidate, or the one shown, judged."""
    from tqdm import tqdm  # kept off --help

    from .lsp_client import BenchClient  # pygls and lsprotocol

    out = {}
    with tempfile.TemporaryDirectory(prefix="diffusion-lsp-edits-", ignore_cleanup_errors=True) as tmp:
        cmd = [sys.executable, "-m", "diffusion_lsp", "serve", "--worker-socket", str(Path(tmp) / "w.sock")]
        async with BenchClient(cmd + launch.to_argv(), SETTINGS) as lsp:
            await lsp.wait_for_model(local=launch.backend == "local")
            for name, next_edit in PASSES.items():
                lsp.configure({"diffusionLsp": {**SETTINGS, "nextEdit": {**SETTINGS["nextEdit"], **next_edit}}})
                bar = tqdm(cases, desc=name, unit="case", disable=not progress, file=sys.stderr)
                out[name] = [await _ask(lsp, f"file:///edits/{len(out)}/{i}/{Path(c.path).name}", c)
                             for i, c in enumerate(bar)]
    return out


def register(bench) -> None:
    b = bench.add_parser("edits", help="next edits on replayed commits typed into the real server: shown, right, "
                                       "wrong, beside eval edits' rows")
    b.add_argument("repos", nargs="+", metavar="REPO", help="git work trees whose recent commits are replayed")
    b.add_argument("--edit-cases", type=int, default=edits_command.CASES, metavar="N",
                   help=f"cases replayed per repository (default {edits_command.CASES})")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--model-edits", action="store_true",
                   help="eval edits' rows with the model's candidates too (its next edits on); slower")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    add_launch_args(b)
    b.set_defaults(run=run, no_model=True, edits_from=[], save_edits=None, acceptance=None)


def run(args) -> int:
    launch = launch_settings(args)
    args.no_model = not args.model_edits
    model = edits_command.edit_acceptance(None, launch)
    cases = edits_command.replayed(args)
    got = edits_command.report(edits_command.collect(args, launch, cases), model)
    try:
        answers = asyncio.run(through_server(cases, launch, progress=not args.json))
    except OSError as e:
        raise UserError(f"the language server could not be run: {e}") from None
    for name, js in answers.items():
        got[name] = edits_command.rates(js, [0 if j.offers else None for j in js])
    if args.json:
        print(jsonout.dumps(got))
    else:
        edits_command.print_report(f"Next edits on {len(cases)} replayed commit steps of "
                                   f"{', '.join(sorted({c.repo for c in cases}))}", got)
    return 0
