"""The rest of a rename (nextedit/scope.py): scoping on known sources in each language the server
parses (a shadowing local, a same-named local in another function, a string or comment holding the
name, an attribute or field of the same name), the grouping and the jump, and the chain through
the language server: rename, accept, next site, never an edited site again."""

from __future__ import annotations

import asyncio

import pytest

from diffusion_lsp.context.languages import language_for
from diffusion_lsp.context.records import Document
from diffusion_lsp.nextedit.history import EditLog, Step
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.nextedit.budget import Budget
from diffusion_lsp.nextedit.follow import follow
from diffusion_lsp.nextedit.rule import Documents, History
from diffusion_lsp.nextedit.rules import next_group, propose
from diffusion_lsp.nextedit.scope import Rename, last_rename, renamed, sites
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import NextEditor
from diffusion_lsp.server.positions import UTF16, range_at
from diffusion_lsp.server.stats import NextEditStats


def follow_on(text: str, spec, steps: list[Step], cursor: int, going):
    """(the rules' next group, the change it carries on), as the server asks them for one document;
    (None, None) when there is none."""
    found = propose(Documents(text, spec, cursor), History.of_one(steps, going, Budget()))
    return (found.candidates[0], found.change) if found.candidates else (None, None)


def lines_of(text: str, found) -> list[tuple[int, str]]:
    return [(text.count("\n", 0, a) + 1, text[a:b]) for a, b in found]


PYTHON = '''def remove(self, key):
    result = self._dict.copy()
    q.pop(key, None)
    s = "q is here"  # q in a comment
    x.q = 1
    f(q=2)
    def inner(q):
        return q
    def closure():
        return q + 1
    return QueryParams(q)


def other():
    q = 3
    return q
'''


def test_python_local_renamed_where_it_is_assigned():
    found = sites(PYTHON, language_for("python"), Rename("q", "result", PYTHON.index("result")))
    # its uses, the closure's included; not the string, the comment, x.q, f(q=...), inner's own q, other()'s q
    assert lines_of(PYTHON, found) == [(3, "q"), (10, "q"), (11, "q")]


def test_python_parameter_and_attribute():
    src = "class A:\n    def __init__(self, size):\n        self.total = size\n        self.count = 0\n\n" \
          "    def add(self, count):\n        self.count += count\n        return self.count\n"
    py = language_for("python")
    # an attribute renamed where it is set: its uses through self in the class, not the parameter `count`
    renamed_src = src.replace("self.count = 0", "self.tally = 0")
    found = sites(renamed_src, py, Rename("count", "tally", renamed_src.index("tally")))
    assert lines_of(renamed_src, found) == [(7, "count"), (8, "count")]
    assert all(renamed_src[a - 5:a] == "self." for a, _ in found)
    # a parameter renamed in the def: its uses in that function only
    param = src.replace("def add(self, count)", "def add(self, n)")
    found = sites(param, py, Rename("count", "n", param.index("n)")))
    assert lines_of(param, found) == [(7, "count")] and param[found[0][0] - 3:found[0][0]] == "+= "


DOCUMENTED = '''def area(w, h):
    """Area of a w by h box; w must not be negative.

    :param w: the width
    :type w: int
    Args:
        w (int): the width, not `w2` nor ``width``
    w : int
        NumPy style
    ``w`` and `w` too.
     - w   : a bulleted entry
    """
    return w * h


def other(w):
    """:param w: another function's w"""
    return w
'''


def test_a_parameter_renamed_is_renamed_where_its_docstring_names_it_and_nowhere_else_in_it():
    src = DOCUMENTED.replace("def area(w,", "def area(width,")
    found = sites(src, language_for("python"), Rename("w", "width", src.index("width")))
    # the reST fields, the Google and NumPy entries, the backticked mentions and the use; not the prose
    # ("a w by h box; w must"), not `w2`, not other()'s docstring or body
    assert lines_of(src, found) == [(4, "w"), (5, "w"), (7, "w"), (8, "w"), (10, "w"), (10, "w"), (11, "w"), (13, "w")]
    local = "def f():\n    \"\"\":param v: not a parameter of f\"\"\"\n    v = 1\n    return v\n"
    renamed_local = local.replace("v = 1", "count = 1")  # a local, not a parameter: its docstring stays
    found = sites(renamed_local, language_for("python"), Rename("v", "count", renamed_local.index("count")))
    assert lines_of(renamed_local, found) == [(4, "v")]


def test_a_rename_goes_on_after_its_docstring_mention_is_accepted():
    old = 'def area(w, h):\n    """:param w: the width"""\n    a = 1\n    b = 2\n    c = 3\n    d = 4\n    return w * h\n'
    text = old.replace("def area(w,", "def area(width,")
    steps, going, shown = [Step("u", "a.py", 0, ["def area(w, h):\n"], ["def area(width, h):\n"])], None, []
    while (on := follow_on(text, language_for("python"), steps, 20, going))[0] is not None and len(shown) < 4:
        found = on[0]
        line = text.count("\n", 0, found.start)
        before = text.splitlines(keepends=True)[line]
        text, going = text[:found.start] + found.text + text[found.end:], on[1]
        steps.append(Step("u", "a.py", line, [before], [text.splitlines(keepends=True)[line]]))
        shown.append(line)
    assert shown == [1, 6] and text == old.replace("w,", "width,").replace(" w:", " width:").replace("w *", "width *")


def test_a_name_swapped_at_a_use_is_not_a_rename_unless_one_is_going_on():
    src = "def f(a, b):\n    g(b)\n    return a + b\n"
    py = language_for("python")
    change = Rename("a", "b", src.index("g(b") + 2)
    assert sites(src, py, change) == []  # an argument changed, not a rename
    assert lines_of(src, sites(src, py, change, at_binding=False)) == [(1, "a"), (3, "a")]


@pytest.mark.parametrize("language, source, new, expected", [
    ("javascript", "function f(result) {\n  const s = 'q';  // q\n  o.q = q;\n  return {q, k: q};\n}\n"
                   "function g() { const q = 1; return q; }\n", "result",
     [(3, "q"), (4, "q"), (4, "q")]),
    ("typescript", "function f(result: number): number {\n  const s = 'q';\n  return o.q + q;\n}\n"
                   "function g(q: number) { return q; }\n", "result", [(3, "q")]),
    ("go", "package m\n\nfunc f(result int) int {\n\ts := \"q\"\n\treturn o.q + q\n}\n\n"
           "func g(q int) int { return q }\n", "result", [(5, "q")]),
    ("rust", "fn f(result: i32) -> i32 {\n    let s = \"q\";\n    s.q + q\n}\n\nfn g(q: i32) -> i32 { q }\n",
     "result", [(3, "q")]),
    ("java", "class A {\n  int f(int result) {\n    String s = \"q\";\n    return this.q + q;\n  }\n"
             "  int g(int q) { return q; }\n}\n", "result", [(4, "q")]),
    ("c", "int f(int result) {\n  char *s = \"q\";\n  return o.q + q;\n}\nint g(int q) { return q; }\n",
     "result", [(3, "q")]),
    ("cpp", "int f(int result) {\n  auto s = \"q\";\n  return o.q + q;\n}\nint g(int q) { return q; }\n",
     "result", [(3, "q")]),
])
def test_parameter_renamed_in_each_language(language, source, new, expected):
    found = sites(source, language_for(language), Rename("q", new, source.index(new)))
    assert lines_of(source, found) == expected


def test_close_sites_are_one_suggestion_and_the_next_one_comes_first_then_the_first_in_the_file():
    text = "a\nq\nq\n\n\n\n\n\nq\n"
    found = [Candidate(i, i + 1, "z", Source.RENAME) for i, ch in enumerate(text) if ch == "q"]

    def group(sites, cursor):
        found = next_group(text, sites, cursor)
        return found and (found.start, found.end, found.text)
    assert group(found, 0) == (2, 5, "z\nz")  # lines 2 and 3: one edit
    assert group(found, 6) == (11, 12, "z")  # after the cursor: the one at line 9
    assert group(found[:2], 11) == (2, 5, "z\nz")  # none after it: back to the first (a jump)
    assert group([], 0) is None


def test_a_rename_typed_with_pauses_is_one_rename():
    text = "def f():\n    result = 1\n    return q\n"
    steps = [Step("u", "p", 1, ["    q = 1\n"], ["    res = 1\n"]), Step("u", "p", 1, ["    res = 1\n"], ["    result = 1\n"])]
    assert last_rename(steps, text) == Rename("q", "result", text.index("result"))
    assert renamed("x = q\n", "x = 1\n", 0) is None  # a literal, not a name
    assert renamed("if a:\n", "if not a:\n", 0) is None
    found = follow(text, language_for("python"), steps, 0)
    assert (found.start, found.end, found.text) == (text.index("q"), text.index("q") + 1, "result")


def test_the_server_follows_a_rename_site_by_site_and_never_proposes_an_edited_site_again():
    class NoModel:  # the sites come from the code: the model is never asked
        capabilities = None

    before = "def total(items):\n    acc = 0\n    for x in items:\n        acc += x\n\n\n\n\n    return acc\n"
    log, uri = EditLog(merge_s=0), "file:///t.py"
    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log)
    editor.configure(parse_config({"nextEdit": {"enable": False}})[0])  # the model's own next edits off
    text = before.replace("acc = 0", "sum_ = 0")
    log.note(uri, "t.py", before, text, 1, 1, 1)
    shown, version = [], 1
    while True:
        version += 1
        answer = asyncio.run(editor.suggest(Document(uri, text, "python", version), version, 1, 8, UTF16, "t.py"))
        if answer is None:
            break
        edit = answer.shown
        shown.append((range_at(text, edit.start, edit.end, UTF16), edit.text, answer.jump))
        after = text[:edit.start] + edit.text + text[edit.end:]  # the user presses Tab
        line = text.count("\n", 0, edit.start)
        log.note(uri, "t.py", text, after, line, line, line)
        text = after
    assert text == before.replace("acc", "sum_")
    assert shown == [(((3, 8), (3, 11)), "sum_", False), (((8, 11), (8, 14)), "sum_", True)]  # then a jump
    assert editor.stats.reasons == {"scope": 2}


def utf16_offset(text: str, position: tuple[int, int]) -> int:
    """An LSP position in UTF-16 code units -> an offset of `text`, the way a client reads it."""
    line, column = position
    start = sum(len(x) for x in text.split("\n")[:line]) + line
    units = text.split("\n")[line].encode("utf-16-le")[:2 * column]
    return start + len(units.decode("utf-16-le"))


def follow_through_the_server(before: str, text: str, language: str, path: str) -> tuple[str, list]:
    """Every next edit the server proposes after the change `before` -> `text` (on line 0), each
    applied the way a client applies it, by its UTF-16 range."""
    class NoModel:  # the sites come from the code: the model is never asked
        capabilities = None

    log, uri = EditLog(merge_s=0), "file:///" + path
    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log)
    editor.configure(parse_config({"nextEdit": {"enable": False}})[0])
    log.note(uri, path, before, text, 0, 0, 0)
    shown, version = [], 1
    while len(shown) < 6:
        version += 1
        answer = asyncio.run(editor.suggest(Document(uri, text, language, version), version, 0, 0, UTF16, path))
        if answer is None:
            break
        edit = answer.shown
        (a, b) = (utf16_offset(text, p) for p in range_at(text, edit.start, edit.end, UTF16))
        assert (a, b) == (edit.start, edit.end)  # an astral character before a site shifts nothing
        shown.append(text[a:b])
        after = text[:a] + edit.text + text[b:]
        line = text.count("\n", 0, a)
        log.note(uri, path, text, after, line, line + text.count("\n", a, b), line + edit.text.count("\n"))
        text = after
    return text, shown


SCRIPTS = '''def area(OLD, h):
    s = "𠀀😀"; t = OLD * h
    def inner():
        return OLD + 1



    return s, t, inner(), OLD  # 😀
'''


@pytest.mark.parametrize("old, new", [("acc", "πw"), ("πw", "acc"), ("acc", "𠀀x"), ("𠀀x", "acc"), ("acc", "é"),
                                      ("é", "acc"), ("𝓌idth", "acc"), ("acc", "𝓌idth"), ("𠀀x", "𠀀y"),
                                      ("acc", "e\u0301"), ("नमस्ते", "acc")])
def test_a_rename_to_or_from_a_name_of_any_script_is_followed_to_its_end(old, new):
    # a name is what the language calls one (XID: letters of any script, astral ones too, and the
    # marks \w does not take: a decomposed é, Devanagari's vowel signs), not [A-Za-z_]\w*
    before = SCRIPTS.replace("OLD", old)
    text, shown = follow_through_the_server(before, before.replace(f"area({old},", f"area({new},"), "python", "a.py")
    assert text == SCRIPTS.replace("OLD", new)
    assert shown == [f"{old} * h\n    def inner():\n        return {old}", old]  # two suggestions: the last a jump


@pytest.mark.parametrize("defined, used", [("𝓌idth", "width"), ("width", "𝓌idth")])
def test_python_names_are_compared_after_nfkc_as_python_does(defined, used):
    # Python reads 𝓌idth as width (PEP 3131): one name, renamed everywhere; JavaScript does not
    before = SCRIPTS.replace("OLD", used).replace(f"area({used},", f"area({defined},")
    text, shown = follow_through_the_server(before, before.replace(f"area({defined},", "area(w,"), "python", "a.py")
    assert text == SCRIPTS.replace("OLD", "w") and len(shown) == 2
    js = "function area(OLD, h) {\n  return OLD * h;\n}\n"
    src = js.replace("OLD", used).replace(f"area({used},", f"area({defined},")
    assert sites(src, language_for("javascript"), Rename(used, defined, src.index(defined))) == \
        [(src.index(f"return {used}") + 7, src.index(f"return {used}") + 7 + len(used))]  # another name there
    assert renamed(f"x = {defined}\n", f"x = {used}\n", 0) is not None  # text-wise a swap, but in Python no rename:
    assert sites(f"def f({used}):\n    return {defined}\n", language_for("python"),
                 Rename(defined, used, 6)) == []


@pytest.mark.parametrize("language, source", [
    ("javascript", "function f(NEW) {\n  const s = '😀'; return OLD + OLD;\n}\n"),
    ("typescript", "function f(NEW: number): number {\n  return OLD + OLD;\n}\n"),
    ("go", "package m\n\nfunc f(NEW int) int {\n\treturn OLD + OLD\n}\n"),
    ("rust", "fn f(NEW: i32) -> i32 {\n    OLD + OLD\n}\n"),
    ("java", "class A {\n  int f(int NEW) {\n    return OLD + OLD;\n  }\n}\n"),
    ("c", "int f(int NEW) {\n  return OLD + OLD;\n}\n"),
    ("cpp", "int f(int NEW) {\n  return OLD + OLD;\n}\n"),
])
@pytest.mark.parametrize("old, new", [("q", "πw"), ("πw", "q"), ("q", "𠀀x"), ("𠀀x", "q"), ("q", "é"), ("𝓌idth", "q")])
def test_names_of_any_script_are_renamed_in_each_language(language, source, old, new):
    text, line = source.replace("NEW", new).replace("OLD", old), source[:source.index("NEW")].count("\n")
    step = Step("u", "p", line, [source.replace("NEW", old).split("\n")[line] + "\n"], [text.split("\n")[line] + "\n"])
    assert last_rename([step], text) == Rename(old, new, text.index(new))
    found = sites(text, language_for(language), Rename(old, new, text.index(new)))
    assert [text[a:b] for a, b in found] == [old, old]
