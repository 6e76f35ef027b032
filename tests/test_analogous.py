"""An argument changed at one call, made again at the analogous calls (nextedit/analogous.py): the
same function, the same place (position or keyword), the same old argument; in each language the
server parses; never another function, another place, or an argument that only contains the text."""

from __future__ import annotations

import pytest

from diffusion_lsp.context.languages import language_for
from diffusion_lsp.nextedit.analogous import arg_change, analogous_edits
from diffusion_lsp.nextedit.follow import follow
from diffusion_lsp.nextedit.history import Step

PY = '''x = fetch(url, timeout=10)
y = fetch(other, timeout=10)
z = store(url, timeout=10)
w = fetch(url, timeout=100)
v = client.fetch(url, timeout=10)
'''


def sites(text: str, spec, line: int, old: str, new: str) -> list[tuple[int, str]]:
    lines = text.splitlines(keepends=True)
    changed = text.replace(lines[line], lines[line].replace(old, new, 1), 1)
    step = Step("u", "f", line, [lines[line]], [changed.splitlines(keepends=True)[line]])
    change = arg_change([step], changed, spec)
    return [] if change is None else [(changed.count("\n", 0, s) + 1, n) for s, _, n in
                                      analogous_edits(changed, spec, change)]


def test_a_keyword_argument_changed_reaches_the_same_functions_calls_that_pass_the_same_value():
    assert sites(PY, language_for("python"), 0, "timeout=10", "timeout=30") == [(2, "30")]


def test_a_positional_argument_changed_and_nothing_when_no_call_is_analogous():
    text = "a = f(1, x[0])\nb = f(2, x[0])\nc = f(x[0], 1)\nd = g(1, x[0])\n"
    assert sites(text, language_for("python"), 0, "x[0]", "x[1]") == [(2, "x[1]")]  # not c's first, not g's
    assert sites(text, language_for("python"), 3, "x[0]", "x[1]") == []  # g has no other call
    assert sites("a = f(1, x)\nb = f(2, x)\n", language_for("python"), 0, "x", "y") == []  # a name for a name


@pytest.mark.parametrize("language, text, line, old, new, expected", [
    ("javascript", "log(a, 'x');\nlog(b, 'x');\nother(c, 'x');\n", 0, "'x'", "'y'", [(2, "'y'")]),
    ("go", "package m\nfunc f() {\n\tfmt.Println(a, 1)\n\tfmt.Println(b, 1)\n}\n", 2, "1", "2", [(4, "2")]),
    ("java", "class A { void f() {\n  foo.bar(1, 2);\n  foo.bar(3, 2);\n  baz.bar(4, 2);\n} }\n", 1, "2)", "5)",
     [(3, "5")]),
])
def test_in_other_languages(language, text, line, old, new, expected):
    assert sites(text, language_for(language), line, old, new) == expected


def test_a_change_of_two_arguments_or_of_the_function_is_not_followed():
    spec = language_for("python")
    assert sites("a = f(1, 2)\nb = f(1, 2)\n", spec, 0, "f(1, 2)", "f(3, 4)") == []
    assert sites("a = f(1, 2)\nb = f(1, 2)\n", spec, 0, "f(1", "g(1") == []


def test_follow_proposes_it_after_a_rename_and_a_signature_found_nothing():
    spec = language_for("python")
    text = PY.replace("x = fetch(url, timeout=10)", "x = fetch(url, timeout=30)")
    step = Step("u", "f", 0, ["x = fetch(url, timeout=10)\n"], ["x = fetch(url, timeout=30)\n"])
    found = follow(text, spec, [step], 0)
    assert (found.start, found.end, found.text) == (text.index("timeout=10") + 8, text.index("timeout=10") + 10, "30")


def test_a_renames_step_at_a_use_inside_an_argument_is_not_an_argument_change():
    text = "a = f(self.x, **kw)\nb = f(self.x, **kw)\n"
    assert sites(text, language_for("python"), 0, "self.x", "self.y") == []
    assert sites(text, language_for("python"), 0, "**kw", "**kw_2") == []
