"""`diffusion-lsp eval typing`: a typing session on held-out lines, with and without reusing the
document's last fill (model/decoding/reuse.py), side by side in one run.

For each line picked from the held-out packages, the "user" is at the line's indentation and types
its first characters one at a time; every keystroke asks for a one-line fill, as an editor without
debounce would. The context is cut once per line to the token budget (prefix at a line start,
suffix at a line end), so its start stays put while typing, as the server's context does. Each
keystroke is filled twice, fresh and from the last fill; the report gives both columns: edit
similarity and exact match of the completed line, fill time, forwards, and how often they agree."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

from .. import jsonout
from ..context.cutting import memoized, take_prefix, take_suffix
from ..options import add_fill_args, engine_for, launch_settings, sampler_config
from .heldout import load_val, pick_lines
from .metrics import edit_similarity, exact_match


def register(ev) -> None:
    t = ev.add_parser("typing", help="typing sessions on held-out lines, with and without context reuse")
    t.add_argument("--corpus", default="data/corpus",
                   help="corpus folder with val.jsonl, made by `diffusion-lsp data build` (default data/corpus)")
    t.add_argument("--lines", type=int, default=100, help="lines to type (default 100)")
    t.add_argument("--chars", type=int, default=4, help="characters typed per line, one fill each (default 4)")
    t.add_argument("--context", type=int, default=512, help="context tokens, 3/4 prefix and 1/4 suffix (default 512)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--json", action="store_true", help="print one JSON object")
    add_fill_args(t)
    t.set_defaults(run=run)


def cut_context(prefix: str, suffix: str, count, prefix_tokens: int, suffix_tokens: int) -> tuple[str, str]:
    """The last whole lines of `prefix` and first whole lines of `suffix` within the budgets, cut
    by the language server's own cutters."""
    count = memoized(count)
    start, _ = take_prefix(prefix, len(prefix), prefix_tokens, count)
    end, _ = take_suffix(suffix, 0, suffix_tokens, count)
    return prefix[start:], suffix[:end]


def keystrokes(prefix: str, suffix: str, line: str, chars: int) -> list[tuple[str, str, str]]:
    """[(prefix, suffix, typed)]: the cursor after the indentation, then after each typed character."""
    content = line.strip()
    indent = line[: len(line) - len(line.lstrip())]
    return [(prefix + indent + content[:k], "\n" + suffix, content[:k]) for k in range(min(chars, len(content)) + 1)]


def run(args) -> int:
    from ..model.decoding.canvas import CanvasRequest  # the tokenizers library: kept off --help

    base, launch = sampler_config(args), launch_settings(args)
    rng = random.Random(args.seed)
    docs = load_val(args.corpus)
    engine = engine_for(launch)
    count = lambda s: len(engine.tokenizer.encode(s))  # noqa: E731
    budget = args.context - args.max_tokens
    modes = {"fresh": replace(base, reuse_context=False), "reuse": replace(base, reuse_context=True)}
    rows = {name: [] for name in modes}
    for i, (prefix, suffix, line, _) in enumerate(pick_lines(docs, args.lines, rng)):
        prefix, suffix = cut_context(prefix, suffix, count, budget * 3 // 4, budget // 4)
        for name, cfg in modes.items():
            for p, s, typed in keystrokes(prefix, suffix, line, args.chars):
                (r,) = engine.fill([CanvasRequest(p, s, args.max_tokens, one_line=True, doc=f"line-{i}")], cfg)
                guess = typed + r.text.split("\n", 1)[0]
                rows[name].append({"text": r.text, "ms": r.ms, "forwards": r.forwards, "reused": r.reused > 0,
                                   "edit": edit_similarity(guess, line), "exact": exact_match(guess, line)})
    result = {"lines": args.lines, "fills": len(rows["fresh"]), "chars": args.chars, "policy": args.policy}
    for name, got in rows.items():
        result[name] = {"edit_similarity": statistics.mean(g["edit"] for g in got),
                        "exact_match": statistics.mean(g["exact"] for g in got),
                        "ms_p50": statistics.median(g["ms"] for g in got),
                        "ms_mean": statistics.mean(g["ms"] for g in got),
                        "forwards_mean": statistics.mean(g["forwards"] for g in got),
                        "reused_share": statistics.mean(g["reused"] for g in got)}
    result["same_fill"] = statistics.mean(a["text"] == b["text"] for a, b in zip(rows["fresh"], rows["reuse"]))
    result["ms_p50_ratio"] = result["reuse"]["ms_p50"] / result["fresh"]["ms_p50"]
    if args.json:
        print(jsonout.dumps(result))
        return 0
    print(f"{result['fills']} one-line fills: {args.lines} held-out lines, up to {args.chars} characters typed "
          f"each ({args.policy})")
    print(f"{'':8}{'edit sim':>10}{'exact':>8}{'ms p50':>9}{'ms mean':>9}{'forwards':>10}{'reused':>8}")
    for name in modes:
        f = result[name]
        print(f"{name:8}{f['edit_similarity']:>10.1%}{f['exact_match']:>8.1%}{f['ms_p50']:>9.1f}{f['ms_mean']:>9.1f}"
              f"{f['forwards_mean']:>10.1f}{f['reused_share']:>8.0%}")
    print(f"reuse/fresh fill time p50: {result['ms_p50_ratio']:.2f}; identical fills: {result['same_fill']:.0%}")
    return 0
