"""The code the benchmarks run on, all from the Python standard library of the running interpreter:
spans of real code for `bench sampler`, a 5,000-line file and a crowd of other large open
documents for `bench lsp` and the context benchmark (bench/context.py)."""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# Real code the embedded model was not trained on: CPython's own test suite (the training corpus
# excludes test/); falls back to library modules where a distribution strips the tests.
WORKLOAD_FILES = ["test/test_heapq.py", "test/test_textwrap.py", "test/test_bisect.py", "test/test_shlex.py",
                  "test/test_fractions.py", "test/test_statistics.py"]
FALLBACK_FILES = ["heapq.py", "textwrap.py", "bisect.py", "shlex.py", "fractions.py", "statistics.py"]
SPAN_LENGTHS = (8, 32, 64)
BIG_LINES = 5000
BIG_SOURCES = ["argparse.py", "textwrap.py", "shlex.py", "json/decoder.py", "json/encoder.py", "csv.py",
               "ftplib.py", "pprint.py", "difflib.py", "calendar.py", "dataclasses.py"]
# Large modules (1,800 to 6,400 lines in 3.11) for the other open documents
OPEN_SOURCES = ["inspect.py", "typing.py", "_pydecimal.py", "datetime.py", "tarfile.py", "pydoc.py", "doctest.py",
                "unittest/mock.py", "email/_header_value_parser.py", "urllib/request.py", "_pyio.py",
                "zipfile.py", "subprocess.py", "logging/__init__.py", "locale.py"]


def workload_files() -> list[Path]:
    files = [STDLIB / f for f in WORKLOAD_FILES if (STDLIB / f).is_file()]
    return files or [STDLIB / f for f in FALLBACK_FILES if (STDLIB / f).is_file()]


def make_spans(tok, n_per_length: int, context: int, seed: int):
    """-> {length: [CanvasRequest]}: spans of exactly `length` tokens starting at a line start, the
    real span's text as the request's id."""
    from ..model.decoding.canvas import CanvasRequest  # the tokenizers library: kept off --help

    rng = random.Random(seed)
    docs = [tok.encode(p.read_text()) for p in workload_files()]
    newline_ids = {i for d in docs for i in set(d) if tok.decode([i]).endswith("\n")}
    spans = {}
    for length in SPAN_LENGTHS:
        spans[length] = []
        while len(spans[length]) < n_per_length:
            doc = rng.choice(docs)
            starts = [i + 1 for i in range(context, len(doc) - length - context // 2) if doc[i] in newline_ids]
            s = rng.choice(starts)
            req = CanvasRequest(tok.decode(doc[s - context : s]), tok.decode(doc[s + length : s + length + context // 2]),
                              max_tokens=length, id=tok.decode(doc[s : s + length]))
            spans[length].append(req)
    return spans


def big_file(lines: int = BIG_LINES) -> str:
    """`lines` lines of stdlib modules, one after the other."""
    text = ""
    for name in BIG_SOURCES:
        text += (STDLIB / name).read_text() + "\n"
        if text.count("\n") >= lines:
            break
    return "\n".join(text.split("\n")[:lines]) + "\n"


def open_documents(n: int) -> list[tuple[str, str]]:
    """`n` large documents as (uri, text): the OPEN_SOURCES modules there are, each copied as often
    as it takes, copy k under file:///bench/open/k/ and starting with a comment that makes it a
    variant (another text, so no cache can share it with the first copy)."""
    sources = [s for s in OPEN_SOURCES if (STDLIB / s).is_file()]
    if not sources:
        return []
    out = []
    for i in range(n):
        name, k = sources[i % len(sources)], i // len(sources)
        text = (STDLIB / name).read_text(encoding="utf-8").replace("\r\n", "\n")
        out.append((f"file:///bench/open/{k}/{name}", f"# variant {k} of {name}\n" + text))
    return out
