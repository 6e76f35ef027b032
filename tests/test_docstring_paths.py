"""File paths written in the package's text: every one names a file or folder that exists, and each is
written in a module docstring only, where a move shows (a module's docstring is read when its file
is; a path in a function's docstring or a comment drifts unseen).

What counts as a path, in docstrings (any string statement) and comments of diffusion_lsp/**.py,
model/**.py and kernels/*.py:
- a word with a folder in it whose last part ends in one of EXTENSIONS (`model/decoding/verify.py`,
  `queries/<lang>/units.scm`, `tests/test_gpu.py`), or that ends in `/` and starts with a folder of
  the project (`kernels/`, `context/queries/`);
- a bare module name (`sampler.py`): a sibling of the module, or a module at the top of the package.
A path is resolved against the module's own folder, diffusion_lsp/ or the repository root.
`<lang>`, `{name}`, `*` and upper-case parts (`NAME`) stand for any name; `{a,b}` for each of a, b.
Not counted: URLs, absolute paths, a path under a placeholder (`RUN_DIR/log.jsonl`), another
project's files (EXTERNAL: written with their project's folder, or by a name listed there), bare
names of data files (`config.json`, `merges.txt`: files of a checkpoint's folder, not of ours) and
the examples of EXAMPLES."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "diffusion_lsp"
EXTENSIONS = ("py", "scm", "txt", "json", "md", "lua", "ts", "sh")

# other projects' files, by the folder they are written under or by their name
EXTERNAL_PREFIXES = (
    "transformers/",  # Hugging Face transformers
    "vllm/",  # vLLM
    "python/sglang/",  # SGLang
    "Lib/",  # CPython's standard library
    "pip/",
    "botocore/",
    "evaluate/",  # lurf21/NextEditPrediction's scorer
)
EXTERNAL_NAMES = {
    "modeling_llada.py",  # LLaDA's remote code
    "modeling_llada2_moe.py",  # LLaDA2's remote code
    "modeling_stable_diffcoder.py",  # Stable-DiffCoder's remote code
    "generation_diffusion_gemma.py",  # transformers' DiffusionGemma generate
    "initialization_options.py",  # jedi-language-server
    "code_completion_parser.py",  # SGLang
    "typing.py",  # the standard library, as a size
    "_pydecimal.py",
}
# example files of a docstring (a prompt's or a diff's), not files of this project
EXAMPLES = {"pkg/mod.py", "a/pkg/mod.py", "b/pkg/mod.py", "utils.py", "leak.py"}

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S*")
WORD = re.compile(r"[\w.*<>{},$~+-]*(?:/[\w.*<>{},$~+-]*)+|[\w.*<>{},-]+\.(?:" + "|".join(EXTENSIONS) + r")\b")
PLACEHOLDER = re.compile(r"<[^>/]*>|\{[^}/,]*\}|\b[A-Z][A-Z0-9_]*\b(?=[./]|$)")


def texts(path: Path) -> list[tuple[str, int, str]]:
    """Every docstring and comment of `path` -> (where: "module", "docstring" or "comment", line, text).
    Any string statement counts as a docstring; the module's is its first statement."""
    source = path.read_text()
    tree = ast.parse(source, str(path))
    first = tree.body[0] if tree.body else None
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append(("module" if node is first else "docstring", node.lineno, node.value.value))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append(("comment", token.start[0], token.string))
    return found


def folders() -> set[str]:
    """The names a project path may start with: the folders of the package and of the repository."""
    return {p.name for base in (ROOT, PACKAGE) for p in base.iterdir() if p.is_dir()} - {"__pycache__"}


def expand(word: str) -> list[str]:
    """`a/{b,c}.py` -> [`a/b.py`, `a/c.py`]."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not match:
        return [word]
    return [w for part in match.group(1).split(",") for w in expand(word[: match.start()] + part + word[match.end():])]


def paths_in(text: str, project: set[str]) -> list[str]:
    """The project paths written in `text`, as written (see the module docstring for what counts)."""
    found = []
    for match in WORD.finditer(URL.sub(" ", text)):
        word = match.group(0).rstrip(".,;:")
        if match.start() and text[match.start() - 1] in "/$~" or word.startswith(("/", "~", "$", ".")):
            continue  # absolute, or under a home or a variable
        if word in EXAMPLES or word.startswith(EXTERNAL_PREFIXES) or word.split("/")[-1] in EXTERNAL_NAMES:
            continue
        first, _, rest = word.partition("/")
        if PLACEHOLDER.fullmatch(first) or first.isupper():
            continue  # under a folder the user names
        if "/" not in word:
            if word.endswith(".py") and not word.startswith((".", "*")):
                found.append(word)  # a bare module name; other bare names are a checkpoint's files
        elif word.endswith("/"):
            if first in project:
                found.append(word)
        elif word.rsplit(".", 1)[-1] in EXTENSIONS and re.fullmatch(r"[\w.-]+(?:/[\w.*<>{},-]+)+", word):
            found.append(word)
    return found


def exists(word: str, here: Path) -> bool:
    """Whether `word` names something under `here` (the module's folder), diffusion_lsp/ or the root."""
    for each in expand(word):
        pattern = PLACEHOLDER.sub("*", each).rstrip("/")
        if not any(any(base.glob(pattern)) for base in (here, PACKAGE, ROOT)):
            return False
    return True


def test_paths_exist_and_live_in_module_docstrings():
    project = folders()
    missing, misplaced, count = [], [], 0
    for path in sorted(p for folder in (PACKAGE, ROOT / "model", ROOT / "kernels") for p in folder.rglob("*.py")):
        name = path.relative_to(ROOT)
        for where, line, text in texts(path):
            for word in paths_in(text, project):
                count += 1
                if not exists(word, path.parent):
                    missing.append(f"{name}:{line}: {word} (in the {where}) names nothing")
                if where != "module":
                    misplaced.append(f"{name}:{line}: {word} is in a {where}, not the module docstring")
    assert count > 100, f"only {count} paths found: the search is broken"
    assert not missing + misplaced, "\n".join(
        [f"{len(missing)} paths name nothing, {len(misplaced)} are outside module docstrings:"] + missing + misplaced
    )


def test_what_counts_as_a_path():
    project = folders()
    said = (
        "Fill (protocol/answers.py), sampler.py; queries/<lang>/units.scm, kernels/ and"
        " nextedit/{mercury,instruct}.py; not https://x.org/a/b.py, /etc/passwd.py, RUN_DIR/log.jsonl,"
        " OUT/a.json, config.json, keys/values, vllm/renderers/online_renderer.py, modeling_llada.py"
    )
    assert paths_in(said, project) == [
        "protocol/answers.py",
        "sampler.py",
        "queries/<lang>/units.scm",
        "kernels/",
        "nextedit/{mercury,instruct}.py",
    ]
    model, context = ROOT / "model" / "decoding", PACKAGE / "context"
    assert exists("sampler.py", model) and not exists("sampler.py", context)
    assert exists("queries/<lang>/units.scm", context) and exists("tests/test_layers.py", model)
    assert exists("formats/{mercury,instruct}.py", model) and not exists("nextedit/{mercury,instruct}.py", model)
