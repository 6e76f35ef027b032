"""`diffusion-lsp bench renames FILE...`: renames followed through the real language server by
accepting next edits alone, on real Python files.

For each file, renames are picked at random: a local, a parameter and an attribute of `self`; and
functions with calls in the file get a parameter added (the "argument" kind, judged by
signatures.py: each call must pass it, bound as Python binds it). The
right answer comes from Python itself, not from the server's scoping: `symtable` says which
function a name is local to (and which nested functions shadow it), `ast` says where it occurs (an
attribute: `self.NAME` in its class). The name is renamed where it is first bound (as a user
would), then the next edit is asked for with the cursor there, applied as Tab applies it, and asked
for again until none comes (at most twice as many times as the name has sites). Counted per kind:
renames finished right (every use renamed, nothing else changed), suggestions per rename, edits
shown that were wrong (they changed anything but uses of the name), and the p50 latency per
suggestion. Prints figures; asserts nothing."""

from __future__ import annotations

import ast
import asyncio
import random
import re
import statistics
import sys
import symtable
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import jsonout
from ..errors import UserError
from ..input_files import InputFile
from ..nextedit import scope
from ..options import add_launch_args, launch_settings
from ..server.positions import column_to_index, offset_at
from . import signatures
from .signatures import Added, column

MAX_SOURCE = 1 << 20  # bytes of a file to rename in: each rename replays it through the server; 18 MB ran out of memory
KINDS = ("local", "parameter", "attribute", "argument")  # argument: a parameter added, passed at its calls
SETTINGS = {"completion": {"debounceMs": 0}, "nextEdit": {"debounceMs": 0}, "worker": {"idleExitS": 0}}


def register(bench) -> None:
    r = bench.add_parser("renames", help="renames followed by accepting next edits alone, through the real server")
    r.add_argument("files", nargs="+", metavar="FILE", type=InputFile, help="Python files to rename names in")
    r.add_argument("--per-kind", type=int, default=4, help="renames of each kind per file (default 4)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", action="store_true", help="print one JSON object")
    add_launch_args(r)
    r.set_defaults(run=run)


@dataclass(frozen=True)
class Target:
    kind: str
    name: str
    sites: tuple[tuple[int, int], ...]  # (line, column) of each occurrence, 0-based; the definition first

    @property
    def size(self) -> int:
        return len(self.sites)

    def renamed(self, text: str, new: str, only_first: bool = False) -> str:
        lines = text.split("\n")
        for line, col in sorted(self.sites[:1] if only_first else self.sites, reverse=True):
            lines[line] = lines[line][:col] + new + lines[line][col + len(self.name):]
        return "\n".join(lines)


def _docstring_sites(func: ast.AST, name: str, text: str) -> list[tuple[int, int]]:
    """Where `func`'s docstring names its parameter `name` as one (the server's convention, scope.DOC_MENTIONS:
    `:param name:`, `name (type):`, `name : type`, `name` in backticks), as (line, column)."""
    first = func.body[0] if func.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)):
        return []
    segment = ast.get_source_segment(text, first.value) or ""
    out, start = [], column(text.split("\n"), first.value.lineno - 1, first.value.col_offset)
    for pattern in scope.DOC_MENTIONS:
        for m in re.finditer(pattern.format(name=re.escape(name)), segment):
            line = segment.count("\n", 0, m.start(1))
            col = m.start(1) - segment.rfind("\n", 0, m.start(1)) - 1 if line else start + m.start(1)
            out.append((first.value.lineno - 1 + line, col))
    return out


def _scope_sites(func: ast.AST, name: str, table: symtable.SymbolTable, lines: list[str]) -> list[tuple[int, int]]:
    """Where `name`, local to `func`, occurs in it: its parameters, Name nodes and `except ... as name`,
    nested scopes included unless they bind the name themselves (symtable says so); (line, character
    column), 0-based."""
    out, children = [], {(t.get_name(), t.get_lineno()): t for t in table.get_children()}

    def visit(node, here: symtable.SymbolTable) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                key = ("lambda" if isinstance(child, ast.Lambda) else child.name, child.lineno)
                inner = children.get(key) if here is table else None
                if inner is None or (name in inner.get_identifiers() and inner.lookup(name).is_local()):
                    if not isinstance(child, ast.Lambda):
                        for d in child.decorator_list:
                            visit(d, here)
                    continue
                visit(child, inner)
                continue
            if isinstance(child, ast.Name) and child.id == name or isinstance(child, ast.arg) and child.arg == name:
                out.append((child.lineno - 1, column(lines, child.lineno - 1, child.col_offset)))
            elif isinstance(child, ast.ExceptHandler) and child.name == name and child.type is not None:
                at = column(lines, child.type.end_lineno - 1, child.type.end_col_offset)
                found = re.compile(r"\s+as\s+(" + re.escape(name) + r")\b").match(lines[child.type.end_lineno - 1], at)
                if found:
                    out.append((child.type.end_lineno - 1, found.start(1)))
            visit(child, here)

    visit(func, table)
    return sorted(set(out))


def targets(text: str, rng: random.Random, per_kind: int) -> list[Target]:
    """Up to `per_kind` renames of each kind in `text`: names with a definition and at least one use."""
    tree, top = ast.parse(text), symtable.symtable(text, "<file>", "exec")
    tables, lines = {}, text.split("\n")

    def index(t: symtable.SymbolTable) -> None:
        tables[(t.get_name(), t.get_lineno())] = t
        for c in t.get_children():
            index(c)
    index(top)
    found = {k: [] for k in KINDS}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (node.name, node.lineno) in tables:
            table = tables[(node.name, node.lineno)]
            params = {a.arg for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs} - {"self", "cls"}
            for sym in table.get_symbols():
                if not sym.is_local() or sym.is_global() or sym.get_name().startswith("__"):
                    continue
                sites = sorted(_scope_sites(node, sym.get_name(), table, lines))
                kind = "parameter" if sym.get_name() in params else "local"
                if kind == "parameter":  # and its keyword at the function's calls, and its docstring's mentions
                    sites += signatures.keyword_sites(tree, top, node, sym.get_name(), lines)
                    sites += _docstring_sites(node, sym.get_name(), text)
                if len(sites) >= 2 and sites[0][0] >= node.lineno - 1:
                    found[kind].append(Target(kind, sym.get_name(), tuple(sites)))
        if isinstance(node, ast.ClassDef):
            attrs: dict[str, list[tuple[int, int]]] = {}
            stored: dict[str, tuple[int, int]] = {}  # its first assignment: where a user renames it
            for a in ast.walk(node):
                if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self":
                    site = (a.end_lineno - 1, column(lines, a.end_lineno - 1, a.end_col_offset) - len(a.attr))
                    attrs.setdefault(a.attr, []).append(site)
                    if isinstance(a.ctx, ast.Store):
                        stored[a.attr] = min(stored.get(a.attr, site), site)
            methods = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
            for name, sites in attrs.items():
                if len(set(sites)) >= 2 and name in stored and name not in methods and not name.startswith("__"):
                    rest = sorted(set(sites) - {stored[name]})
                    found["attribute"].append(Target("attribute", name, (stored[name], *rest)))
    found["argument"] = signatures.targets(text, tree, top)
    return [t for k in KINDS for t in rng.sample(found[k], min(per_kind, len(found[k])))]


async def chain(lsp, uri: str, text: str, target: Target | Added) -> dict:
    """Make `target`'s first change (rename it at its definition; add the parameter), then accept next
    edits until none comes, judging each."""
    if isinstance(target, Added):
        line, col, old, new = target.line, target.col, "", target.insert
        now = "\n".join(t if i != line else t[:col] + new + t[col:] for i, t in enumerate(text.split("\n")))
        start = now

        def judged(after: str) -> tuple[bool, bool]:
            return signatures.judge(start, after, target)
    else:
        (line, col), old, new = target.sites[0], target.name, target.name + "_2"
        expected, now = target.renamed(text, new), target.renamed(text, new, only_first=True)

        def judged(after: str) -> tuple[bool, bool]:
            return after == expected, _only_the_name(now, after, target.name, new, expected)
    lsp.open(uri, text)
    before = text.split("\n")[line][:col]
    lsp.change(uri, (line, before), (line, before + old), new)
    shown, wrong, ms = 0, 0, []
    for _ in range(2 * target.size):
        took, edit = await lsp.next_edit(uri, line, before + new)
        ms.append(took)
        if edit is None:
            break
        shown += 1
        after = _apply(now, edit, lsp.encoding)
        wrong += not judged(after)[1] or after == now
        rng, lines = edit["range"], now.split("\n")

        def at(pos: dict) -> tuple[int, str]:
            line_text = lines[pos["line"]]
            return pos["line"], line_text[:column_to_index(line_text, pos["character"], lsp.encoding)]
        lsp.change(uri, at(rng["start"]), at(rng["end"]), edit["text"])
        now = after
    lsp.close(uri)
    return {"kind": target.kind, "sites": target.size, "shown": shown, "wrong": wrong, "ms": ms,
            "done": judged(now)[0]}


def _apply(text: str, edit: dict, encoding: str) -> str:
    rng = edit["range"]
    start = offset_at(text, rng["start"]["line"], rng["start"]["character"], encoding)
    end = offset_at(text, rng["end"]["line"], rng["end"]["character"], encoding)
    return text[:start] + edit["text"] + text[end:]


def _only_the_name(now: str, after: str, old: str, new: str, expected: str) -> bool:
    """Whether an edit renamed only right sites: every line it changed reads as the expected one."""
    a, b, e = now.split("\n"), after.split("\n"), expected.split("\n")
    return len(b) == len(a) and all(y == z for x, y, z in zip(a, b, e) if x != y)


async def run_all(launch, files: list[tuple[str, str, list[Target]]]) -> list[dict]:
    from .lsp_client import BenchClient  # pygls and lsprotocol: kept off --help

    out = []
    with tempfile.TemporaryDirectory(prefix="diffusion-lsp-renames-", ignore_cleanup_errors=True) as tmp:
        cmd = [sys.executable, "-m", "diffusion_lsp", "serve", "--worker-socket", str(Path(tmp) / "w.sock")]
        async with BenchClient(cmd + launch.to_argv(), SETTINGS) as lsp:
            await lsp.wait_for_model(local=launch.backend == "local")
            for k, (name, text, picked) in enumerate(files):
                for j, target in enumerate(picked):
                    out.append({"file": name, "name": target.name,
                                **await chain(lsp, f"file:///renames/{k}/{j}/{name}", text, target)})
    return out


def summary(records: list[dict]) -> dict:
    rows = {}
    for kind in (*KINDS, "all"):
        rs = [r for r in records if kind == "all" or r["kind"] == kind]
        if rs:
            ms = [m for r in rs for m in r["ms"]]
            rows[kind] = {"renames": len(rs), "done": sum(r["done"] for r in rs) / len(rs),
                          "with_no_wrong": sum(r["done"] and not r["wrong"] for r in rs) / len(rs),
                          "suggestions": statistics.fmean(r["shown"] for r in rs),
                          "sites": statistics.fmean(r["sites"] for r in rs),
                          "wrong_shown": sum(r["wrong"] for r in rs), "p50_ms": statistics.median(ms) if ms else None}
    return rows


def run(args) -> int:
    launch = launch_settings(args)
    rng, files = random.Random(args.seed), []
    for file in args.files:
        text = file.read_text(MAX_SOURCE)  # Refused, naming the file: not a regular file, too large, not UTF-8
        try:
            picked = targets(text, rng, args.per_kind)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            raise UserError(f"{file}: not Python this bench can parse ({type(e).__name__}: {e})") from None
        files.append((file.name, text, picked))
    records = asyncio.run(run_all(launch, files))
    rows = summary(records)
    if args.json:
        print(jsonout.dumps({"rows": rows, "records": records}))
        return 0
    print(f"{len(records)} renames in {len(files)} files, each renamed at its definition, then next edits accepted")
    print(f"{'':10} {'renames':>7} {'done':>6} {'done, nothing wrong':>20} {'suggestions':>11} {'sites':>6} "
          f"{'wrong shown':>11} {'p50 ms':>7}")
    for kind, r in rows.items():
        print(f"{kind:10} {r['renames']:7d} {r['done']:6.0%} {r['with_no_wrong']:20.0%} {r['suggestions']:11.1f} "
              f"{r['sites']:6.1f} {r['wrong_shown']:11d} {r['p50_ms'] or 0:7.0f}")
    for r in [r for r in records if not r["done"]][:6]:
        print(f"  not done: {r['file']} {r['kind']} {r['name']} ({r['sites']} sites, {r['shown']} suggestions, "
              f"{r['wrong']} wrong)")
    return 0
