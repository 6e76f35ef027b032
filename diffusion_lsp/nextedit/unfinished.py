"""Whether the user's last step leaves its line half typed: such a step is no change to follow or
repeat. Retyping `chopped = value / power`, the step at `chopped = value /` reads as ` power`
deleted, and the repeat rule proposed deleting ` power` on a later line (issue 45).

A step is unfinished when its last changed line
- holds a syntax error that was not there before the step (tree-sitter's ERROR and MISSING nodes
  over the step's lines: `value /`, `[x for`, `f(a,`);
- now ends in an operator or an opening bracket, a token of the code (not a comment's or a
  string's end), and did not before: `x = a +` inside brackets parses, and so does JavaScript's;
- is what it was, cut short (`chopped = value`, `chopped = v`, `return c` of `return chunks`: the
  line is being retyped; a rename's site accepted that shortens it, `return total_count` ->
  `return total`, is rules.py's to let go on);
- now ends in a name the step wrote there that the document spells nowhere else (`chopped = value
  // p`: a name half typed, the line retyped otherwise).
The follow rules (rules.py), the repeat candidate (repeat.py, evals/edit_replay.py)
and the model's drafts (suggest.py) ask it first."""

from __future__ import annotations

import itertools
import re

from ..context.languages import LanguageSpec
from ..linediff import opcodes
from .history import Step, line_offset, undone
from .names import parsed

# tokens after which a line cannot end a statement, in the languages the server parses
OPEN = frozenset("( [ { + - * / % ** // @ & | ^ ~ << >> < > <= >= == != = += -= *= /= //= %= **= &= |= ^= >>= <<= "
                 "@= := -> => . && || ?? ?. and or not in is lambda".split())
WORDS = {"identifier", "property_identifier", "shorthand_property_identifier", "field_identifier", "type_identifier"}


def unfinished(step: Step, text: str, spec: LanguageSpec | None) -> str | None:
    """Why `step` (its lines now standing in `text`) leaves its line half typed, or None when it
    does not (or its lines are not where it says)."""
    if step.first + len(step.new) > text.count("\n") + 1 or not step.new:
        return None
    ops = [op for op in opcodes(step.old, step.new)
           if op[0] != "equal"]
    if not ops or ops[-1][4] == ops[-1][3]:
        return None  # nothing changed, or lines removed: no line is being typed
    _, i1, i2, _, j2 = ops[-1]
    now, was = step.new[j2 - 1].rstrip("\r\n"), step.old[i2 - 1].rstrip("\r\n") if i2 > i1 else None
    line = step.first + j2 - 1
    if was is not None and len(now) < len(was) and was.startswith(now):
        return f"line {line + 1} is being retyped ({now.strip()[-20:]!r} of {was.strip()[-40:]!r})"
    found = parsed(spec, text) if spec is not None else None
    leaf = None if found is None else _last_leaf(found[0], _byte_at(text, line), now)
    if (found is None or (leaf is not None and leaf.type in WORDS)) and (word := _new_name(now, was, text)):
        return f"line {line + 1} ends in a name spelled nowhere else ({word!r}): one half typed"
    if found is None:
        return None
    before, start = undone(step, text)
    then = parsed(spec, before)
    lo = len(text[:start].encode("utf-8"))
    if _errors(found[0].root_node, lo, lo + len("".join(step.new).encode("utf-8"))) > \
            _errors(then[0].root_node, lo, lo + len("".join(step.old).encode("utf-8"))):
        return f"the step leaves a syntax error on lines {step.first + 1}-{step.first + len(step.new)}"
    end = _operator(leaf)
    if end in OPEN and (was is None or _operator(_last_leaf(then[0], _byte_at(before, step.first + i2 - 1), was))
                        not in OPEN):
        return f"line {line + 1} ends in {end!r}"
    return None


def _new_name(now: str, was: str | None, text: str) -> str | None:
    """The name `now` ends in, when the step wrote it there (`was`, the line before it, did not end
    in it; None: a new line) and `text` spells it nowhere else; else None."""
    word = re.search(r"(?<!\w)[^\W\d]\w*\Z", now)
    if word is None:
        return None
    whole = re.compile(r"(?<!\w)" + re.escape(word.group()) + r"(?!\w)")
    if was is not None and re.search(whole.pattern + r"\Z", was):
        return None
    rare = text.count(word.group()) <= 1 or len(list(itertools.islice(whole.finditer(text), 2))) <= 1
    return word.group() if rare else None


def _errors(root, lo: int, hi: int) -> int:
    """ERROR and MISSING nodes of the tree that overlap bytes lo..hi."""
    count, stack = 0, [root]
    while stack:
        n = stack.pop()
        if n.end_byte < lo or n.start_byte > hi:
            continue
        if n.is_error or n.is_missing:
            count += 1
            continue
        if n.has_error:  # (a MISSING node below counts too) else its children, 100,000 of a module's, are not listed
            stack.extend(c for c in n.children if c.has_error or c.is_missing)
    return count


def _byte_at(text: str, line: int) -> int:
    return len(text[:line_offset(text, line)].encode("utf-8"))


def _last_leaf(tree, at: int, line: str):
    """The tree's leaf that ends `line` (which starts at byte `at` of the parsed text) without its
    trailing blanks; None for a blank line or where no leaf ends there (inside a string, a comment)."""
    code = line.rstrip()
    if not code:
        return None
    end = at + len(code.encode("utf-8"))
    leaf = tree.root_node.descendant_for_byte_range(end - 1, end)
    return leaf if leaf is not None and not leaf.child_count and leaf.end_byte == end else None


def _operator(leaf) -> str | None:
    """The leaf's token when it is an anonymous one (an operator, a bracket), not `import *`'s."""
    if leaf is None or leaf.is_named or (leaf.parent is not None and leaf.parent.type == "wildcard_import"):
        return None
    return leaf.type
