"""The typing session `bench lsp` replays through the server, and the other documents an editor
may hold open meanwhile.

At each block opener picked, the body is removed; the "user" presses Enter (the cursor lands in an
empty body: a multi-line completion), then types the body's first characters one at a time,
asking for a completion after each keystroke (single-line completions), one request at a time as
an editor with no debounce would. A `Crowd` of other large documents is opened before the replay
and some of them are edited between its sites (a user who switches files), so the server's
indexes of those go stale while the session goes on."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from .figures import Sample

_OPENER = re.compile(r"\s*(async\s+)?(def|class|if|elif|else|for|while|with|try|except|finally)\b.*:\s*(#.*)?$")
# brace languages (Go, TypeScript, Rust, C, Java, ...): a line that opens a block at its end
_BRACE_OPENER = re.compile(r"\s*[^\s/*].*\{\s*(//.*)?$")


@dataclass(frozen=True)
class Site:
    """A block opener whose body the replay removes and then types again."""

    line: int  # the opener's line (0-based)
    last: int  # the body's last non-blank line
    indent: str  # the first body line's indentation
    first: str  # the first body line, without it


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def find_sites(lines: list[str], language: str = "python") -> list[Site]:
    """Block openers followed by an indented body: in Python `def`, `if`, `for`, ... ending with
    ":"; in the brace languages a line ending with "{" (the closing brace, back at the opener's
    indentation, stays)."""
    opener = _OPENER if language == "python" else _BRACE_OPENER
    sites = []
    for i, line in enumerate(lines):
        if not opener.match(line):
            continue
        width, last = len(_indent(line).expandtabs(4)), None
        for j in range(i + 1, len(lines)):
            if lines[j].strip():
                if len(_indent(lines[j]).expandtabs(4)) <= width:
                    break
                last = j
        if last is not None:
            first = next(lines[j] for j in range(i + 1, last + 1) if lines[j].strip())
            sites.append(Site(i, last, _indent(first), first.strip()))
    return sites


@dataclass
class Crowd:
    """Other documents open in the editor: `docs` maps uri -> text as the server has it. The first
    `edited` of them take turns getting a line appended, one per `edit_next`."""

    docs: dict[str, str]
    edited: int = 10
    edits: int = 0  # made so far

    @property
    def lines(self) -> int:
        return sum(t.count("\n") for t in self.docs.values())

    @property
    def edited_docs(self) -> int:
        return min(self.edits, self.edited, len(self.docs))

    def open(self, lsp) -> None:
        for uri, text in self.docs.items():
            lsp.open(uri, text)

    def edit_next(self, lsp) -> None:
        uris = list(self.docs)[: self.edited]
        if not uris:
            return
        uri = uris[self.edits % len(uris)]
        text = self.docs[uri]
        end = (text.count("\n"), text[text.rfind("\n") + 1:])  # the last line, and its text before the end
        added = ("\n" if end[1] else "") + f"_edited_{self.edits} = {self.edits}\n"
        lsp.change(uri, end, end, added)
        self.docs[uri] = text + added
        self.edits += 1

    def close(self, lsp) -> None:
        for uri in self.docs:
            lsp.close(uri)


async def replay(lsp, uri: str, text: str, requests: int, chars: int, rng: random.Random,
                 crowd: Crowd | None = None) -> list[Sample]:
    """Type at block openers of `text`, in an order drawn from `rng`, until `requests` requests were
    answered (see the module doc); with a crowd, one of its documents is edited before each site."""
    sites = find_sites(text.split("\n"))
    rng.shuffle(sites)
    return await type_at(lsp, uri, text, sites, requests, chars, crowd)


async def type_at(lsp, uri: str, text: str, sites: list[Site], requests: int, chars: int,
                  crowd: Crowd | None = None, language: str = "python") -> list[Sample]:
    """Type at `sites` of `text`, in order, until `requests` requests were answered: at each, one
    request after Enter (the sample's `typed` is "") and one after each of the first `chars`
    characters of the body's first line."""
    lines = text.split("\n")
    lsp.open(uri, text, language)
    samples: list[Sample] = []
    seq = (await lsp.stats())["counts"]["requests"]  # the server numbers requests: ours are seq + 1, ...
    for site in sites:
        if len(samples) >= requests:
            break
        if crowd is not None:
            crowd.edit_next(lsp)
        opener, end = lines[site.line], lines[site.last]
        lsp.change(uri, (site.line, opener), (site.last, end), "")  # the body is gone
        typed = site.indent
        lsp.change(uri, (site.line, opener), (site.line, opener), "\n" + typed)  # Enter, auto-indented
        answers = [(await lsp.complete(uri, site.line + 1, typed), "")]
        for ch in site.first[: max(0, min(chars, requests - len(samples) - 1))]:
            lsp.change(uri, (site.line + 1, typed), (site.line + 1, typed), ch)
            typed += ch
            answers.append((await lsp.complete(uri, site.line + 1, typed), typed[len(site.indent):]))
        lsp.replace_all(uri, text)
        report = await lsp.stats()
        timings = {t["seq"]: t for t in report["timings"]}
        samples += [Sample(ms, timings.get(seq + 1 + i), shown, before, site.first)
                    for i, ((ms, shown), before) in enumerate(answers)]
        seq = report["counts"]["requests"]
    lsp.close(uri)
    return samples
