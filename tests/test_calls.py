"""The rest of a changed signature (nextedit/calls.py): a parameter added, removed or renamed at a
Python def reaches the calls of that def in the file, and only those (a shadowing name, another
class's method, a call with *args or over several lines, a call already updated are left alone);
the chain through the language server: change the def, accept, next call, never a call twice."""

from __future__ import annotations

import asyncio

import pytest
import re

from diffusion_lsp.context.languages import language_for
from diffusion_lsp.context.records import Document
from diffusion_lsp.nextedit.signature import call_edits
from diffusion_lsp.nextedit.imported import imported_edits
from diffusion_lsp.nextedit.history import EditLog, Step
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import NextEditor
from diffusion_lsp.server.positions import UTF16, range_at
from diffusion_lsp.server.stats import NextEditStats

PY = language_for("python", "a.py")
SOURCE = '''def area(w, h):
    return w * h


def scaled(shapes, area):
    return [area(s) for s in shapes]  # a parameter named area: not the def


print(area(3, 4), area(w=1, h=2), area(*dims))
print(area(
    5, 6))
done = area(1, 2, 3)


class Box:
    def size(self, a, b=2):
        return self.size(a) + self.size(a, b=3) + other.size(a)


total = area(7, 8)
'''


def change(line: int, old: str, new: str) -> tuple[str, Step]:
    lines = SOURCE.splitlines(keepends=True)
    assert lines[line].rstrip("\n") == old
    return SOURCE.replace(old + "\n", new + "\n", 1), Step("u", "a.py", line, [old + "\n"], [new + "\n"])


def edits(text: str, step: Step) -> list[tuple[int, str]]:
    """(1-based line, the line after the edits) of every line the change's call edits touch."""
    found = call_edits([step], text, PY)
    after = text
    for s, e, new in reversed(found[1] if found else []):
        after = after[:s] + new + after[e:]
    return [(i + 1, b) for i, (a, b) in enumerate(zip(text.split("\n"), after.split("\n"))) if a != b]


def test_a_parameter_added_reaches_the_calls_that_still_have_the_old_arity():
    text, step = change(0, "def area(w, h):", "def area(w, h, scale):")
    # line 6's area is a parameter; *dims cannot be read; line 11's call keeps its layout; line 12 has 3 already
    assert edits(text, step) == [(9, "print(area(3, 4, scale), area(w=1, h=2, scale=scale), area(*dims))"),
                                 (11, "    5, 6, scale))"), (20, "total = area(7, 8, scale)")]
    text, step = change(0, "def area(w, h):", "def area(scale, w, h):")
    after = text
    for s, e, new in reversed(call_edits([step], text, PY)[1]):
        after = after[:s] + new + after[e:]
    assert "print(area(scale, 3, 4), area(scale, w=1, h=2), area(*dims))\nprint(area(\n    scale,\n    5, 6))" in after
    assert "total = area(scale, 7, 8)" in after and len(re.findall(r"\bscale\b", after)) == 5  # and the def's
    text, step = change(0, "def area(w, h):", "def area(w, h, scale=1):")
    assert edits(text, step) == []  # a default: no call needs it


def test_a_parameter_removed_leaves_the_calls_positionally_or_by_keyword():
    text, step = change(0, "def area(w, h):", "def area(h):")
    assert edits(text, step) == [(9, "print(area(4), area(h=2), area(*dims))"), (11, "    6))"),
                                 (20, "total = area(8)")]


def test_a_methods_calls_are_those_through_self_in_its_class():
    text, step = change(15, "    def size(self, a, b=2):", "    def size(self, a, c, b=2):")
    assert edits(text, step) == [(17, "        return self.size(a, c) + self.size(a, c, b=3) + other.size(a)")]  # not other's


def test_a_change_that_is_not_one_parameter_is_left_alone():
    text, step = change(0, "def area(w, h):", "def area(x, y, z):")
    assert edits(text, step) == []
    text, step = change(1, "    return w * h", "    return w * h * 2")
    assert edits(text, step) == []


def suggest_until_done(text: str, before: str, line: int) -> tuple[str, list]:
    class NoModel:  # the sites come from the code: the model is never asked
        capabilities = None

    log, uri = EditLog(merge_s=0), "file:///a.py"
    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log)
    editor.configure(parse_config({"nextEdit": {"enable": False}})[0])
    log.note(uri, "a.py", before, text, line, line, line)
    shown, version = [], 1
    while len(shown) < 10:
        version += 1
        answer = asyncio.run(editor.suggest(Document(uri, text, "python", version), version, line, 0, UTF16, "a.py"))
        if answer is None:
            break
        edit = answer.shown
        shown.append((range_at(text, edit.start, edit.end, UTF16)[0][0], edit.text))
        after = text[:edit.start] + edit.text + text[edit.end:]  # the user presses Tab
        at = text.count("\n", 0, edit.start)
        log.note(uri, "a.py", text, after, at, at + text.count("\n", edit.start, edit.end), at + edit.text.count("\n"))
        text = after
    return text, shown


def test_the_server_follows_an_added_parameter_call_by_call():
    text, _ = change(0, "def area(w, h):", "def area(w, h, scale):")
    text, shown = suggest_until_done(text, SOURCE, 0)
    # the calls within three lines are one suggestion; after it is accepted, the next call (a jump)
    assert shown == [(8, ", scale), area(w=1, h=2, scale=scale), area(*dims))\nprint(area(\n    5, 6, scale"),
                     (19, ", scale")]
    assert "area(3, 4, scale), area(w=1, h=2, scale=scale), area(*dims)" in text and "area(1, 2, 3)" in text


def test_a_renamed_parameter_renames_its_keyword_at_the_calls_too():
    text, _ = change(0, "def area(w, h):", "def area(width, h):")
    text, shown = suggest_until_done(text, SOURCE, 0)
    assert [t for _, t in shown] == ["width", "width"]  # the body's w, then area(w=1, ...)'s keyword
    assert "return width * h" in text and "area(width=1, h=2)" in text and "area(3, 4)" in text


def test_an_open_document_that_imports_the_function_gets_its_calls_passed_on():
    class NoModel:
        capabilities = None

    caller = ("from pkg.shapes import area\nfrom other import area as not_it\n\n\n"
              "def box(w, h):\n    return area(w, h)\n\n\n\n\nprint(area(1, 2))\n")
    log, a_uri, b_uri = EditLog(merge_s=0), "file:///pkg/shapes.py", "file:///pkg/main.py"
    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log)
    editor.configure(parse_config({"nextEdit": {"enable": False}})[0])
    text, _ = change(0, "def area(w, h):", "def area(w, h, scale):")
    log.note(a_uri, "pkg/shapes.py", SOURCE, text, 0, 0, 0)
    shapes = Document(a_uri, text, "python", 2)
    shown, version = [], 1
    while len(shown) < 5:
        version += 1
        doc = Document(b_uri, caller, "python", version)
        answer = asyncio.run(editor.suggest(doc, version, 0, 0, UTF16, "pkg/main.py", [shapes]))
        if answer is None:
            break
        edit = answer.shown
        shown.append((range_at(caller, edit.start, edit.end, UTF16)[0][0], edit.text))
        after = caller[:edit.start] + edit.text + caller[edit.end:]
        at = caller.count("\n", 0, edit.start)
        log.note(b_uri, "pkg/main.py", caller, after, at, at, at)
        caller = after
    assert shown == [(5, ", scale"), (10, ", scale")]
    assert "return area(w, h, scale)" in caller and "print(area(1, 2, scale))" in caller
    # a document that does not import it from there is left alone
    elsewhere = Document("file:///pkg/x.py", "from geometry import area\narea(1, 2)\n", "python", 1)
    assert asyncio.run(editor.suggest(elsewhere, 1, 0, 0, UTF16, "pkg/x.py", [shapes])) is None


def test_calls_through_the_module_are_passed_on_too():
    _, step = change(0, "def area(w, h):", "def area(w, h, scale):")
    change_ = call_edits([step], SOURCE.replace("def area(w, h):", "def area(w, h, scale):"), PY)[0]
    caller = ("import pkg.shapes\nimport pkg.shapes as sh\nfrom pkg import shapes\nimport other\n\n"
              "a = pkg.shapes.area(1, 2)\nb = sh.area(1, 2)\nc = shapes.area(1, 2)\nd = other.area(1, 2)\n"
              "e = sh.volume(1, 2)\n")
    edits = imported_edits(caller, PY, change_, "shapes")
    assert [caller.count("\n", 0, s) for s, _, _ in edits] == [5, 6, 7]  # not other.area, not sh.volume
    assert all(new == ", scale" for _, _, new in edits)


def test_an_undo_and_the_edit_after_it_in_one_step_are_held_against_the_change_followed_last():
    added, step = change(0, "def area(w, h):", "def area(w, h, scale):")
    going_on = call_edits([step], added, PY)[0]
    text = SOURCE.replace("def area(w, h):", "def area(h):")  # undo, then w removed, quickly: one step
    merged = Step("u", "a.py", 0, ["def area(w, h, scale):\n"], ["def area(h):\n"])
    assert call_edits([merged], text, PY) is None  # two parameters apart: not one change by itself
    found = call_edits([merged], text, PY, going_on)
    assert found[0].kind == "removed" and found[0].param.name == "w" and len(found[1]) == 4


def test_an_argument_added_to_a_call_written_one_argument_a_line_gets_a_line_of_its_own():
    source = "def area(w, h):\n    return w * h\n\n\nx = area(\n    3,\n    4,\n)\ny = area(3, 4,)\nz = area(\n    3,\n    4)\n"
    step = Step("u", "a.py", 0, ["def area(w, h):\n"], ["def area(w, h, scale):\n"])
    text = source.replace("def area(w, h):", "def area(w, h, scale):")
    after = text
    for s, e, new in reversed(call_edits([step], text, PY)[1]):
        after = after[:s] + new + after[e:]
    assert after.split("\n")[4:] == ["x = area(", "    3,", "    4,", "    scale,", ")", "y = area(3, 4, scale,)",
                                     "z = area(", "    3,", "    4, scale)", ""]
    step = Step("u", "a.py", 0, ["def area(w, h):\n"], ["def area(scale, w, h):\n"])
    text = source.replace("def area(w, h):", "def area(scale, w, h):")
    after = text
    for s, e, new in reversed(call_edits([step], text, PY)[1]):
        after = after[:s] + new + after[e:]
    assert after.split("\n")[4:8] == ["x = area(", "    scale,", "    3,", "    4,"]


SCRIPTS = [  # (language, file, source, the def's line before and after, the calls' lines after every edit)
    ("javascript", "a.js",
     "function area(w, h) {\n  return w * h;\n}\nconst a = area(3, 4);\nconst b = other(1, 2);\n"
     "function inner(area) { return area(5, 6); }\nconsole.log(area(...dims), area(1, 2));\n"
     "function shadow() { const area = f; return area(7, 8); }\n",
     "function area(w, h) {", "function area(w, h, scale) {",
     ["const a = area(3, 4, scale);", "function inner(area) { return area(5, 6); }",
      "console.log(area(...dims), area(1, 2, scale));", "function shadow() { const area = f; return area(7, 8); }"]),
    ("typescript", "a.ts",
     "function area(w: number, h: number): number {\n  return w * h;\n}\n\n\n\nlet a = area(3, 4);\n",
     "function area(w: number, h: number): number {", "function area(h: number): number {",
     ["let a = area(4);"]),
    ("typescript", "b.ts",  # an optional parameter is not passed
     "function area(w: number, h: number): number {\n  return w * h;\n}\nlet a = area(3, 4);\n",
     "function area(w: number, h: number): number {", "function area(w: number, h: number, s?: number): number {",
     ["let a = area(3, 4);"]),
    ("javascript", "c.js",  # a method: this.name(...) in its class
     "class Box {\n  area(w, h) { return w * h; }\n  total() { return this.area(1, 2) + area(3, 4); }\n}\n",
     "  area(w, h) { return w * h; }", "  area(w, h, d) { return w * h; }",
     ["  total() { return this.area(1, 2, d) + area(3, 4); }"]),
]


@pytest.mark.parametrize("language, path, source, old, new, calls_after", SCRIPTS, ids=[s[1] for s in SCRIPTS])
def test_a_changed_signature_reaches_its_calls_in_javascript_and_typescript(language, path, source, old, new,
                                                                            calls_after):
    from test_scope import follow_on

    spec, line = language_for(language, path), source.splitlines().index(old)
    text = source.replace(old + "\n", new + "\n", 1)
    steps, going = [Step("u", path, line, [old + "\n"], [new + "\n"])], None
    while (on := follow_on(text, spec, steps, 0, going))[0] is not None and len(steps) < 6:
        found = on[0]
        assert found.source == "signature"
        at = text.count("\n", 0, found.start)
        before = text.splitlines(keepends=True)[at:at + found.text.count("\n") + 1]
        text, going = text[:found.start] + found.text + text[found.end:], on[1]
        steps.append(Step("u", path, at, before, text.splitlines(keepends=True)[at:at + len(before)]))
    # inner()'s parameter and shadow()'s local named like the function, the spread call, other(): as they were
    assert [ln for ln in text.splitlines() if "area(" in ln and "function area" not in ln
            and not ln.lstrip().startswith("area(w")] == calls_after


def test_a_signature_is_followed_in_a_language_the_model_does_not_write():
    class NoModel:  # the sites come from the code: the model is never asked
        capabilities = None

    source = "function area(w, h) {\n  return w * h;\n}\n\n\n\nconst a = area(3, 4);\n"
    text = source.replace("function area(w, h) {", "function area(w, h, depth) {")
    log, uri = EditLog(merge_s=0), "file:///a.js"
    log.note(uri, "a.js", source, text, 0, 0, 0)
    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log)
    editor.configure(parse_config({"nextEdit": {"enable": True}, "completion": {"languages": ["python"]}})[0])
    answer = asyncio.run(editor.suggest(Document(uri, text, "javascript", 2), 2, 0, 27, UTF16, "a.js"))
    edit = answer and answer.shown
    assert edit is not None and edit.text == ", depth" and edit.source == "signature" \
        and range_at(text, edit.start, edit.end, UTF16)[0][0] == 6


def test_python_calls_and_keywords_spelled_another_nfkc_way_are_the_same_name():
    # Python reads 𝓌idth as width (PEP 3131): the def's calls and its parameter's keywords, however spelled
    before = "def 𝓌idth(a, 𝓀):\n    return a * 𝓀\n\n\nx = width(1, k=2)\ny = width(3, 4)\n"
    text, shown = suggest_until_done(before.replace("(a, 𝓀):", "(a, 𝓀, é):"), before, 0)
    assert shown == [(5, ", é")] and "y = width(3, 4, é)" in text
    text, shown = suggest_until_done(before.replace("(a, 𝓀):", "(a, kk):"), before, 0)
    assert text == "def 𝓌idth(a, kk):\n    return a * kk\n\n\nx = width(1, kk=2)\ny = width(3, 4)\n"
