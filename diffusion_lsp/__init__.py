"""diffusion-lsp: code completion and next edits from a masked diffusion language model."""

import re
from importlib import metadata
from pathlib import Path


def _version() -> str:
    """pyproject.toml's version, the one source: from the installed package's metadata, else (a
    source tree that was never installed) from pyproject.toml itself."""
    try:
        return metadata.version("diffusion-lsp")
    except metadata.PackageNotFoundError:
        pass
    try:  # a regular expression, not tomllib: Python 3.10 has none
        found = re.search(r'^version\s*=\s*"([^"]+)"', (Path(__file__).parents[1] / "pyproject.toml").read_text(),
                          re.MULTILINE)
    except OSError:
        found = None
    return found.group(1) if found else "0.0.0+unknown"


__version__ = _version()
