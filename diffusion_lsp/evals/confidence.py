"""`diffusion-lsp eval confidence`: is what the language server shows what the model believes?

Lines of CPython's own test suite (real code the embedded model was never trained on; not the
evaluation sets of shared/data, so a default may be chosen on it) are completed as an editor asks:
the line's text is removed, the cursor stands at its indentation with `--typed` characters typed,
the context is gathered and the fill post-processed by the language server's own code
(context/gather.py, context/postprocess.py). For each confidence cut (`completion.confidenceCut`:
the suggestion ends at its first token less sure than the cut) the report gives the share of
positions that show a suggestion and the share of shown ones that are right as far as they go (the
line starts with them), and exact (they are the whole line)."""

from __future__ import annotations

import random

from .. import jsonout
from ..data.workload import STDLIB
from ..options import add_fill_args, engine_for, launch_settings, sampler_config

CONFIDENCE_CUTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def register(ev) -> None:
    c = ev.add_parser("confidence", help="shown and right suggestions per confidence cut (CPython's test suite)",
                      description="Is what the language server shows what the model believes? Completes random "
                                  "lines of CPython's own test suite the way an editor asks and prints, for each "
                                  "confidence cut, how often a suggestion is shown and how often a shown one is "
                                  "right as far as it goes.")
    c.add_argument("--lines", type=int, default=300, help="lines to complete (default 300)")
    c.add_argument("--typed", type=int, default=0, help="characters of each line typed before asking (default 0)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    add_fill_args(c)
    c.set_defaults(run=run, max_tokens=None)


def sites(n: int, typed: int, seed: int):
    """(document text, cursor offset, the rest of the line) at `n` lines of at least 8 characters that
    are not comments or strings, picked at random from the test suite's modules."""
    rng = random.Random(seed)
    files = sorted((STDLIB / "test").glob("test_*.py"))
    found = 0
    while found < n:
        try:
            lines = rng.choice(files).read_text().split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        i = rng.randrange(len(lines))
        body = lines[i].strip()
        if len(body) < 8 or body.startswith(("#", '"', "'")):
            continue
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        text = "\n".join(lines[:i] + [indent + body[:typed]] + lines[i + 1:])
        found += 1
        yield text, sum(len(line) + 1 for line in lines[:i]) + len(indent) + len(body[:typed]), body[typed:]


def run(args) -> int:
    from ..context.gather import gather  # tree-sitter and the tokenizer: kept off --help
    from ..context.postprocess import postprocess
    from ..context.tokens import model_token_counter
    from ..context.records import ContextBudget, Document, SpanKind
    from ..engine import model_folder
    from ..model.decoding.canvas import CanvasRequest

    launch, cfg = launch_settings(args), sampler_config(args).replace(confidence_cut=0.0)
    engine, count = engine_for(launch), model_token_counter(model_folder(launch.path))
    shown = {c: 0 for c in CONFIDENCE_CUTS}
    right = {c: 0 for c in CONFIDENCE_CUTS}
    exact = {c: 0 for c in CONFIDENCE_CUTS}
    n = 0
    for text, offset, rest in sites(args.lines, args.typed, args.seed):
        ctx = gather(Document("file:///test.py", text, "python", 1), offset, (), (), ContextBudget.split(512), count)
        if ctx.kind is SpanKind.BLOCK:  # a line that opens a block: the editor asks a multi-line fill there
            continue
        (res,) = engine.fill([CanvasRequest(ctx.prefix, ctx.suffix, args.max_tokens or ctx.max_tokens, one_line=True)],
                             cfg)
        n += 1
        for confidence_cut in CONFIDENCE_CUTS:
            sug = postprocess(ctx, res.text, res.pieces, res.confidence, confidence_cut=confidence_cut)
            if sug is None or not sug.text.strip():
                continue
            shown[confidence_cut] += 1
            right[confidence_cut] += rest.startswith(sug.text.rstrip())
            exact[confidence_cut] += sug.text.strip() == rest.strip()
    rows = [{"cut": c, "shown": shown[c] / max(n, 1), "right": right[c] / max(shown[c], 1),
             "exact": exact[c] / max(shown[c], 1), "n_shown": shown[c]} for c in CONFIDENCE_CUTS]
    if args.json:
        print(jsonout.dumps({"lines": n, "typed": args.typed, "rows": rows}))
        return 0
    print(f"{n} single-line positions in CPython's test suite, {args.typed} characters typed, "
          f"model: {launch.path or 'embedded default'}")
    print(f"{'cut':>5} {'shown':>7} {'right':>7} {'exact':>7}   (right and exact: of the shown)")
    for r in rows:
        print(f"{r['cut']:>5.1f} {r['shown']:>7.1%} {r['right']:>7.1%} {r['exact']:>7.1%}   ({r['n_shown']} shown)")
    return 0
