"""Next-edit drafts (issue 21, part 2): the user's last change made again at the region's analogous
sites (nextedit/repeat.py), each probed in place, the one the model prefers to what is there kept
(nextedit/suggest.py). Over a fake backend whose probabilities are set per token, so each outcome
and each forward is known."""

from __future__ import annotations

import asyncio
import math

import pytest

from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.answers import Fill, Probed
from diffusion_lsp.protocol.requests import FillRequest, ProbeRequest
from diffusion_lsp.context.languages import language_for
from diffusion_lsp.nextedit import repeat
from diffusion_lsp.nextedit.history import Step
from diffusion_lsp.nextedit.settings import NextEditSettings
from diffusion_lsp.nextedit.suggest import EditRequest, preference, suggest

PY = language_for("python")
TEXT = ("def remove(self, key):\n"
        "    result = self.copy()\n"
        "    q.pop(key)\n"
        "    q.sort()\n"
        "    return q\n")
# the user renamed `q` to `result` on line 1; the right next edits are the three `q` below
STEP = Step("file:///m.py", "m.py", 1, ["    q = self.copy()\n"], ["    result = self.copy()\n"])


def test_the_last_rename_is_made_again_at_each_site_nearest_after_the_cursor_first():
    region = "a = q + 1\nq = 2\nb = q\nqq = q\n"
    got = repeat.in_region(region, region.index("b"), "q = 0\n", "total = 0\n", None)
    # after the cursor: "b = q" then "qq = q" (whole words only); then the nearest before it
    assert got == [region.replace("b = q", "b = total"), region.replace("qq = q", "qq = total"),
                   region.replace("q = 2", "total = 2")]
    assert repeat.in_region(region, 0, "q = 0\n", "total = 0\n", None, limit=1) == \
        [region.replace("a = q", "a = total")]
    assert repeat.in_region(region, 0, "x = 0\n", "y = 0\n", None) == []  # nothing to repeat it on


def test_a_line_copied_with_names_swapped_is_copied_again_below_the_next_line_with_those_names():
    region = "    self.width = width\n    self.w = w\n    self.depth = depth\n"
    anchor, added = "    self.width = width\n", "    self.height = height\n"
    got = repeat.in_region(region, 0, "", added, anchor)
    assert got == []  # no later line holds `width`: the copy was already made
    region = "    x.width = 1\n    pad(width)\n    y.width = 2\n"
    got = repeat.in_region(region, len("    x.width = 1\n"), "", "    x.height = 1\n", "    x.width = 1\n")
    assert got == [region.replace("    y.width = 2\n", "    y.width = 2\n    y.height = 2\n")]
    # a change that is no copy-and-rename, or without the line above it, is not repeated
    assert repeat.in_region(region, 0, "", "    x.height = 1\n", None) == []
    assert repeat.in_region(region, 0, "", "    z = 1\n", "    x.width = 1\n") == []


def tokens(text: str) -> list[str]:
    """One piece per word with its leading blanks, line breaks on their own."""
    import re

    return re.findall(r"[ \t]*[^\s]+|\n", text)


class Scripted:
    """A backend whose probe gives each token 0.9, but the tokens in `low` (by text) 0.01 and those in
    `high` 0.95; a fill writes nothing."""

    capabilities = Capabilities(probe=True)

    def __init__(self, low=(), high=()):
        self.low, self.high, self.orders = set(low), set(high), []

    async def probe(self, key, order: ProbeRequest) -> Probed:
        self.orders.append(order)
        pieces = tokens(order.middle)
        prob = [0.01 if p.strip() in self.low else 0.95 if p.strip() in self.high else 0.9 for p in pieces]
        return Probed(pieces, prob, [0.9] * len(pieces), forwards=order.stride, ms=1.0)

    async def fill(self, key, order: FillRequest) -> Fill:
        self.orders.append(order)
        return Fill("", [], [], ms=1.0, forwards=1, end_confidence=0.9)


def request(**settings) -> EditRequest:
    return EditRequest(TEXT, "m.py", (1, 24), PY, [STEP.diff()], STEP, NextEditSettings(region_lines=10, **settings),
                       lambda t: len(t.split()))


def run(req, backend):
    return asyncio.run(suggest(req, backend, "k"))


def test_a_draft_the_model_prefers_is_the_edit_without_the_confidence_floor():
    # the model doubts `q` (0.01) and likes `result` (0.95): the first site after the cursor wins
    backend = Scripted(low={"q.pop(key)", "q.sort()", "q"}, high={"result.pop(key)", "result.sort()", "result"})
    out = run(request(min_confidence=0.99), backend)
    assert (out.reason, out.drafts) == ("draft", 3)
    assert out.edit.apply(TEXT) == TEXT.replace("    q.pop(key)", "    result.pop(key)")
    probes = [o for o in backend.orders if isinstance(o, ProbeRequest)]
    assert len(probes) == 4 and not [o for o in backend.orders if isinstance(o, FillRequest)]  # no denoising
    assert out.forwards == 4 * 4 and out.confidence == pytest.approx(0.95)
    assert [p.middle for p in probes[1:]] == [TEXT.replace("q.pop", "result.pop"), TEXT.replace("q.sort", "result.sort"),
                                              TEXT.replace("return q", "return result")]  # the region: the file


def test_a_draft_the_model_finds_less_likely_changes_nothing_but_its_probe():
    backend = Scripted(low={"result.pop(key)", "result.sort()"})  # and `return result` no likelier than `q`
    out = run(request(), backend)
    assert (out.edit, out.reason, out.drafts, out.forwards) == (None, "no-doubt", 3, 4 * 4)
    off = Scripted(low={"q.pop(key)"}, high={"result.pop(key)"})
    out = run(request(drafts=False), off)
    assert out.drafts == 0 and out.reason != "draft" and len([o for o in off.orders if isinstance(o, ProbeRequest)]) == 1


def test_no_drafts_without_a_last_step_or_in_full_mode():
    backend = Scripted(low={"q.pop(key)"}, high={"result.pop(key)"})
    req = request()
    req.last_step = None
    assert run(req, backend).drafts == 0
    req = request()
    req.mode = "full"
    out = run(req, Scripted())
    assert out.drafts == 0 and out.mode == "full"


def test_preference_compares_the_replaced_tokens_with_the_written_ones_in_place():
    old, new = "x = q\n", "x = total\n"
    p_old = Probed(["x", " =", " q", "\n"], [0.9, 0.9, 0.1, 0.9], [0.9] * 4)
    p_new = Probed(["x", " =", " total", "\n"], [0.9, 0.9, 0.5, 0.9], [0.9] * 4)
    assert preference(old, p_old, new, p_new) == pytest.approx((math.log(0.1), math.log(0.5)))
    # a deletion is judged by the token that then stands where it was
    p_del = Probed(["x", " =", "\n"], [0.9, 0.9, 0.3], [0.9] * 3)
    assert preference(old, p_old, "x =\n", p_del) == pytest.approx((math.log(0.1), math.log(0.3)))


def test_the_language_server_offers_the_rename_at_the_next_use_and_counts_the_drafts():
    from diffusion_lsp.context.records import Document
    from diffusion_lsp.nextedit.history import EditLog
    from diffusion_lsp.server.config import parse_config
    from diffusion_lsp.server.next_edit import NextEditor
    from diffusion_lsp.server.positions import UTF16, range_at
    from diffusion_lsp.server.stats import NextEditStats

    before = "q = load()\nprint(q)\nsave(q)\n"
    after = "result = load()\nprint(q)\nsave(q)\n"  # the user renamed the first use
    log = EditLog()
    log.note("file:///a.py", "a.py", before, after, 0, 0, 0)
    backend = Scripted(low={"print(q)", "save(q)"}, high={"print(result)", "save(result)"})
    editor = NextEditor(backend, NextEditStats(), lambda kind, message: None, log)
    cfg, _ = parse_config({"nextEdit": {"enable": True, "follow": False}})  # the model's drafts, not the scope's sites
    editor.configure(cfg, count_tokens=lambda t: len(t.split()))
    edit = asyncio.run(editor.suggest(Document("file:///a.py", after, "python", 2), 2, 0, 6, UTF16, "a.py")).shown
    assert (range_at(after, edit.start, edit.end, UTF16), edit.text) == (((1, 6), (1, 7)), "result")
    assert (editor.stats.drafts_offered, editor.stats.drafts_kept, editor.stats.reasons) == (2, 1, {"draft": 1})


def test_a_step_with_context_lines_repeats_its_inserted_line_in_the_next_class():
    after = "class A:\n    width: int\n    height: int\n\n\nclass B:\n    width: int\n    depth: int\n"
    # as the edit log keeps it: the changed line with the lines around it
    step = Step("file:///m.py", "m.py", 1, ["    width: int\n", "\n"], ["    width: int\n", "    height: int\n", "\n"])
    req = EditRequest(after, "m.py", (2, 15), PY, [step.diff()], step, NextEditSettings(region_lines=10),
                      lambda t: len(t.split()))
    out = run(req, Scripted(high={"height:"}))
    assert (out.reason, out.drafts) == ("draft", 1)
    assert out.edit.apply(after) == after.replace("    width: int\n    depth", "    width: int\n    height: int\n    depth")


def test_a_site_of_the_last_change_outside_the_region_moves_the_region_there_and_is_a_jump():
    far = "def f(timeout=10):\n    return 1\n" + "\n" * 40 + "def g():\n    return call(timeout=10)\n"
    text = far.replace("def f(timeout=10)", "def f(timeout=30)")
    step = Step("file:///m.py", "m.py", 0, ["def f(timeout=10):\n"], ["def f(timeout=30):\n"])
    req = EditRequest(text, "m.py", (0, 17), PY, [step.diff()], step, NextEditSettings(region_lines=6),
                      lambda t: len(t.split()))
    backend = Scripted(low={"call(timeout=10)"}, high={"call(timeout=30)"})
    out = run(req, backend)
    assert out.reason == "draft" and out.jump
    assert out.edit.apply(text) == text.replace("call(timeout=10)", "call(timeout=30)")
    assert out.region.first > 30  # the region around the site, not the cursor
    req.settings = NextEditSettings(region_lines=6, drafts=False)  # without drafts: the cursor's region
    assert run(req, Scripted()).region.first == 0


def test_a_remote_api_that_cannot_score_is_asked_to_rewrite_the_region_of_the_site():
    from diffusion_lsp.formats.mercury import CURSOR
    from diffusion_lsp.protocol.requests import RewriteRequest

    class Api:  # an edit endpoint: rewrites the region it is sent, here with the change made again
        capabilities = Capabilities(probe=False, rewrite=True)

        def __init__(self):
            self.asked = []

        async def rewrite(self, key, order: RewriteRequest) -> Fill:
            self.asked.append(order.content)
            region = order.content.split("<|code_to_edit|>\n", 1)[1].split("<|/code_to_edit|>", 1)[0]
            text = "```\n" + region.replace(CURSOR, "").replace("timeout=10", "timeout=30") + "```"
            return Fill(text, [text], [0.9], ms=1.0, forwards=1, end_confidence=0.9)

    far = "def f(timeout=10):\n    return 1\n" + "\n" * 40 + "def g():\n    return call(timeout=10)\n"
    text = far.replace("def f(timeout=10)", "def f(timeout=30)")
    step = Step("file:///m.py", "m.py", 0, ["def f(timeout=10):\n"], ["def f(timeout=30):\n"])
    req = EditRequest(text, "m.py", (0, 17), PY, [step.diff()], step, NextEditSettings(region_lines=6),
                      lambda t: len(t.split()))
    api = Api()
    out = run(req, api)
    (asked,) = api.asked
    assert "call(timeout=" + CURSOR + "10)" in asked.split("<|code_to_edit|>", 1)[1]  # the site's region, marked at the site
    assert out.edit.apply(text) == text.replace("call(timeout=10)", "call(timeout=30)") and out.jump
