"""Next edits through an API's edit endpoint, in Inception's format (mercury-edit,
`POST {base}/edit/completions`): one user message with tagged sections, the current file with the
region to rewrite marked and the cursor in it, and the edit history as unified diffs:

    <|recently_viewed_code_snippets|>
    <|/recently_viewed_code_snippets|>
    <|current_file_content|>
    current_file_path: pkg/mod.py
    ...code before...<|code_to_edit|>
    ...the region, <|cursor|> where the cursor is...
    <|/code_to_edit|>
    ...code after...
    <|/current_file_content|>
    <|edit_diff_history|>
    --- a/pkg/mod.py ...
    <|/edit_diff_history|>

The answer is the region as it should read, possibly in a code fence or between the region's tags;
`rewritten` takes those off."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .edit_prompt import cut_lines

CURSOR = "<|cursor|>"
_FENCE = re.compile(r"^\s*```[^\n]*\n(.*?)\n?```\s*$", re.S)
_TAGS = ("<|code_to_edit|>", "<|/code_to_edit|>")


def edit_request(path: str, before: str, region: str, cursor: int | None, after: str, diffs: list[str],
                 count: Callable[[str], int], budget: int, snippets: str = "") -> str:
    """The user message; `cursor`: offset in `region` (None: not in it); the code before and after
    the region is cut at line boundaries to `budget` tokens, 3/4 of it before."""
    marked = region if cursor is None else region[:cursor] + CURSOR + region[cursor:]
    if not marked.endswith("\n"):
        marked += "\n"
    history = "".join(d if d.endswith("\n") else d + "\n" for d in diffs)
    rest = max(0, budget - count(marked) - count(history) - count(snippets))
    tail = cut_lines(after, count, rest // 4, keep_end=False)
    head = cut_lines(before, count, rest - count(tail), keep_end=True)
    return (f"<|recently_viewed_code_snippets|>\n{snippets}<|/recently_viewed_code_snippets|>\n"
            f"<|current_file_content|>\ncurrent_file_path: {path}\n{head}<|code_to_edit|>\n{marked}"
            f"<|/code_to_edit|>\n{tail}<|/current_file_content|>\n"
            f"<|edit_diff_history|>\n{history}<|/edit_diff_history|>")


def rewritten(answer: str) -> str:
    """The region from the API's answer: without a code fence, the region's tags or the cursor mark."""
    m = _FENCE.match(answer)
    text = m.group(1) + "\n" if m else answer
    start, end = _TAGS
    if start in text:
        text = text.split(start, 1)[1].lstrip("\n")
    if end in text:
        text = text.split(end, 1)[0]
    return text.replace(CURSOR, "")


@dataclass(frozen=True)
class ParsedEdit:
    """An edit request's user message taken apart (what `edit_request` puts together)."""

    path: str
    before: str  # the file before the region, as the request shows it
    region: str  # the code_to_edit section without the cursor mark
    cursor: int | None  # offset of the cursor in `region`; None when not marked
    after: str
    history: str  # the edit_diff_history section: unified diffs, oldest first
    snippets: str  # recently_viewed_code_snippets


def _section(content: str, name: str, required: bool = True) -> str | None:
    start, end = f"<|{name}|>", f"<|/{name}|>"
    i = content.find(start)
    j = content.find(end, i + len(start)) if i >= 0 else -1
    if i < 0 or j < 0:
        if required:
            raise ValueError(f"the message has no {start} ... {end} section")
        return None
    body = content[i + len(start):j]
    return body[1:] if body.startswith("\n") else body


def parse_edit_request(content: str) -> ParsedEdit:
    """The parts of a mercury-edit user message; ValueError naming a missing or repeated part."""
    current = _section(content, "current_file_content")
    path = ""
    if current.startswith("current_file_path:"):
        first, _, current = current.partition("\n")
        path = first.split(":", 1)[1].strip()
    start, end = _TAGS
    if current.count(start) != 1 or current.count(end) != 1 or current.index(start) > current.index(end):
        raise ValueError(f"the current file needs exactly one {start} ... {end} section")
    before, rest = current.split(start, 1)
    marked, after = rest.split(end, 1)
    marked = marked[1:] if marked.startswith("\n") else marked
    after = after[1:] if after.startswith("\n") else after
    if marked.count(CURSOR) > 1:
        raise ValueError(f"more than one {CURSOR} in {start}")
    cursor = marked.find(CURSOR)
    region = marked.replace(CURSOR, "")
    return ParsedEdit(path, before, region, None if cursor < 0 else cursor, after,
                      _section(content, "edit_diff_history", required=False) or "",
                      _section(content, "recently_viewed_code_snippets", required=False) or "")


def fenced(region: str) -> str:
    """The answer an edit endpoint gives: the region as it should read, in a code fence."""
    return "```\n" + region + ("" if region.endswith("\n") or not region else "\n") + "```"
