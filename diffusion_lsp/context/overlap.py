"""Post-processing against the text after the cursor: drop what the suffix already has, and balance
brackets and quotes with the auto-closed characters that follow the cursor."""

from __future__ import annotations

from .lines import CLOSERS, OPENERS, PAIRS, QUOTES, unclosed_brackets

MAX_OVERLAP_LINES = 8


def _next_lines(suffix: str, n: int) -> list[str]:
    """The first `n` non-blank lines of the suffix, stripped (the rest of the cursor's line first)."""
    out, pos = [], 0
    while len(out) < n and pos <= len(suffix):
        end = suffix.find("\n", pos)
        end = len(suffix) if end < 0 else end
        line = suffix[pos:end].strip()
        if line:
            out.append(line)
        pos = end + 1
    return out


def drop_duplicate_lines(text: str, line_prefix: str, suffix: str) -> tuple[str, int]:
    """Remove the fill's last lines when they repeat the suffix's next non-blank lines.
    Returns (text, lines removed). The first fill line is compared together with `line_prefix`."""
    lines = text.split("\n")
    full = [(line_prefix + lines[0]).strip()] + [line.strip() for line in lines[1:]]
    while len(full) > 1 and not full[-1]:
        full.pop()
    nxt = _next_lines(suffix, min(len(full), MAX_OVERLAP_LINES))
    for k in range(min(len(full), len(nxt)), 0, -1):
        if all(full[-k:]) and full[-k:] == nxt[:k]:
            kept = "\n".join(lines[:len(full) - k])
            return (kept.rstrip() if len(full) > k else ""), k
    return text, 0


def drop_line_overlap(text: str, line_suffix: str) -> tuple[str, int]:
    """Remove the longest end of the fill that the rest of the line starts with (fill `x, y)` before
    `, y)`), never splitting an identifier nor taking a closer the fill itself needs (`g(b)` before
    `)` stays). Returns (text, characters removed)."""
    if not line_suffix.strip():
        return text, 0
    open_before = None
    for k in range(min(len(text), len(line_suffix)), 0, -1):
        part = line_suffix[:k]
        if not part.strip() or not text.endswith(part):
            continue
        before = text[-k - 1] if len(text) > k else ""
        if (part[0].isalnum() or part[0] == "_") and (before.isalnum() or before == "_"):
            continue
        open_before = unclosed_brackets(text) if open_before is None else open_before
        if unclosed_brackets(text[:-k]) > open_before:
            continue
        return text[:-k], k
    return text, 0


def _closing_run(line_prefix: str, line_suffix: str) -> str:
    """The auto-closed characters right after the cursor: a quote closing a string that the line
    opened (an odd number of them before the cursor), then closing brackets."""
    i = 0
    if line_suffix[:1] in QUOTES and line_suffix[:1] and line_prefix.count(line_suffix[0]) % 2 == 1:
        i = 1
    while i < len(line_suffix) and line_suffix[i] in CLOSERS:
        i += 1
    return line_suffix[:i]


def balance_closers(text: str, line_prefix: str, line_suffix: str) -> tuple[str, int]:
    """(text, replace_chars): when the fill itself closes the brackets or quote that follow the
    cursor, it writes over them (fill `x) + 1` before `)` replaces that `)`), so that nothing is
    doubled; reduce_replace then turns `x)` over `)` into plain `x`."""
    run = _closing_run(line_prefix, line_suffix)
    if not run:
        return text, 0
    consumed, stack = 0, []
    in_suffix_string = run[0] if run[0] in QUOTES else None
    in_string = None
    for i, ch in enumerate(text):
        if consumed == len(run):
            break
        escaped = i > 0 and text[i - 1] == "\\"
        if in_suffix_string:
            if ch == in_suffix_string and not escaped:
                consumed, in_suffix_string = consumed + 1, None
        elif in_string:
            if ch == in_string and not escaped:
                in_string = None
        elif ch in QUOTES:
            in_string = ch
        elif ch in OPENERS:
            stack.append(ch)
        elif ch in CLOSERS:
            if stack and stack[-1] == PAIRS[ch]:
                stack.pop()
            elif not stack and ch == run[consumed]:
                consumed += 1
            else:
                break  # a stray closer: leave it to the syntax check
        elif ch == "\n":
            break
    if consumed == 0:
        return text, 0
    return text, consumed


def reduce_replace(text: str, replace: int, line_suffix: str) -> tuple[str, int]:
    """Prefer the form that writes over fewer characters: prefix + text + suffix[replace:] equals
    prefix + text[:-1] + suffix[replace - 1:] when text ends with suffix[replace - 1]."""
    text = text.rstrip(" \t") if replace else text
    while replace and text and text[-1] == line_suffix[replace - 1]:
        text, replace = text[:-1], replace - 1
    return text, replace
