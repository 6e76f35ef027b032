"""Context: languages and queries, span kinds, prefix/suffix cutting, cross-file definitions."""

from __future__ import annotations

import random

import pytest

from diffusion_lsp.context.cutting import take_prefix, take_suffix
from diffusion_lsp.context.gather import approx_tokens, gather
from diffusion_lsp.context.languages import QUERY_NAMES, all_languages, language_for, parser_for, query_for
from diffusion_lsp.context.parsing import reparse, utf8
from diffusion_lsp.context.spans import CANVAS_TOKENS, decide_span
from diffusion_lsp.context.records import ContextBudget, Document, EditSnippet, SpanKind

CURSOR = "█"


def at(src: str) -> tuple[str, int]:
    return src.replace(CURSOR, ""), src.index(CURSOR)


def ctx_for(src: str, language: str, uri: str = "file:///w/main", **kw):
    text, offset = at(src)
    return gather(Document(uri, text, language), offset, **kw)


# --- languages -------------------------------------------------------------------------------

@pytest.mark.parametrize("lid,uri,name", [
    ("python", None, "python"), ("javascriptreact", None, "javascript"), ("typescriptreact", None, "tsx"),
    ("typescript", None, "typescript"), ("rust", None, "rust"), ("go", None, "go"), ("java", None, "java"),
    ("c", None, "c"), ("cpp", None, "cpp"), ("plaintext", "file:///a/b.rs", "rust"),
    (None, "file:///a/x.tsx", "tsx"), ("", "file:///a/h.hpp", "cpp"),
])
def test_language_for(lid, uri, name):
    assert language_for(lid, uri).name == name


def test_unknown_language_is_none():
    assert language_for("cobol") is None
    assert language_for("plaintext", "file:///README") is None
    assert language_for(None, "file:///a/.bashrc") is None


@pytest.mark.parametrize("spec", all_languages(), ids=lambda s: s.name)
def test_every_grammar_loads_and_every_query_compiles(spec):
    assert parser_for(spec) is not None
    for name in QUERY_NAMES:
        assert query_for(spec, name) is not None, f"{spec.query_dir}/{name}.scm"


def test_incremental_reparse_matches_a_fresh_parse():
    spec = language_for("python")
    parser = parser_for(spec)
    rng = random.Random(0)
    old = "def f(x):\n    return x + 1\n\nclass A:\n    def g(self):\n        pass\n"
    tree = parser.parse(utf8(old))
    for _ in range(30):
        i, j = sorted(rng.randrange(len(old) + 1) for _ in range(2))
        new = old[:i] + rng.choice(["", "y", "(", ":\n    ", "é", "\n"]) + old[j:]
        got = reparse(parser, tree, utf8(old), utf8(new))
        assert str(got.root_node) == str(parser.parse(utf8(new)).root_node)
        old, tree = new, got


# --- span kinds ------------------------------------------------------------------------------

SPANS = [
    ("python", "def f(x):\n    █\n", SpanKind.BLOCK, "    "),
    ("python", "def f(x):█\n", SpanKind.BLOCK, "    "),
    ("python", "class A:\n  def f(self):\n    pass\n\n  def g(self):\n    █\n\nx = 1\n", SpanKind.BLOCK, "    "),
    ("python", 'def f(x):\n    """Doc."""\n    █\n', SpanKind.BLOCK, "    "),
    ("python", "def f(x):\n    a = 1\n    █\n    return a\n", SpanKind.LINE, ""),
    ("python", "x = foo(█)\n", SpanKind.LINE, ""),
    ("python", "x = foo(█a, b)\n", SpanKind.REST_OF_LINE, ""),
    ("python", "xs.sort(key=lambda x:█)\n", SpanKind.LINE, ""),
    ("python", "if ready:  # go\n    █\nrun()\n", SpanKind.BLOCK, "    "),
    ("javascript", "function f(a) {\n  █\n}\n", SpanKind.BLOCK, "  "),
    ("javascript", "if (x) {█}\n", SpanKind.BLOCK, "    "),
    ("javascript", "const y = foo(█);\n", SpanKind.LINE, ""),
    ("typescript", "interface A {\n    █\n}\n", SpanKind.BLOCK, "    "),
    ("rust", "fn main() {\n    let v = vec![█];\n}\n", SpanKind.LINE, ""),
    ("rust", "impl A {\n    fn new() -> Self {\n        █\n    }\n}\n", SpanKind.BLOCK, "        "),
    ("go", "package main\n\nfunc main() {\n█\n}\n", SpanKind.BLOCK, "\t"),
    ("java", "class A {\n    void f() {\n        █\n    }\n}\n", SpanKind.BLOCK, "        "),
    ("c", "int main(void) {\n    █\n}\n", SpanKind.BLOCK, "    "),
    ("cpp", "int main() { return f(█x); }\n", SpanKind.REST_OF_LINE, ""),
    ("plaintext", "thing {\n  █\n}\n", SpanKind.BLOCK, "  "),
    ("plaintext", "some █words here\n", SpanKind.REST_OF_LINE, ""),
]


@pytest.mark.parametrize("language,src,kind,scope", SPANS)
def test_span_kind(language, src, kind, scope):
    ctx = ctx_for(src, language)
    assert ctx.kind is kind, ctx.extras["rule"]
    assert ctx.max_tokens == CANVAS_TOKENS[kind]
    if kind is SpanKind.BLOCK:
        assert ctx.scope_indent == scope


def test_span_after_an_opener_with_a_body_is_a_line():
    text, offset = at("def f(x):\n█\n    return x\n")
    assert decide_span(text, offset, language_for("python")).kind is SpanKind.LINE


def test_indent_unit_is_taken_from_the_file():
    ctx = ctx_for("function a() {\n  if (x) {\n    y();\n  }\n}\nfunction b() {\n█\n}\n", "javascript")
    assert ctx.kind is SpanKind.BLOCK and ctx.scope_indent == "  "


# --- prefix and suffix -----------------------------------------------------------------------

def _lines(n: int) -> str:
    return "".join(f"value_{i} = compute({i}, {i * 2})\n" for i in range(n))


def test_prefix_and_suffix_are_whole_lines_within_budget():
    text = _lines(400)
    offset = text.index("value_200")
    start, used = take_prefix(text, offset, 100, approx_tokens)
    end, used_s = take_suffix(text, offset, 50, approx_tokens)
    assert start == 0 or text[start - 1] == "\n"
    assert end == len(text) or text[end] == "\n"
    assert used <= 100 and used_s <= 50 and used > 80
    assert approx_tokens(text[start:offset]) <= used and approx_tokens(text[offset:end]) <= used_s


def test_an_opened_document_is_counted_ahead_in_batches_and_cutting_finds_it_counted():
    from diffusion_lsp.context.cutting import MemoCounter

    class Counter:
        def __init__(self):
            self.calls, self.batches = 0, 0

        def __call__(self, s):
            self.calls += 1
            return approx_tokens(s)

        def many(self, items):
            self.batches += 1
            return [approx_tokens(s) for s in items]

    text = _lines(400)
    counter = Counter()
    memo = MemoCounter(counter)
    assert memo.prime(text, chunk=128) == 401 and counter.batches == 4  # 400 lines and the empty last one
    offset = text.index("value_200")
    assert take_prefix(text, offset, 100, memo) == take_prefix(text, offset, 100, approx_tokens)
    assert take_suffix(text, offset, 50, memo) == take_suffix(text, offset, 50, approx_tokens)
    assert counter.calls <= 2  # only the cursor's own line pieces; every whole line was counted ahead
    assert memo.prime(text) == 0  # nothing new


def test_gather_cuts_within_budget_and_keeps_the_cursor_line():
    text = _lines(300) + "result = comp"
    ctx = gather(Document("file:///w/a.py", text, "python"), len(text), budget=ContextBudget(64, 32, 0))
    assert ctx.prefix.endswith("result = comp") and ctx.suffix == ""
    assert ctx.extras["prefix_tokens"] <= 64 and ctx.prefix.startswith("value_")


def test_prefix_starts_at_a_definition_boundary():
    body = "".join(f"    total += step_{i}(x)\n" for i in range(40))
    src = "def first(x):\n    total = 0\n" + body + "    return total\n\n\n@decorated\ndef second(y):\n" \
          + "    z = y * 2\n" * 6 + "    █\n"
    ctx = ctx_for(src, "python", budget=ContextBudget(prefix_tokens=70, cross_file_tokens=0))
    assert ctx.extras["snapped"] and ctx.prefix.startswith("@decorated\ndef second(y):\n")


def test_prefix_snaps_heuristically_without_a_grammar():
    src = "".join(f"  line {i}\n" for i in range(60)) + "section two\n" + "  more\n" * 10 + "  █"
    ctx = ctx_for(src, "plaintext", budget=ContextBudget(prefix_tokens=60, cross_file_tokens=0))
    assert ctx.language is None and ctx.prefix.startswith("section two\n")


def test_huge_line_and_binary_text_do_not_crash():
    huge = "x = [" + ", ".join(str(i) for i in range(60_000)) + "]\n"
    ctx = gather(Document("file:///w/h.py", huge, "python"), len(huge) // 2)
    assert 0 < len(ctx.prefix) <= ContextBudget().prefix_tokens * 8 and ctx.extras["prefix_tokens"] <= 384
    blob = bytes(random.Random(1).randrange(256) for _ in range(20_000)).decode("utf-8", "surrogateescape")
    for lid in ("python", "rust", "plaintext"):
        ctx = gather(Document("file:///w/b", blob, lid), 10_000)
        assert ctx.offset == 10_000


def test_offset_past_the_end_is_clamped():
    ctx = ctx_for("x = 1\n█", "python")
    text = "x = 1\n"
    ctx = gather(Document("file:///w/a.py", text, "python"), 10_000)
    assert ctx.offset == len(text) and ctx.extras["clamped"]
    assert gather(Document("file:///w/a.py", text, "python"), -5).offset == 0


def test_gather_with_a_real_tokenizer(tokenizer):
    text = _lines(200)
    count = lambda s: len(tokenizer.encode(s))  # noqa: E731
    ctx = gather(Document("file:///w/a.py", text, "python"), text.index("value_150"),
                 budget=ContextBudget(100, 40, 0), count_tokens=count)
    assert count(ctx.prefix) <= 100 + 5 and count(ctx.suffix) <= 40 + 5


# --- cross-file context ----------------------------------------------------------------------

UTILS_PY = '''import os


def helper(x: int) -> int:
    """Double x.

    Longer text."""
    return x * 2


class Store:
    """Keeps things."""

    def put(self, key, value):
        self.items[key] = value
'''


def test_cross_file_definitions_from_another_open_document():
    utils = Document("file:///w/pkg/utils.py", UTILS_PY, "python")
    src = "from utils import helper\n\n\ndef main():\n    s = Store()\n    return helper(█)\n"
    ctx = ctx_for(src, "python", "file:///w/pkg/main.py", open_docs=[utils], budget=ContextBudget())
    assert ctx.prefix.startswith("# file: utils.py\n# def helper(x: int) -> int:\n#     \"\"\"Double x.\"\"\"\n")
    assert "# class Store:" in ctx.prefix and ctx.extras["cross_file"][0] == "utils.py:helper"
    assert ctx.extras["cross_file_tokens"] <= ContextBudget().cross_file_tokens
    assert ctx.prefix.endswith("    return helper(")


@pytest.mark.parametrize("language,other_uri,other,src,expect", [
    ("javascript", "file:///w/math.js", "export function add(a, b) {\n  return a + b;\n}\n",
     "import { add } from './math';\nconst total = add(█);\n", "// function add(a, b)"),
    ("typescript", "file:///w/types.ts", "export interface Point {\n  x: number;\n}\n",
     "import { Point } from './types';\nconst p: Point = █;\n", "// interface Point"),
    ("rust", "file:///w/src/geo.rs", "/// Area of a circle.\npub fn area(r: f64) -> f64 {\n    3.14 * r * r\n}\n",
     "mod geo;\nfn main() {\n    let a = geo::area(█);\n}\n", "// pub fn area(r: f64) -> f64"),
    ("go", "file:///w/util/util.go", "package util\n\n// Max returns the larger.\nfunc Max(a, b int) int {\n\treturn a\n}\n",
     "package main\n\nimport \"example.com/util\"\n\nfunc main() {\n\tx := util.Max(█)\n}\n",
     "// func Max(a, b int) int"),
    ("java", "file:///w/Shapes.java", "class Shapes {\n    static double area(double r) {\n        return r;\n    }\n}\n",
     "class Main {\n    void f() {\n        double a = Shapes.area(█);\n    }\n}\n", "// static double area(double r)"),
])
def test_cross_file_in_other_languages(language, other_uri, other, src, expect):
    open_docs = {other_uri: Document(other_uri, other, language)}
    ctx = ctx_for(src, language, "file:///w/main", open_docs=open_docs)
    assert expect in ctx.prefix, ctx.prefix


def test_imported_document_ranks_first():
    a = Document("file:///w/alpha.py", "def run(a):\n    return a\n", "python")
    b = Document("file:///w/beta.py", "def run(b, c):\n    return b\n", "python")
    src = "from beta import run\n\nrun(█)\n"
    ctx = ctx_for(src, "python", "file:///w/main.py", open_docs=[a, b], budget=ContextBudget(cross_file_tokens=20))
    assert ctx.extras["cross_file"] == ["beta.py:run"] and "def run(b, c)" in ctx.prefix


def test_local_definitions_are_not_repeated_and_edits_are_added():
    utils = Document("file:///w/utils.py", UTILS_PY, "python")
    src = "def helper(y):\n    return y\n\nhelper(█)\n"
    edits = [EditSnippet("file:///w/old.py", "OLD = 1\n" * 40), EditSnippet("file:///w/other.py", "RATE = 3\nTAX = 0.2\n"),
             EditSnippet("file:///w/main.py", "def helper(y):\n    return y")]  # oldest first
    ctx = ctx_for(src, "python", "file:///w/main.py", open_docs=[utils], recent_edits=edits,
                  budget=ContextBudget(cross_file_tokens=40))
    assert "utils.py:helper" not in ctx.extras["cross_file"]
    assert ctx.extras["cross_file"] == ["edit:other.py"]  # the newest that fits; the older one does not
    assert ctx.prefix.startswith("# recent edit in other.py:\n# RATE = 3\n# TAX = 0.2\n")


def test_cross_file_budget_zero_and_unknown_other_language():
    utils = Document("file:///w/utils.py", UTILS_PY, "python")
    notes = Document("file:///w/notes.txt", "helper is great", "plaintext")
    ctx = ctx_for("helper(█)\n", "python", open_docs=[utils, notes], budget=ContextBudget(cross_file_tokens=0))
    assert ctx.prefix == "helper(" and ctx.extras["cross_file"] == []


# --- parsing windows -------------------------------------------------------------------------

def test_parse_window_never_starts_inside_a_docstring():
    doc_lines = "".join(f"    Line {i} of prose: it has (unbalanced brackets and 'quotes.\n" for i in range(30))
    src = 'def f(x):\n    """Summary.\n\n' + doc_lines + '    """\n    y = x + 1\n    return █\n'
    ctx = ctx_for(src, "python", budget=ContextBudget(prefix_tokens=120, cross_file_tokens=0))
    text = ctx.document.text
    assert ctx.extras["prefix_start"] > text.index('"""')  # the prefix itself begins inside it
    assert ctx.parse_window[0] == text.index("    y = x + 1")


def test_a_parse_past_its_deadline_falls_back_to_line_rules(monkeypatch):
    from diffusion_lsp.context import parsing
    from diffusion_lsp.context.postprocess import postprocess

    monkeypatch.setattr(parsing, "PARSE_BUDGET_MS", 0.0)
    monkeypatch.setattr(parsing, "WINDOWS", parsing.WindowCache())
    src = "".join(f"def f{i}(a, b):\n    return g(a, b) + {i}\n\n" for i in range(60)) + "def h():\n    █\n"
    ctx = ctx_for(src, "python", budget=ContextBudget(prefix_tokens=2000, cross_file_tokens=0))
    assert not ctx.extras["parsed"] and ctx.parse_window is None
    assert ctx.kind is SpanKind.BLOCK and ctx.extras["rule"] == "below-opener"
    assert postprocess(ctx, "return (").text == "return ("  # no tree, no syntax check
    monkeypatch.setattr(parsing, "PARSE_BUDGET_MS", 1000.0)
    text = ctx.document.text
    near = gather(Document("file:///w/main", text[:ctx.offset] + "x" + text[ctx.offset:], "python"),
                  ctx.offset + 1, budget=ContextBudget(prefix_tokens=2000, cross_file_tokens=0))
    assert not near.extras["parsed"]  # a window much like the one that ran out of time is not retried
    assert gather(Document("file:///w/main", text, "python"), 40).extras["parsed"]


def test_token_counts_are_memoized_per_counter():
    calls = []

    def count(s):
        calls.append(s)
        return len(s) // 4 + 1

    text = _lines(100)
    doc = Document("file:///w/m.py", text, "python")
    gather(doc, text.index("value_50"), count_tokens=count)
    first = len(calls)
    gather(doc, text.index("value_50"), count_tokens=count)
    assert first > 10 and len(calls) == first


def test_prepare_loads_a_known_language_ahead_of_its_first_completion():
    from diffusion_lsp.context.languages import QUERY_NAMES, language_for, prepare, query_for

    query_for.cache_clear()
    assert prepare("python", "file:///w/a.py") and prepare("rust", "file:///w/a.rs")
    assert query_for.cache_info().currsize == 2 * len(QUERY_NAMES)  # compiled once, kept
    assert not prepare("plaintext", "file:///w/notes.txt")
    assert language_for("python", "") is not None


def test_cut_around_keeps_what_the_server_would_within_the_budget():
    from diffusion_lsp.context.cutting import cut_around

    lines = [f"value_{i} = compute({i})\n" for i in range(1000)]
    prefix, suffix = "".join(lines[:500]) + "    x = ", "1\n" + "".join(lines[501:])
    count = lambda s: len(s) // 4 + 1  # noqa: E731
    kept_prefix, kept_suffix = cut_around(prefix, suffix, 64, count)
    assert prefix.endswith(kept_prefix) and suffix.startswith(kept_suffix)
    assert kept_prefix.endswith("    x = ") and kept_prefix.startswith("value_")  # from a line start
    assert suffix[len(kept_suffix)] == "\n"  # to a line end
    assert 0 < sum(map(count, kept_prefix.splitlines(True))) <= 64 - 64 // 4  # prefix + the cross-file share
    assert 0 < sum(map(count, kept_suffix.splitlines(True))) <= 64 // 4
    assert cut_around(prefix, suffix, 0, count) == (prefix, suffix)
