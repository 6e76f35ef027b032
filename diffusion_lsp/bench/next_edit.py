"""The next-edit kind of `bench lsp`: a rename the user started, and the next edit asked for.

At each site (a local name used at least twice in one function of the replayed file), the "user"
renames its first use (`name` -> `name_new`, one didChange), then asks for the next edit
(textDocument/copilotInlineEdit) with the cursor after the new name. Every site runs once in each
decoding mode, remask-and-refine and full re-mask, back to back on fresh copies of the file, so
the two columns see the same edits. Per mode: p50/p95 end to end and of the model's time, forwards
per request and per edited token (the server's own counts), the share of requests with an edit,
and of those, the share that renamed the next use exactly (what the user wanted)."""

from __future__ import annotations

import keyword
import random
import re
from dataclasses import dataclass

from ..nextedit.repeat import renames, whole
from ..nextedit.settings import ASKED, Mode
from ..server.stats import percentile

NAME = re.compile(r"\b[a-z_][a-z0-9_]*\b")
CAMEL_NAME = re.compile(r"\b[a-z_][a-zA-Z0-9_]*\b")  # the brace languages' locals: camelCase too
SKIP = set(keyword.kwlist) | {"self", "cls", "print", "len", "range", "str", "int", "list", "dict", "set",
                              "True", "False", "None", "isinstance", "super", "object", "tuple"}
# the brace languages' keywords and built-in type names: not names a user renames
BRACE_SKIP = {"if", "else", "for", "while", "do", "switch", "case", "default", "break", "continue", "return", "func",
              "function", "fn", "var", "let", "const", "mut", "new", "this", "self", "nil", "null", "true", "false",
              "undefined", "typeof", "instanceof", "void", "int", "float", "double", "char", "long", "short", "bool",
              "boolean", "string", "byte", "rune", "error", "struct", "enum", "impl", "pub", "use", "mod", "match",
              "loop", "in", "of", "range", "make", "len", "append", "go", "defer", "chan", "map", "type",
              "interface", "package", "import", "export", "from", "static", "public", "private", "protected",
              "final", "class", "extends", "implements", "throw", "throws", "try", "catch", "finally", "await",
              "async", "yield", "sizeof", "unsigned", "signed", "auto", "namespace", "template", "typename",
              "delete", "as", "where", "ref", "usize", "isize", "u8", "u16", "u32", "u64", "i8", "i16", "i32",
              "i64", "f32", "f64", "str", "println", "printf", "fmt", "console", "std"}
# a function in a brace language: a line with a parameter list that opens a block at its end
_BRACE_FUNCTION = re.compile(r"\s*[^\s/*].*\(.*\{\s*(//.*)?$")
GOAL_P50_MS = 300.0


@dataclass(frozen=True)
class Site:
    name: str
    first: tuple[int, int]  # (line, column) of the use renamed
    expected: str  # the file with the first two uses renamed: what the right next edit gives
    second: tuple[int, int]  # (line, column) of the next use


def _functions(lines: list[str], language: str = "python") -> list[tuple[int, int]]:
    """(first line, end line) of each `def` and its indented body; in the brace languages, of each
    line with a parameter list that opens a block, and the lines indented under it."""
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"(\s*)(async\s+)?def\b", line) if language == "python" else _BRACE_FUNCTION.match(line)
        if not m:
            continue
        width, end = len(line) - len(line.lstrip()), i + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > width):
            end += 1
        out.append((i, end))
    return out


def find_sites(text: str, n: int, rng: random.Random, language: str = "python") -> list[Site]:
    """Up to `n` renames, in an order drawn from `rng`: a local name used at least twice in one
    function, its first use renamed (the next one is the edit to suggest)."""
    lines = text.splitlines(keepends=True)
    python = language == "python"
    comment, skip, names = ("#", SKIP, NAME) if python else ("//", BRACE_SKIP, CAMEL_NAME)
    prose = ("'", '"') if python else ("'", '"', "`", "*", "/*")  # docstrings, strings, block comments
    sites = []
    for lo, hi in _functions(lines, language):
        uses: dict[str, list[tuple[int, int]]] = {}
        for i in range(lo, hi):
            code = lines[i].split(comment, 1)[0]
            if code.lstrip().startswith(prose):
                continue
            for m in names.finditer(code):
                if m[0] not in skip and not code[:m.start()].endswith("."):
                    uses.setdefault(m[0], []).append((i, m.start()))
        for name, at in uses.items():
            if len(at) >= 2 and len(name) > 1:
                sites.append(rename_site(lines, name, at[0], at[1]))
    rng.shuffle(sites)
    return sites[:n]


def rename_site(lines: list[str], name: str, first: tuple[int, int], second: tuple[int, int]) -> Site:
    """The rename of `name` at `first`, whose right next edit renames it at `second` too."""
    out = list(lines)
    for line, col in sorted([first, second], reverse=True):
        out[line] = out[line][:col] + name + "_new" + out[line][col + len(name):]
    return Site(name, first, "".join(out), second)


async def replay(lsp, text: str, sites: list[Site], settings: dict, modes: tuple[Mode, ...] = ASKED,
                 name: str = "x.py", language: str = "python") -> dict[str, list[dict]]:
    """Each site in each mode -> per mode, one record per request (the server's, plus `ms`, `edit`,
    `right`). The documents are opened as `.../{mode}/{k}/{name}` in `language`."""
    out: dict[str, list[dict]] = {m: [] for m in modes}
    for k, site in enumerate(sites):
        for mode in modes:
            lsp.configure({"diffusionLsp": {**settings, "nextEdit": {**settings.get("nextEdit", {}), "mode": mode}}})
            uri = f"file:///bench/next_edit/{mode}/{k}/{name}"
            lsp.open(uri, text, language)
            line, col = site.first
            line_text = text.splitlines(keepends=True)[line]
            lsp.change(uri, (line, line_text[:col]), (line, line_text[:col + len(site.name)]), site.name + "_new")
            renamed = line_text[:col] + site.name + "_new"
            ms, edit = await lsp.next_edit(uri, line, renamed)
            recent = (await lsp.stats())["next_edit"]["recent"]
            record = dict(recent[-1]) if recent else {"forwards": 0, "edited_tokens": 0, "model_ms": 0.0}
            current = _renamed(text, site)
            record.update(ms=ms, edit=edit is not None, right=edit is not None and right(current, _apply(current, edit), site))
            out[mode].append(record)
            lsp.close(uri)
    return out


def right(current: str, after: str, site: Site) -> bool:
    """Whether an edit that turned `current` into `after` is the rename's next step: the next use
    renamed, and nothing else changed but other uses of the name renamed the same way (sites close
    together are one suggestion)."""
    if after == site.expected:
        return True
    if renames(current, after) != {site.name: site.name + "_new"}:
        return False
    line = site.second[0]
    was, now = current.splitlines()[line], after.splitlines()[line]
    return len(re.findall(whole(site.name), now)) < len(re.findall(whole(site.name), was))


def _renamed(text: str, site: Site) -> str:
    lines = text.splitlines(keepends=True)
    line, col = site.first
    lines[line] = lines[line][:col] + site.name + "_new" + lines[line][col + len(site.name):]
    return "".join(lines)


def _apply(text: str, edit: dict) -> str:
    """An LSP edit (UTF-8 or UTF-16 columns on this ASCII-only check) applied to text."""
    lines = text.splitlines(keepends=True)

    def offset(p):
        return sum(len(s) for s in lines[:p["line"]]) + p["character"]
    r = edit["range"]
    return text[:offset(r["start"])] + edit["text"] + text[offset(r["end"]):]


def print_next_edits(title: str, records: dict[str, list[dict]]) -> None:
    print(f"\n{title}")
    print(f"{'mode':18}{'n':>4} {'end-to-end':^15} {'model':^15} {'forwards':>9} {'fwd/edited':>11}"
          f" {'with edit':>10} {'right':>7} {'jumps':>6} {'drafted':>8}")
    print(f"{'':22}" + " p50     p95    " * 2)
    per_token = {}
    for mode, rows in records.items():
        if not rows:
            continue
        edits = [r for r in rows if r.get("edit")]
        tokens = sum(r.get("edited_tokens", 0) for r in edits)
        per_token[mode] = sum(r["forwards"] for r in edits) / tokens if tokens else None
        e2e, model = [r["ms"] for r in rows], [r.get("model_ms", 0.0) for r in rows]
        fwd = percentile([r["forwards"] for r in rows], 50)
        label = "remask-and-refine" if mode == "refine" else "full re-mask"
        print(f"{label:18}{len(rows):>4} {_ms(percentile(e2e, 50)):>7} {_ms(percentile(e2e, 95)):>7}"
              f" {_ms(percentile(model, 50)):>7} {_ms(percentile(model, 95)):>7} {fwd or 0:>9}"
              f" {'-' if per_token[mode] is None else f'{per_token[mode]:.2f}':>11}"
              f" {len(edits) / len(rows):>10.0%} {sum(r['right'] for r in rows) / max(1, len(edits)):>7.0%}"
              f" {sum(bool(r.get('jump')) for r in edits):>6}"
              f" {sum(r.get('reason') == 'draft' for r in rows) / len(rows):>8.0%}")
    refine = records.get("refine") or []
    p50 = percentile([r["ms"] for r in refine], 50)
    print(f"  goal: next-edit p50 (default mode, remask-and-refine) <= {GOAL_P50_MS:g} ms: "
          f"{'-' if p50 is None else f'{p50:.0f} ms'} ({'n/a' if p50 is None else 'met' if p50 <= GOAL_P50_MS else 'missed'})")
    a, b = per_token.get("refine"), per_token.get("full")
    ratio = None if a is None or not b else a / b
    verdict = "n/a (no edits in one mode)" if ratio is None else f"{ratio:.2f}x ({'met' if ratio <= 0.5 else 'missed'})"
    print(f"  goal: remask-and-refine forwards per edited token <= 1/2 of full re-mask's: {verdict}")
    print("  forwards: per request, both modes' probe and fills; fwd/edited: forwards of the requests with an edit "
          "over the tokens they rewrote; right: the edit renamed the next use exactly; drafted: the edit was the "
          "rename made again at a next use and preferred by the model (nextEdit.drafts)")


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"
