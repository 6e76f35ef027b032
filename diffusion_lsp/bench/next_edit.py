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

from ..server.stats import percentile

NAME = re.compile(r"\b[a-z_][a-z0-9_]*\b")
SKIP = set(keyword.kwlist) | {"self", "cls", "print", "len", "range", "str", "int", "list", "dict", "set",
                              "True", "False", "None", "isinstance", "super", "object", "tuple"}
MODES = ("refine", "full")
GOAL_P50_MS = 300.0


@dataclass(frozen=True)
class Site:
    name: str
    first: tuple[int, int]  # (line, column) of the use renamed
    expected: str  # the file with the first two uses renamed: what the right next edit gives


def _functions(lines: list[str]) -> list[tuple[int, int]]:
    """(first line, end line) of each `def` and its indented body."""
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"(\s*)(async\s+)?def\b", line)
        if not m:
            continue
        width, end = len(m[1]), i + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > width):
            end += 1
        out.append((i, end))
    return out


def find_sites(text: str, n: int, rng: random.Random) -> list[Site]:
    lines = text.splitlines(keepends=True)
    sites = []
    for lo, hi in _functions(lines):
        uses: dict[str, list[tuple[int, int]]] = {}
        for i in range(lo, hi):
            code = lines[i].split("#", 1)[0]
            if code.lstrip().startswith(("'", '"')):
                continue
            for m in NAME.finditer(code):
                if m[0] not in SKIP and not code[:m.start()].endswith("."):
                    uses.setdefault(m[0], []).append((i, m.start()))
        for name, at in uses.items():
            if len(at) >= 2 and len(name) > 1:
                sites.append(_site(lines, name, at[0], at[1]))
    rng.shuffle(sites)
    return sites[:n]


def _site(lines: list[str], name: str, first: tuple[int, int], second: tuple[int, int]) -> Site:
    out = list(lines)
    for line, col in sorted([first, second], reverse=True):
        out[line] = out[line][:col] + name + "_new" + out[line][col + len(name):]
    return Site(name, first, "".join(out))


async def replay(lsp, text: str, sites: list[Site], settings: dict) -> dict[str, list[dict]]:
    """Each site in each mode -> per mode, one record per request (the server's, plus `ms`, `edit`, `right`)."""
    out: dict[str, list[dict]] = {m: [] for m in MODES}
    for k, site in enumerate(sites):
        for mode in MODES:
            lsp.configure({"diffusionLsp": {**settings, "nextEdit": {**settings.get("nextEdit", {}), "mode": mode}}})
            uri = f"file:///bench/next_edit/{mode}/{k}.py"
            lsp.open(uri, text)
            line, col = site.first
            line_text = text.splitlines(keepends=True)[line]
            lsp.change(uri, (line, line_text[:col]), (line, line_text[:col + len(site.name)]), site.name + "_new")
            renamed = line_text[:col] + site.name + "_new"
            ms, edit = await lsp.next_edit(uri, line, renamed)
            recent = (await lsp.stats())["next_edit"]["recent"]
            record = dict(recent[-1]) if recent else {"forwards": 0, "edited_tokens": 0, "model_ms": 0.0}
            current = _renamed(text, site)
            record.update(ms=ms, edit=edit is not None, right=edit is not None and _apply(current, edit) == site.expected)
            out[mode].append(record)
            lsp.close(uri)
    return out


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
