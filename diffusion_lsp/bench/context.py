"""Server-overhead benchmark for context + post-processing: `python -m diffusion_lsp.bench.context`.

Prints p50/p95 of gather(), postprocess() and both, on a 5,000-line Python file made of stdlib
modules, with a real byte-level BPE counting tokens and two other open documents for cross-file
context. Two scenarios: cursor jumps (every request at a new place) and typing (one character
more per request at one place, the incremental path). Wall time and this thread's CPU time (the
latter is steadier on a shared, loaded machine). Figures only; no assertion.

With `--tokenizer DIR` (a checkpoint's tokenizer folder: tokenizer.json, or vocab.json + merges.txt as Qwen2 ships
them) the context is counted with that tokenizer, and a first row times encoding the whole 5,000-line file: our
loader's tokenizer, the product's wrapper (which keeps control-token spellings out of code) and transformers'
AutoTokenizer from the same folder, side by side, with whether their ids agree."""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from ..context.gather import gather
from ..context.postprocess import postprocess
from ..context.records import ContextBudget, Document, EditSnippet
from ..context.tokens import TokenCounter
from ..model.families.hf_tokenizer import load_tokenizer_files
from ..model.network.config import SpecialTokens
from ..model.network.tokenizer import Tokenizer, train_bpe
from ..data.workload import BIG_SOURCES, STDLIB, big_file


def _fill(text: str, offset: int) -> tuple[str, list[str], list[float]]:
    """A plausible fill that the suffix does not already have: 60 characters of code from elsewhere
    in the file, in 4-character "tokens"."""
    at = (offset * 7919 + 1000) % max(len(text) - 60, 1)
    fill = text[at:at + 60]
    pieces = [fill[i:i + 4] for i in range(0, len(fill), 4)]
    return fill, pieces, [0.9] * len(pieces)


def _pct(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"p50 {statistics.median(xs):6.2f} ms  p95 {xs[int(0.95 * (len(xs) - 1))]:6.2f} ms"


def _median_ms(rows: dict, repeats: int) -> dict[str, float]:
    """Median ms per row, the rows taken in turn within each repeat (one after the other, the first row
    measured 1.3x slower than the same work run later, on a loaded two-core machine)."""
    times = {name: [] for name in rows}
    for _ in range(repeats):
        for name, f in rows.items():
            t0 = time.perf_counter()
            f()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(xs) for name, xs in times.items()}


def encode_speed(folder: Path, text: str, repeats: int = 5) -> None:
    """Prints the time to encode `text` with the folder's tokenizer three ways (module docstring)."""
    hf = load_tokenizer_files(folder)
    control = next((t.content for t in hf.get_added_tokens_decoder().values() if t.special), None)
    rows = {"ours (load_tokenizer_files)": lambda: hf.encode(text, add_special_tokens=False).ids}
    if control is not None:  # the wrapper needs a mask and a filler by name: any control token stands in
        product = Tokenizer(hf, SpecialTokens(mask=control, filler=control, bos=None))
        rows["product (Tokenizer.encode)"] = lambda: product.encode(text)
    try:
        from transformers import AutoTokenizer

        theirs = AutoTokenizer.from_pretrained(str(folder))
        rows[f"transformers ({type(theirs).__name__})"] = lambda: theirs.encode(text, add_special_tokens=False)
    except ImportError:
        print("transformers is not installed: no reference row (pip install transformers)")
    ids = {name: f() for name, f in rows.items()}
    first = next(iter(ids.values()))
    medians = _median_ms(rows, repeats)
    base = next(iter(medians.values()))
    print(f"encoding {text.count(chr(10)):,} lines ({len(text):,} chars) with {folder}, median of {repeats}:")
    for name, ms in medians.items():
        print(f"  {name:40s} {ms:8.1f} ms  {len(ids[name]):,} tokens  x{ms / base:.2f}  "
              f"{'same ids' if ids[name] == first else 'DIFFERENT ids'}")


def run(n: int, seed: int, tokenizer: Path | None = None) -> None:
    text = big_file()
    if tokenizer is None:
        tok = train_bpe([(STDLIB / s).read_text() for s in BIG_SOURCES[:4]], vocab_size=2048)
        count = lambda s: len(tok.encode(s))  # noqa: E731
    else:
        encode_speed(tokenizer, text)
        count = TokenCounter(load_tokenizer_files(tokenizer))
    others = [Document(f"file:///w/{Path(s).name}", (STDLIB / s).read_text(), "python")
              for s in ("textwrap.py", "shlex.py")]
    edits = [EditSnippet("file:///w/shlex.py", "def split(s, comments=False, posix=True):")]
    budget = ContextBudget()
    rng = random.Random(seed)
    uri = "file:///w/big.py"
    print(f"file: {text.count(chr(10))} lines, {len(text)} chars; budget {budget}")

    def one(doc: Document, offset: int, times: dict[str, list[float]]) -> None:
        c0, t0 = time.thread_time(), time.perf_counter()
        ctx = gather(doc, offset, others, edits, budget, count)
        t1 = time.perf_counter()
        fill, pieces, conf = _fill(doc.text, offset)
        postprocess(ctx, fill, pieces, conf, confidence_cut=0.5)
        c2, t2 = time.thread_time(), time.perf_counter()
        for key, ms in (("gather", t1 - t0), ("postprocess", t2 - t1), ("total", t2 - t0),
                        ("total (cpu)", c2 - c0)):
            times[key].append(ms * 1e3)

    gather(Document(uri, text, "python"), 0, others, edits, budget, count)  # index other documents
    keys = ("gather", "postprocess", "total", "total (cpu)")
    jumps = {k: [] for k in keys}
    for _ in range(n):
        offset = rng.randrange(len(text))
        one(Document(uri, text, "python"), offset, jumps)
    typing = {k: [] for k in keys}
    for _ in range(max(n // 20, 1)):
        offset = text.find("\n", rng.randrange(len(text)))
        for ch in "result = self.value + 1"[:20]:
            text = text[:offset] + ch + text[offset:]
            offset += 1
            one(Document(uri, text, "python"), offset, typing)
    for name, times in (("cursor jumps", jumps), ("typing", typing)):
        print(f"{name} ({len(times['total'])} requests)")
        for key, xs in times.items():
            print(f"  {key:12s} {_pct(xs)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="requests per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", type=Path, metavar="DIR",
                    help="a checkpoint's tokenizer folder: count with it and time encoding beside transformers")
    args = ap.parse_args()
    run(args.n, args.seed, args.tokenizer)


if __name__ == "__main__":
    main()
