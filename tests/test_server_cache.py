"""The completion cache: exact hits, negative entries, type-ahead through the suggestion, LRU."""

from __future__ import annotations

from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.server.cache import CompletionCache

PREFIX, SUFFIX = "def f(x):\n    return ", "\n\nprint(f(1))\n"


def after(prefix: str, text: str, replace_chars: int = 0) -> Candidate:
    """The model's completion at the cursor after `prefix`."""
    return Candidate.at(len(prefix), text, Source.MODEL, replace_chars)


def test_exact_hit_and_negative_entry():
    cache = CompletionCache()
    cache.put("a.py", PREFIX, SUFFIX, after(PREFIX, "x + 1"))
    cache.put("a.py", "x = ", "", None)
    assert cache.lookup("a.py", PREFIX, SUFFIX) == (True, after(PREFIX, "x + 1"))
    assert cache.lookup("a.py", "x = ", "") == (True, None)  # asked before, nothing to say
    assert cache.lookup("b.py", PREFIX, SUFFIX) == (False, None)
    assert cache.lookup("a.py", PREFIX, SUFFIX + " ") == (False, None)


def test_typing_the_suggestion_answers_the_rest():
    cache = CompletionCache()
    cache.put("a.py", PREFIX, SUFFIX, after(PREFIX, "x + 1)", 1))
    assert cache.lookup("a.py", PREFIX + "x", SUFFIX) == (True, after(PREFIX + "x", " + 1)", 1))
    assert cache.lookup("a.py", PREFIX + "x + ", SUFFIX) == (True, after(PREFIX + "x + ", "1)", 1))
    assert cache.lookup("a.py", PREFIX + "x + 1)", SUFFIX) == (False, None)  # all typed: ask the model
    assert cache.lookup("a.py", PREFIX + "y", SUFFIX) == (False, None)  # typed something else
    assert cache.lookup("a.py", "#" + PREFIX[1:] + "x", SUFFIX) == (False, None)  # same length, other text
    assert cache.lookup("a.py", PREFIX + "x", SUFFIX + "!") == (False, None)


def test_least_recently_used_entries_go_first():
    cache = CompletionCache(size=2)
    for i in range(2):
        cache.put("a.py", f"p{i}", "", after(f"p{i}", f"s{i}"))
    assert cache.lookup("a.py", "p0", "")[0]  # p0 is now the most recent
    cache.put("a.py", "p2", "", after("p2", "s2"))
    assert len(cache) == 2
    assert [cache.lookup("a.py", f"p{i}", "")[0] for i in range(3)] == [True, False, True]


def test_size_zero_disables_and_clear_empties():
    off = CompletionCache(size=0)
    off.put("a.py", PREFIX, SUFFIX, after(PREFIX, "x"))
    assert off.lookup("a.py", PREFIX, SUFFIX) == (False, None)
    cache = CompletionCache()
    cache.put("a.py", PREFIX, SUFFIX, after(PREFIX, "x"))
    cache.clear()
    assert len(cache) == 0
