"""A parameter added to a def whose body starts with a nested def (nextedit/calls.py): the step the
edit log records spans the def's line and the line below it (history.CONTEXT), so it spans the
nested def's parameters too; the def that changed is the one whose parameter list changed. Decorator
factories, decorated methods, a method of a nested class, a nested def that changed itself; one step
that changed two parameter lists is not followed, and says so in one debug line."""

from __future__ import annotations

import logging

import pytest

from diffusion_lsp.context.languages import language_for
from diffusion_lsp.nextedit.signature import call_edits
from diffusion_lsp.nextedit.history import EditLog
from test_calls import suggest_until_done

PY = language_for("python", "a.py")

FACTORY = '''def _cache(cache, maxsize):
    def decorator(func):
        return func
    return decorator


@_cache({}, 10)
def f():
    pass


g = _cache({}, 3)
'''
METHOD = '''class Store:
    @traced
    def opener(self, mode):
        def read(path):
            return open(path, mode)
        return read

    def load(self, path):
        return self.opener("r")(path)
'''
NESTED_CLASS = '''class Outer:
    class Inner:
        def scale(self, x):
            def clamp(v):
                return v
            return clamp(x)

        def twice(self, x):
            return self.scale(x) + self.scale(2 * x)

    def scale(self, x):
        return self.scale(x)
'''
INNER = '''def outer(a):
    def inner(x):
        return x
    return inner(a) + outer(a)
'''
CLASS_BODY = '''class Fraction:
    def _operator_fallbacks(monomorphic, fallback):
        """A def of the class body, called bare in the class body (fractions.py)."""
        def forward(a, b):
            return monomorphic(a, b)
        return forward

    __add__ = _operator_fallbacks(_add, operator.add)
    __sub__ = _operator_fallbacks(_sub, operator.sub)

    def method(self):
        return _operator_fallbacks(1, 2)
'''
SCRIPT = '''function cache(store, size) {
  function decorator(fn) {
    return fn;
  }
  return decorator;
}
const c = cache({}, 3);
'''

CASES = [  # (source, the def's line before, after, the lines of the calls after every edit)
    (FACTORY, "def _cache(cache, maxsize):", "def _cache(cache, maxsize, typed):",
     ["@_cache({}, 10, typed)", "g = _cache({}, 3, typed)"]),
    (METHOD, "    def opener(self, mode):", "    def opener(self, mode, encoding):",
     ['        return self.opener("r", encoding)(path)']),
    (NESTED_CLASS, "        def scale(self, x):", "        def scale(self, x, factor):",  # not Outer's scale
     ["            return self.scale(x, factor) + self.scale(2 * x, factor)"]),
    (INNER, "    def inner(x):", "    def inner(x, y):", ["    return inner(a, y) + outer(a)"]),
    (SCRIPT, "function cache(store, size) {", "function cache(store, size, ttl) {", ["const c = cache({}, 3, ttl);"]),
    (CLASS_BODY, "    def _operator_fallbacks(monomorphic, fallback):", "    def _operator_fallbacks(monomorphic, fallback, name):",
     ["    __add__ = _operator_fallbacks(_add, operator.add, name)",  # not the method's: the module's name there
      "    __sub__ = _operator_fallbacks(_sub, operator.sub, name)"]),
]


def logged_step(source: str, old: str, new: str):
    """The text after old -> new and the steps the server's edit log records for it."""
    line = source.splitlines().index(old)
    text = source.replace(old + "\n", new + "\n", 1)
    log = EditLog(merge_s=0)
    log.note("file:///a", "a", source, text, line, line, line)
    return text, list(log.steps)


@pytest.mark.parametrize("source, old, new, calls_after", CASES,
                         ids=["decorator factory", "decorated method", "nested class", "nested def", "javascript",
                              "called in the class body"])
def test_the_def_whose_parameters_changed_is_followed_not_the_def_nested_in_it(source, old, new, calls_after):
    spec = language_for("javascript", "a.js") if source is SCRIPT else PY
    text, steps = logged_step(source, old, new)
    assert len(steps[-1].new) >= 2  # the def's line and the nested def's below it (and the line above)
    found = call_edits(steps, text, spec)
    assert found is not None and found[0].function == new.split("(")[0].split()[-1] and found[0].kind == "added"
    after = text
    for s, e, put in reversed(found[1]):
        after = after[:s] + put + after[e:]
    assert [b for a, b in zip(text.splitlines(), after.splitlines()) if a != b] == calls_after


def test_the_server_shows_a_decorator_factorys_calls_one_by_one():
    text = FACTORY.replace("def _cache(cache, maxsize):", "def _cache(cache, maxsize, typed):")
    text, shown = suggest_until_done(text, FACTORY, 0)
    assert [t for _, t in shown] == [", typed", ", typed"] and [line for line, _ in shown] == [6, 11]
    assert "@_cache({}, 10, typed)" in text and "g = _cache({}, 3, typed)" in text


def test_a_step_that_changed_two_parameter_lists_is_not_followed_and_says_why(caplog):
    old = FACTORY.splitlines(keepends=True)
    text = FACTORY.replace("def _cache(cache, maxsize):\n    def decorator(func):",
                           "def _cache(cache, maxsize, typed):\n    def decorator(func, key):")
    log = EditLog(merge_s=0)
    log.note("file:///a", "a", FACTORY, text, 0, 1, 1)
    assert "".join(old[:2]) != "".join(text.splitlines(keepends=True)[:2])
    with caplog.at_level(logging.DEBUG, logger="diffusion_lsp.nextedit.signature"):
        assert call_edits(list(log.steps), text, PY) is None
    said = [r.getMessage() for r in caplog.records if r.name == "diffusion_lsp.nextedit.signature"]
    assert said == ["signature not followed: one step changed the parameters of _cache and decorator"]
