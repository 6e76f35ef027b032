"""A wrapper removed from an argument at one call, removed at the other calls (nextedit/unwrap.py):
the same function, the same wrapper, the same argument's place; the wrapped expression may differ.
In Python and JavaScript, by the rule alone, through the rules' table (`follow`) and through the
language server's next-edit path, call by call as a user accepts them."""

from __future__ import annotations

import asyncio

from diffusion_lsp.candidate import Source
from diffusion_lsp.context.languages import language_for
from diffusion_lsp.context.records import Document
from diffusion_lsp.nextedit.follow import follow
from diffusion_lsp.nextedit.history import EditLog, Step
from diffusion_lsp.nextedit.unwrap import Unwrap, unwrap_change, unwrap_edits
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import NextEditor
from diffusion_lsp.server.positions import UTF16
from diffusion_lsp.server.stats import NextEditStats

PY = language_for("python")
SOURCE = """def total(price, qty):
    return price * qty


a = total(float(price), 1)
b = total(float(price), 2)
c = total(float(row["price"]), 3)
d = total(int(price), 4)
e = total(1, float(qty))
f = other(float(price), 5)
g = total(float(price, 0), 6)
h = self.total(float(price), 7)
"""


def unwrapped_at(line: str, source: str = SOURCE, path: str = "a.py", spec=PY, old: str = "float(price)",
                 new: str = "price") -> tuple[str, Step]:
    """`source` after the user unwrapped `old` on `line`, and that step."""
    at = source.splitlines().index(line)
    after = line.replace(old, new, 1)
    return source.replace(line + "\n", after + "\n", 1), Step("u", path, at, [line + "\n"], [after + "\n"])


def lines_of(text: str, edits) -> list[tuple[int, str, str]]:
    return [(text.count("\n", 0, s) + 1, text[s:e], new) for s, e, new in edits]


def test_the_same_wrapper_in_the_same_place_at_the_same_functions_calls_is_unwrapped():
    text, step = unwrapped_at("a = total(float(price), 1)")
    change = unwrap_change([step], text, PY)
    assert change == Unwrap("total", 0, "float")
    # not int(...), not the second argument, not other(), not float(x, y), not self.total()
    assert lines_of(text, unwrap_edits(text, PY, change)) == [(6, "float(price)", "price"),
                                                              (7, 'float(row["price"])', 'row["price"]')]


def test_follow_proposes_it_where_the_argument_rule_sees_no_change():
    text, step = unwrapped_at("a = total(float(price), 1)")
    found = follow(text, PY, [step], 0)
    assert found.source is Source.UNWRAP
    assert found.apply(text).splitlines()[5:7] == ["b = total(price, 2)", 'c = total(row["price"], 3)']


def test_no_proposal_where_the_wrapper_differs():
    source = "a = total(float(price), 1)\nd = total(int(price), 4)\nf = total(str(price), 5)\n"
    text, step = unwrapped_at("a = total(float(price), 1)", source)
    assert unwrap_change([step], text, PY) == Unwrap("total", 0, "float")
    assert follow(text, PY, [step], 0) is None


def test_a_keyword_argument_is_its_place():
    source = "x = fetch(url, timeout=float(t))\ny = fetch(url, timeout=float(s))\nz = fetch(float(s), timeout=1)\n"
    text, step = unwrapped_at("x = fetch(url, timeout=float(t))", source, old="float(t)", new="t")
    assert lines_of(text, unwrap_edits(text, PY, unwrap_change([step], text, PY))) == [(2, "float(s)", "s")]


def test_a_wrapper_changed_or_added_is_no_unwrapping():
    for line, old, new in [("a = total(float(price), 1)", "float(price)", "int(price)"),
                           ("d = total(int(price), 4)", "int(price)", "float(int(price))"),
                           ("e = total(1, float(qty))", "total(1, float(qty))", "total(1, qty, 2)")]:
        text, step = unwrapped_at(line, old=old, new=new)
        assert unwrap_change([step], text, PY) is None


def test_javascript_calls_are_unwrapped_too():
    js = language_for("javascript", "a.js")
    source = "const a = total(Number(price), 1);\nconst b = total(Number(cost), 2);\nconst c = total(String(cost), 3);\n"
    text, step = unwrapped_at("const a = total(Number(price), 1);", source, "a.js", js, "Number(price)")
    found = follow(text, js, [step], 0)
    assert found.source is Source.UNWRAP
    assert found.apply(text).splitlines() == ["const a = total(price, 1);", "const b = total(cost, 2);",
                                              "const c = total(String(cost), 3);"]


def test_the_server_proposes_it_call_by_call_and_the_user_accepts_each():
    class NoModel:  # the sites come from the code: the model is never asked
        capabilities = None

    log, uri = EditLog(merge_s=0), "file:///prices.py"
    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log)
    editor.configure(parse_config({"nextEdit": {"enable": False, "debounceMs": 0}})[0])
    source = SOURCE + "\n" * 30 + "z = total(float(qty), 8)\n"  # a call far below: a jump
    line = source.splitlines().index("a = total(float(price), 1)")
    text = source.replace("total(float(price), 1)", "total(price, 1)")
    log.note(uri, "prices.py", source, text, line, line, line)
    shown, version = [], 1
    while len(shown) < 5:
        version += 1
        answer = asyncio.run(editor.suggest(Document(uri, text, "python", version), version, line, 0, UTF16,
                                            "prices.py"))
        if answer is None:
            break
        edit = answer.shown
        shown.append((edit.source, text.count("\n", 0, edit.start), answer.jump))
        after = edit.apply(text)  # the user presses Tab
        at = text.count("\n", 0, edit.start)
        log.note(uri, "prices.py", text, after, at, text.count("\n", 0, edit.end), after.count("\n", 0, edit.start
                                                                                              + len(edit.text)))
        text = after
    assert shown == [(Source.UNWRAP, 5, False), (Source.UNWRAP, 42, True)]
    assert text == source.replace("total(float(price), 1)", "total(price, 1)").replace(
        "total(float(price), 2)", "total(price, 2)").replace('total(float(row["price"]), 3)', 'total(row["price"], 3)') \
        .replace("total(float(qty), 8)", "total(qty, 8)")
    assert isinstance(editor.following[uri], Unwrap)
