"""Post-processing: each rule on real code, in the order postprocess() applies them."""

from __future__ import annotations

import pytest

from diffusion_lsp.context.gather import gather
from diffusion_lsp.protocol.reasons import Cut
from diffusion_lsp.context.postprocess import creates_parse_error, drop_low_confidence, postprocess
from diffusion_lsp.context.overlap import drop_duplicate_lines
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.context.records import Document, SpanKind

CURSOR = "█"


def ctx_for(src: str, language: str = "python", uri: str = "file:///w/main"):
    text, offset = src.replace(CURSOR, ""), src.index(CURSOR)
    return gather(Document(uri, text, language), offset)


def apply(ctx, s: Candidate) -> str:
    text = ctx.document.text
    return text[:ctx.offset] + s.text + text[ctx.offset + s.replace_chars:]


def run(ctx, fill, **kw):
    reasons = []
    return postprocess(ctx, fill, reasons=reasons, **kw), reasons


# --- 1. low-confidence tail ------------------------------------------------------------------

def test_low_confidence_tail_is_cut_back_to_a_whole_line():
    ctx = ctx_for("def f(x):\n    █\n")
    pieces = ["y", " =", " x", " +", " 1", "\n", "    return", " y", ".", "up"]
    conf = [0.9] * 8 + [0.2, 0.9]
    s, reasons = run(ctx, "".join(pieces), pieces=pieces, confidence=conf, confidence_cut=0.5)
    assert s.text == "y = x + 1" and Cut.TAIL in reasons


def test_low_confidence_tail_is_cut_back_to_a_whole_word():
    ctx = ctx_for("result = █\n")
    pieces = ["comp", "ute", "(", "val", "ue", ")"]
    s, _ = run(ctx, "compute(value)", pieces=pieces, confidence=[0.9, 0.9, 0.9, 0.9, 0.1, 0.9], confidence_cut=0.5)
    assert s.text == "compute("


def test_pieces_locate_the_cut_and_must_line_up_with_the_text():
    # token healing: the sampler already cut the typed "sel" from the first piece
    text, dropped = drop_low_confidence("f.x = 1", ["f", ".x", " =", " 1"], [0.9, 0.9, 0.9, 0.1], 0.5)
    assert text == "f.x =" and dropped == 1
    with pytest.raises(ValueError, match="do not line up"):
        drop_low_confidence("f.x = 1", ["self", ".x", " =", " 1"], [0.9, 0.9, 0.9, 0.1], 0.5)


def test_all_low_confidence_is_rejected_and_a_zero_cut_keeps_everything():
    ctx = ctx_for("x = █\n")
    s, reasons = run(ctx, "42", pieces=["42"], confidence=[0.1], confidence_cut=0.5)
    assert s is None and reasons[-1] == "low-confidence"
    s, _ = run(ctx, "42", pieces=["42"], confidence=[0.1], confidence_cut=0.0)
    assert s.text == "42"


# --- 2. scope --------------------------------------------------------------------------------

def test_line_kinds_stop_at_the_first_newline():
    ctx = ctx_for("total = █\n")
    assert ctx.kind is SpanKind.LINE
    assert run(ctx, "a + b\nprint(total)")[0].text == "a + b"
    s, reasons = run(ctx, "\nprint(total)")
    assert s is None and reasons == ["scope", "out-of-scope"]


def test_python_block_stops_at_a_dedent():
    ctx = ctx_for("class A:\n    def f(self):\n        █\n")
    s, reasons = run(ctx, "return 1\n\n    def g(self):\n        pass")
    assert s.text == "return 1" and "scope" in reasons


def test_block_fill_starting_outside_the_block_is_rejected():
    ctx = ctx_for("def f(x):\n█\n")
    assert ctx.kind is SpanKind.BLOCK
    assert run(ctx, "print(x)\n")[1][-1] == "out-of-scope"
    assert run(ctx, "    return x\n")[0].text == "    return x"


def test_brace_block_keeps_its_closer_only_when_the_suffix_lacks_it():
    ctx = ctx_for("function f(a) {\n  █\n}\n", "javascript")
    assert run(ctx, "return a;\n}\nfunction g() {}")[0].text == "return a;"
    ctx = ctx_for("fn main() {\n    let x = 1;\n    if x > 0 {\n        █\n", "rust")
    assert ctx.kind is SpanKind.BLOCK
    assert run(ctx, 'println!("{}", x);\n    }\n}', check_syntax=False)[0].text == 'println!("{}", x);\n    }'


def test_block_before_a_closer_on_the_cursor_line_ends_with_a_newline():
    ctx = ctx_for("func main() {█}\n", "go")
    s, _ = run(ctx, "\n\tfmt.Println(1)\n}")
    assert s.text == "\n\tfmt.Println(1)\n" and apply(ctx, s) == "func main() {\n\tfmt.Println(1)\n}\n"


# --- 3. text the suffix already has -------------------------------------------------------------

def test_last_lines_repeating_the_next_lines_are_dropped():
    suffix = "\n    }\n    return total;\n}\n"
    assert drop_duplicate_lines("  total += x;\n    }\n    return total;", "    ", suffix) == ("  total += x;", 2)
    assert drop_duplicate_lines("  total += x;", "    ", suffix) == ("  total += x;", 0)
    ctx = ctx_for("function f(a) {\n  █\n}\n", "javascript")
    s, reasons = run(ctx, "return a;\n}")
    assert s.text == "return a;" and reasons == ["scope"]


def test_a_line_that_repeats_the_next_line_is_rejected():
    ctx = ctx_for("int main(void) {\n    int a = 1;\n    █\n    return a;\n}\n", "c")
    assert ctx.kind is SpanKind.LINE
    s, reasons = run(ctx, "return a;")
    assert s is None and reasons[-1] == "duplicate"


def test_end_of_fill_overlapping_the_rest_of_the_line_is_dropped():
    ctx = ctx_for("result = compute(█, b)\n")
    assert ctx.kind is SpanKind.REST_OF_LINE
    s, _ = run(ctx, "a, b)")
    assert s.text == "a" and apply(ctx, s) == "result = compute(a, b)\n"


def test_overlap_never_splits_an_identifier():
    ctx = ctx_for("value = █bar\n")
    assert run(ctx, "foo_bar", check_syntax=False)[0].text == "foo_bar"


# --- 4. brackets and quotes ----------------------------------------------------------------------

@pytest.mark.parametrize("language,src,fill,text,replace,result", [
    ("python", "print(█)\n", "x)", "x", 0, "print(x)\n"),
    ("python", "y = f(█)\n", "a) + g(b)", "a) + g(b", 0, "y = f(a) + g(b)\n"),
    ("python", "y = [f(█)]\n", "a), 2]", "a), 2", 1, "y = [f(a), 2]\n"),
    ("python", 'name = get("█")\n', 'user", "x")', 'user", "x', 0, 'name = get("user", "x")\n'),
    ("python", "y = f(█)\n", "g(b)", "g(b)", 0, "y = f(g(b))\n"),
    ("javascript", "const y = foo(█);\n", "bar) + 1;", "bar) + 1", 1, "const y = foo(bar) + 1;\n"),
    ("javascript", "const y = foo(█);\n", "bar);", "bar", 0, "const y = foo(bar);\n"),
    ("rust", "fn main() {\n    let v = vec![█];\n}\n", "1, 2];", "1, 2", 0, "fn main() {\n    let v = vec![1, 2];\n}\n"),
    ("typescript", "const s = `a${f(█)}`;\n", "x)}`;", "x", 0, "const s = `a${f(x)}`;\n"),
])
def test_closers_after_the_cursor_are_not_doubled(language, src, fill, text, replace, result):
    ctx = ctx_for(src, language)
    s, _ = run(ctx, fill)
    assert (s.text, s.replace_chars) == (text, replace)
    assert apply(ctx, s) == result


def test_brackets_inside_strings_of_the_fill_are_ignored():
    ctx = ctx_for("log(█)\n")
    s, _ = run(ctx, '"(:"), x')
    assert (s.text, s.replace_chars) == ('"(:"), x', 1) and apply(ctx, s) == 'log("(:"), x\n'


# --- 5. syntax ---------------------------------------------------------------------------------

@pytest.mark.parametrize("language,src,good,bad", [
    ("python", "def f(x):\n    y = x + 1\n    █\n    return y\n", "y += 2", "y = (x +"),
    ("javascript", "function f(x) {\n  █\n  return x;\n}\n", "x += 1;", "x = ) 1;"),
    ("go", "package main\n\nfunc f(x int) int {\n\t█\n\treturn x\n}\n", "x++", "x = = 1"),
    ("java", "class A {\n    int f(int x) {\n        █\n        return x;\n    }\n}\n", "x += 1;", "x += ;;)"),
])
def test_a_fill_that_adds_a_parse_error_is_rejected(language, src, good, bad):
    ctx = ctx_for(src, language)
    assert run(ctx, good)[0].text == good
    s, reasons = run(ctx, bad)
    assert s is None and reasons[-1] == "parse-error"
    text = ctx.document.text
    assert creates_parse_error(text, Candidate.at(ctx.offset, bad, Source.MODEL), language)
    assert not creates_parse_error(text, Candidate.at(ctx.offset, good, Source.MODEL), language)


@pytest.mark.parametrize("language,src,fill,kept", [
    ("python", "class T:\n    def test(self):\n        self█\n\n    def g(self):\n        pass\n",
     ".assertEqual(self.append(self.args, self.append(x", ".assertEqual"),
    ("python", "def f(x):\n    y = x█\n    return y\n", ' + g(x) + h("a, b', " + g(x) + h"),
    ("javascript", "function f(x) {\n  x█\n  return x;\n}\n", ".map((v) => [v, g(v", ".map"),
    ("python", "def f(x):\n    fo█\n    return x\n", "o = self.name_from_name)", "o = self.name_from_name"),
    ("python", "def f(x):\n    y = x█\n    return y\n", " + x.total.", " + x.total"),  # a dangling operator
    ("python", "def f(x):\n    y = x█\n    return y\n", " + g(x, h.", " + g"),
])
def test_a_fill_that_dangles_leaves_a_bracket_open_or_closes_one_it_never_opened_is_cut(language, src, fill, kept):
    ctx = ctx_for(src, language)
    s, reasons = run(ctx, fill)
    assert s.text == kept and reasons[-1] is Cut.UNBALANCED
    assert not creates_parse_error(ctx.document.text, s, language)
    assert creates_parse_error(ctx.document.text, Candidate.at(ctx.offset, fill, Source.MODEL), language)


def test_an_existing_error_elsewhere_does_not_block_a_good_fill():
    ctx = ctx_for("def broken(:\n    pass\n\ndef f(x):\n    return █\n")
    assert run(ctx, "x * 2")[0].text == "x * 2"


def test_unknown_language_skips_the_syntax_check():
    ctx = ctx_for("key = █\n", "plaintext")
    assert run(ctx, "((( value")[0].text == "((( value"
    assert not creates_parse_error("key = \n", Candidate.at(6, "(((", Source.MODEL), "plaintext")


# --- whole pipeline -------------------------------------------------------------------------------

@pytest.mark.parametrize("fill", ["", "   ", "\n\n", "\t\n "])
def test_empty_fills_are_rejected(fill):
    s, reasons = run(ctx_for("x = █\n"), fill)
    assert s is None and reasons == ["empty"]


def test_binary_text_and_huge_lines_do_not_crash():
    blob = bytes(range(256)).decode("latin-1") * 50 + "\udcff"
    doc = Document("file:///w/b.py", blob, "python")
    ctx = gather(doc, len(blob) // 2)
    postprocess(ctx, "\x00\x01 x)", pieces=["\x00", "\x01 x)"], confidence=[0.9, 0.9], confidence_cut=0.5)
    huge = "x = f(" + "a, " * 100_000 + ")\n"
    ctx = gather(Document("file:///w/h.py", huge, "python"), len(huge) - 2)
    assert postprocess(ctx, "b)", check_syntax=True) == Candidate.at(len(huge) - 2, "b", Source.MODEL)  # the line's own ")" is not typed twice
    assert not creates_parse_error(huge, Candidate.at(len(huge) - 2, "b", Source.MODEL), "python")
