"""The folders in layers: each room of the package (a folder, or a module directly in diffusion_lsp/)
imports only rooms of lower layers, never one of its own layer or above, so no two rooms import
each other in a loop. Imports inside functions count as much as those at the top of a module
(hiding one in a function dodges a cycle at import time, not the dependency). The file-level
cycle test is tests/test_cli.py's; this one holds the folders' order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "diffusion_lsp"
MODEL = ROOT / "model"
# where each part of the package lives: model/ and kernels/ sit at the top of the repository
# (pyproject's package-dir installs them as diffusion_lsp.model and diffusion_lsp.kernels)
FOLDERS = {"diffusion_lsp.model": MODEL, "diffusion_lsp.kernels": ROOT / "kernels", "diffusion_lsp": PACKAGE}

# bottom to top; a room may import the rooms of the layers below its own
LAYERS = [
    # what crosses every boundary, and leaf utilities: they import nothing of the project
    {"protocol", "errors", "jsonout", "cpus", "keyscrub", "input_files", "gitrun", "linediff",
     "candidate"},
    {"kernels", "lifecycle", "local_state"},  # Triton kernels and their references; one request's life; state
    # the torch side, model/, a room per job: the network below how a model is asked, below decoding, below
    # structured output and the checkpoint families (which load a model and run their own decodings)
    {"model.network", "workspace_files"},  # the transformer, its config, int8, the tokenizer; workspace writes
    {"model.chat"},  # prompts and chat templates in their sandbox
    {"model.decoding"},  # the canvas denoised: the sampler, its step, policies, reuse, verify, probe
    {"model.structured", "model.families"},  # a JSON Schema decoded under its constraints; checkpoint folders
    {"model"},  # the package's own __init__: load_pretrained on first use
    {"context"},  # tree-sitter context, tokens, post-processing, a repository's files
    {"formats"},  # prompt formats: data below the engine and the backends that write them
    {"acceptance"},  # which candidate is shown: features and a model of acceptance
    {"engine"},  # a loaded model answering the protocol's requests
    {"worker"},  # the engine in its own process, and its link as a Backend
    {"backend"},  # the other Backends (in process, a remote API)
    {"nextedit"},  # the next-edit pipeline over a Backend
    {"options"},  # the command line's shared flags and the backend they describe
    {"server", "api", "fim_batch", "model_check"},  # the language server, serve-api, the commands
    {"fim"},
    # the offline tier: may import the serving code, imported by none of it
    {"data"},
    {"train"},
    {"evals"},
    {"bench"},
    {"regress"},
    {"cli"},
    {"__main__"},
]
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def module_of(path: Path) -> str:
    package, folder = next((p, f) for p, f in FOLDERS.items() if path.is_relative_to(f))
    parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def path_of(module: str) -> Path:
    """Where `module` (dotted) lives, without its `.py`: a folder or a module's file less the suffix."""
    package, folder = next(((p, f) for p, f in FOLDERS.items() if module == p or module.startswith(p + ".")),
                           ("", ROOT))  # not the project's: named as it would be in the repository, found nowhere
    return folder.joinpath(*module[len(package):].split(".")[1 if package else 0:])


def sources() -> list[Path]:
    return sorted(p for folder in (PACKAGE, MODEL, ROOT / "kernels") for p in folder.rglob("*.py"))


def room_of(module: str) -> str | None:
    """The room a module is in: its folder under diffusion_lsp/, or the module itself at the top, a job
    folder of model/ (`model.decoding`); None for the package's own __init__."""
    parts = module.split(".")
    if parts[1:2] == ["model"] and len(parts) > 2 and (MODEL / parts[2]).is_dir():
        return f"model.{parts[2]}"
    return parts[1] if len(parts) > 1 else None


def imported(path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """Every module of the package that `path` (whose text is `source`, else read) imports, at any
    depth of its code -> (module, line). `from . import x` names module x where x is one."""
    module, here = module_of(path), path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if here else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                sub = f"{source}.{a.name}"
                is_module = path_of(sub).with_suffix(".py").exists() or path_of(sub).is_dir()
                found.append((sub if is_module else source, node.lineno))
    return [(m, line) for m, line in found if m == "diffusion_lsp" or m.startswith("diffusion_lsp.")]


def violations() -> list[str]:
    out = []
    for path in sources():
        room = room_of(module_of(path))
        if room is None:
            continue
        for target, line in imported(path):
            other = room_of(target)
            if other is None or other == room:
                continue
            if LAYER[other] >= LAYER[room]:
                out.append(f"{path.relative_to(ROOT)}:{line} imports {target}: {room} (layer "
                           f"{LAYER[room]}) may not import {other} (layer {LAYER[other]})")
    return out


def test_every_room_has_a_layer():
    rooms = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    rooms |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    rooms |= {"model", "kernels"} | {f"model.{p.name}" for p in MODEL.iterdir() if (p / "__init__.py").exists()}
    assert rooms - set(LAYER) == set(), "a new room: give it its place in LAYERS"
    assert set(LAYER) - rooms == set(), "LAYERS names a room that is gone"


def test_no_room_imports_its_own_layer_or_above():
    assert violations() == []


def test_the_check_sees_imports_inside_functions_and_relative_ones():
    """The walk itself: an upward import hidden in a function, written relative, is found."""
    source = "def f():\n    from ...server import stats\n    from . import policies\n"
    assert imported(MODEL / "decoding" / "_layers_probe.py", source) == [
        ("diffusion_lsp.server.stats", 2), ("diffusion_lsp.model.decoding.policies", 3)]


@pytest.mark.parametrize("room", ["protocol", "errors", "jsonout", "cpus", "keyscrub", "input_files", "gitrun"])
def test_the_bottom_imports_nothing_of_the_project(room):
    paths = sorted((PACKAGE / room).rglob("*.py")) if (PACKAGE / room).is_dir() else [PACKAGE / f"{room}.py"]
    assert paths
    assert [(p.name, m) for p in paths for m, _ in imported(p) if room_of(m) not in (None, room)] == []
