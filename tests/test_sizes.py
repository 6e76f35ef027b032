"""Sizes a newcomer reads in one sitting: no module of the package over MAX_LINES lines and no
function (methods and functions inside functions included, from its `def` line to its last) over
MAX_FUNCTION lines. kernels/ is left out: a Triton kernel is one function by necessity, read beside
its launcher and reference. Each failure names the file, the line and the length."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "diffusion_lsp"
MODEL = ROOT / "model"  # installed as diffusion_lsp.model (pyproject's package-dir), as kernels/ is
EXEMPT = ROOT / "kernels"
MAX_LINES = 400
MAX_FUNCTION = 60


def sources() -> list[Path]:
    return [p for p in sorted([*PACKAGE.rglob("*.py"), *MODEL.rglob("*.py")]) if EXEMPT not in p.parents]


def functions(tree: ast.AST, outer: str = "") -> list[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function in `tree`, at any depth."""
    found = []
    for node in ast.iter_child_nodes(tree):
        name = f"{outer}{getattr(node, 'name', '')}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((name, node.lineno, node.end_lineno - node.lineno + 1))
        found += functions(node, f"{name}." if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                   ast.ClassDef)) else outer)
    return found


def long_functions(source: str, where: str) -> list[str]:
    return [f"{where}:{line}: {name} is {n} lines (at most {MAX_FUNCTION})"
            for name, line, n in functions(ast.parse(source, where)) if n > MAX_FUNCTION]


def function(header: str, lines: int, indent: str = "") -> str:
    """Source of a function `lines` lines long, its def line included."""
    return f"{indent}{header}\n" + f"{indent}    x = 1\n" * (lines - 1)


def test_the_measure_sees_functions_methods_and_nested_ones():
    m = MAX_FUNCTION
    source = (function("def at_the_limit():", m) + "class A:\n" + function("async def method(self):", m + 1, "    ")
              + "def outer():\n" + function("def inner():", m + 1, "    ") + "    return inner\n")
    assert long_functions(source, "m.py") == [f"m.py:{m + 2}: A.method is {m + 1} lines (at most {m})",
                                              f"m.py:{2 * m + 3}: outer is {m + 3} lines (at most {m})",
                                              f"m.py:{2 * m + 4}: outer.inner is {m + 1} lines (at most {m})"]
    assert len(sources()) > 100 and PACKAGE / "cli.py" in sources() and MODEL / "decoding" / "sampler.py" in sources()
    assert not any(EXEMPT in p.parents for p in sources())


def test_no_module_over_400_lines():
    long = [f"{p.relative_to(ROOT)}:1: {n} lines (at most {MAX_LINES})"
            for p in sources() if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, "\n".join(long)


def test_no_function_over_60_lines():
    long = [f for p in sources() for f in long_functions(p.read_text(), str(p.relative_to(ROOT)))]
    assert not long, "\n".join(long)
