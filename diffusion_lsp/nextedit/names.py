"""Names in a tree-sitter tree: which identifier nodes are uses of a name, which bind it, which
function scopes bind it (Python's rules: parameters and assignment targets, `nonlocal`/`global`),
and the character offsets of nodes. scope.py (renames), calls.py (signatures) and analogous.py
(arguments) stand on these, and parse a text through `parsed`: one follow asks each of them in
turn about the same document and the same document before the step, parsed once each."""

from __future__ import annotations

import bisect
import keyword
import math
import threading
import time
import unicodedata
from collections import OrderedDict

from dataclasses import dataclass

from ..context.languages import LanguageSpec, parser_for
from ..context.parsing import edited
from .budget import UNBOUNDED, Budget, current
from .history import Step, joined, undone

NAMES = {"identifier", "shorthand_property_identifier"}  # a name's own use; property and field names are other types
FUNCTIONS = {
    "python": {"function_definition", "lambda"},
    "javascript": {"function_declaration", "function_expression", "arrow_function", "method_definition",
                   "generator_function_declaration", "function"},
    "go": {"function_declaration", "method_declaration", "func_literal"},
    "rust": {"function_item", "closure_expression"},
    "java": {"method_declaration", "constructor_declaration", "lambda_expression"},
    "c": {"function_definition"},
    "cpp": {"function_definition", "lambda_expression"},
}
FUNCTIONS["typescript"] = FUNCTIONS["tsx"] = FUNCTIONS["javascript"]
NOT_A_USE = {("attribute", "attribute"), ("keyword_argument", "name"), ("field_access", "field"),
             ("method_invocation", "name"), ("pair_pattern", "key")}  # (parent type, field): another namespace
SELF = {"self", "cls", "this"}
# (parent type, field or None for any child): where a name is bound, not only used
BINDINGS = {("parameters", None), ("lambda_parameters", None), ("default_parameter", "name"),
            ("typed_parameter", None), ("typed_default_parameter", "name"), ("assignment", "left"),
            ("augmented_assignment", "left"), ("pattern_list", None), ("tuple_pattern", None),
            ("for_statement", "left"), ("for_in_clause", "left"), ("as_pattern_target", None),
            ("function_definition", "name"), ("class_definition", "name"), ("named_expression", "name"),
            ("formal_parameters", None), ("required_parameter", "pattern"), ("optional_parameter", "pattern"),
            ("variable_declarator", "name"), ("parameter_declaration", "name"), ("short_var_declaration", "left"),
            ("expression_list", None), ("var_spec", "name"), ("parameter", "pattern"), ("let_declaration", "pattern"),
            ("parameter_declaration", "declarator"), ("pointer_declarator", "declarator"),
            ("list_splat_pattern", None), ("dictionary_splat_pattern", None),
            ("closure_parameters", None), ("formal_parameter", "name"), ("init_declarator", "declarator"),
            ("function_declaration", "name"), ("method_declaration", "name"), ("function_item", "name")}


SCOPES = {"function_definition", "lambda", "class_definition", "list_comprehension", "set_comprehension",
          "dictionary_comprehension", "generator_expression", "module"}  # Python's: a class's body is not seen inside


def scope_of(node):
    """The Python scope whose own code `node` is (a class body's names are not seen in its methods)."""
    node = node.parent
    while node is not None and node.type not in SCOPES:
        node = node.parent
    return node


def root(node):
    while node.parent is not None:
        node = node.parent
    return node


def field_of(node) -> str | None:
    parent = node.parent
    for i, child in enumerate(parent.children if parent is not None else ()):
        if child.id == node.id:
            return parent.field_name_for_child(i)
    return None


def is_use(node) -> bool:
    return node.type in NAMES and node.parent is not None and (node.parent.type, field_of(node)) not in NOT_A_USE


def is_name(word: str) -> bool:
    """Whether `word` is an identifier and no keyword: a letter or `_` of any script, then letters,
    digits and marks (XID_Start, XID_Continue: str.isidentifier), as Python, JavaScript, Rust and Go
    take them; `πw`, `𠀀x`, `é`, `𝓌idth` are names, which an ASCII pattern missed."""
    return word.isidentifier() and not keyword.iskeyword(word)


# how a language compares names: Python's NFKC (PEP 3131: `𝓌idth` is `width`), Rust's NFC; the
# others code point by code point
FOLD = {"python": "NFKC", "rust": "NFC"}


def spelled(name: bytes, language: str | None) -> bytes:
    """`name` (UTF-8) as `language` compares it."""
    form = FOLD.get(language or "")
    return name if form is None or name.isascii() else \
        unicodedata.normalize(form, name.decode("utf-8", "replace")).encode("utf-8")


def names(node, name: bytes, language: str | None = None):
    """Every identifier node under `node` that is `name` in `language` (spelled; None: spelled
    alike), in order."""
    want, stack = spelled(name, language), [node]
    while stack:
        n = stack.pop()
        if _named(n, want, language):
            yield n
        stack.extend(reversed(n.children))


def _named(n, want: bytes, language: str | None) -> bool:
    """Whether node `n` is an identifier that is `want` (spelled) in `language`."""
    return n.type in NAMES and (n.text == want or language in FOLD and not n.text.isascii()
                                and spelled(n.text, language) == want)


def seen_names(scope, name: bytes, language: str | None, hide: bool = True, budget: Budget = UNBOUNDED,
               lo: int = 0):
    """The identifiers under `scope` that are `name` in `language` and resolve to it, from byte `lo`
    on, in order: `names` less those inside a function that binds the name itself (`hide`: Python's
    `binds`, the scripts' declarations). One walk, each function asked once: a check per use, from
    the use up, was quadratic (3,000 calls inside one function took 220 s; and each step up a tree
    of 400 nested blocks is itself a walk down from the root). Stops once `budget` is spent."""
    python = language == "python"
    hides = (FUNCTIONS["python"] if python else FUNCTIONS["javascript"]) if hide else set()
    want = spelled(name, language)
    into = (lambda n: n.type not in hides or not (binds(n, name, hides, budget) if python else _script_binds(n, name)))
    return (n for n in preorder(scope, lo, budget, into=into) if _named(n, want, language))


def preorder(node, lo: int = 0, budget: Budget = UNBOUNDED, hi: int | None = None, into=lambda n: True):
    """The nodes under `node` that end after byte `lo` (and start before `hi`), in document order,
    below a node only when `into(node)`; until `budget` is spent. A tree cursor walks them: a
    node's children are never listed at once (a module's 100,000 statements took 0.15 s to list,
    each time a walk began)."""
    cursor, walked = node.walk(), 0
    going = cursor.goto_first_child_for_byte(lo) is not None
    while going:
        n = cursor.node
        walked += 1
        if hi is not None and n.start_byte >= hi or walked % 256 == 0 and budget.spent():
            return
        yield n
        if into(n) and (cursor.goto_first_child_for_byte(lo) is not None if n.start_byte < lo
                        else cursor.goto_first_child()):
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return


def binds(scope, name: bytes, functions: set[str], budget: Budget = UNBOUNDED) -> bool:
    """Whether a Python function binds `name` itself: a parameter, or a target it assigns, not
    declared nonlocal or global. Not known once `budget` is spent (False: the walk that asked stops
    too)."""
    params = scope.child_by_field_name("parameters")
    if params is not None and any(True for _ in names(params, name, "python")):
        return True
    body = scope.child_by_field_name("body")
    if body is None or (name not in (text := body.text) and text.isascii()):
        return False  # never spelled there (NFKC can spell it otherwise only outside ASCII)
    stack, bound, walked = [body], False, 0
    while stack:
        n = stack.pop()
        walked += 1
        if walked % 256 == 0 and budget.spent():
            return False
        if n.type in ("nonlocal_statement", "global_statement") and any(True for _ in names(n, name, "python")):
            return False
        if n.type in functions or n.type == "class_definition":
            continue
        if n.type in ("assignment", "augmented_assignment", "for_statement", "for_in_clause", "as_pattern",
                      "with_item", "named_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("name") or n.child_by_field_name("alias")
            if target is not None and any(is_use(x) for x in names(target, name, "python")):
                bound = True
        stack.extend(n.children)
    return bound


def binding(node) -> bool:
    """Whether this occurrence of a name defines it (a parameter, an assignment's target, a definition's
    name) rather than uses it; `self.x = ...` defines the attribute x."""
    n = node
    if n.parent is not None and n.parent.type in ("attribute", "member_expression", "field_access"):
        n = n.parent
    parent = n.parent
    if parent is None:
        return False
    if parent.type == "expression_list" and (parent.parent is None or parent.parent.type != "short_var_declaration"):
        return False
    return (parent.type, None) in BINDINGS or (parent.type, field_of(n)) in BINDINGS


def _script_binds(fn, name: bytes) -> bool:
    """Whether a JavaScript or TypeScript function has a parameter `name` or declares it in its body
    (`let`/`const`/`var name`, `function name`)."""
    params = fn.child_by_field_name("parameters") or fn.child_by_field_name("parameter")
    if params is not None and any(binding(x) for x in names(params, name)):
        return True
    body = fn.child_by_field_name("body")
    for stmt in body.named_children if body is not None else ():
        declared = [d.child_by_field_name("name") for d in stmt.named_children if d.type == "variable_declarator"] \
            if stmt.type in ("lexical_declaration", "variable_declaration") else [stmt.child_by_field_name("name")]
        if any(d is not None and d.text == name for d in declared):
            return True
    return False


def char_offsets(data: bytes):
    """byte offset -> character offset in `data`, for offsets at character boundaries (a node's).
    Each decodes only from the nearest offset asked before: decoding the whole prefix per site was
    quadratic (30,000 call sites took 4.3 s, of a 6 s follow)."""
    if data.isascii():
        return lambda byte: byte
    known = [(0, 0)]  # (byte, char) of the offsets asked so far, sorted

    def chars(byte: int) -> int:
        i = bisect.bisect_right(known, (byte, math.inf)) - 1
        at, char = known[i]
        if at == byte:
            return char
        char += len(data[at:byte].decode("utf-8", "replace"))
        known.insert(i + 1, (byte, char))
        return char
    return chars


PARSED = 8  # texts kept parsed: a follow asks for a document and for it before the step, several times
# bytes handed to the parser per read: a tree parsed through a reader reads a node's text through it
# too (a 64 KB read made each `node.text` 0.2 ms; 512 bytes: 1 us, the parse as fast)
READ = 512
_parsed: OrderedDict[tuple[str, str], tuple] = OrderedDict()
_parsed_lock = threading.Lock()


def parsed(spec: LanguageSpec, text: str):
    """(the tree of `text`, its UTF-8 bytes), or None for a language without a parser or a parse
    abandoned (the budget applied in this thread, budget.current(), was stopped, or PARSE_S passed).
    A text kept is not parsed again; a new one is parsed from the tree of the newest kept text it
    mostly shares (the document a step ago). The parse calls back into Python as it goes (every ~100
    of its steps), which lets a thread waiting for the interpreter lock take it: another document's
    follow is not held up for the 1-3 s of a 100,000-line file (time.sleep(0) there, to drop the lock
    by hand, cost 1.4 ms a call on a loaded machine). Its time is not the rules': it moves the
    budget's deadline back."""
    parser = parser_for(spec)
    if parser is None:
        return None
    with _parsed_lock:
        if (spec.name, text) in _parsed:
            _parsed.move_to_end((spec.name, text))
            return _parsed[(spec.name, text)]
        kept = [found for (name, _), found in reversed(_parsed.items()) if name == spec.name]
    data, budget, began = text.encode("utf-8"), current(), time.monotonic()
    base = next((tree for old_tree, old in kept if (tree := edited(old_tree, old, data)) is not None), None)
    try:
        found = parser.parse(lambda i, _: data[i:i + READ], *([base] if base is not None else []),
                             progress_callback=lambda *_: budget.parsing(began)), data
    except ValueError:  # abandoned
        parser.reset()
        return None
    finally:
        budget.parsed(time.monotonic() - began)
    with _parsed_lock:
        _parsed[(spec.name, text)] = found
        while len(_parsed) > PARSED:
            _parsed.popitem(last=False)
    return found


@dataclass(frozen=True)
class StepParses:
    """The newest step (with the steps typed just before it on its lines) parsed both ways: the
    document now and as it was before the step, each (tree, UTF-8 bytes), and the bytes the step's
    lines span in each (from `lo`)."""

    now: tuple
    then: tuple
    lo: int
    now_hi: int
    then_hi: int


def step_parses(steps: list[Step], text: str, spec: LanguageSpec) -> StepParses | None:
    """`text` and `text` before the newest of `steps`, parsed (`parsed`); None: no step, or either
    parse missing or abandoned."""
    if not steps:
        return None
    step = joined(steps)
    before, start = undone(step, text)
    now, then = parsed(spec, text), parsed(spec, before)
    if now is None or then is None:
        return None
    lo = len(text[:start].encode("utf-8"))
    return StepParses(now, then, lo, lo + len("".join(step.new).encode("utf-8")),
                      lo + len("".join(step.old).encode("utf-8")))
