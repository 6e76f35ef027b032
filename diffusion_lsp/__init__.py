"""diffusion-lsp: code completion and next edits from a masked diffusion language model."""

from importlib import metadata

try:
    __version__ = metadata.version("diffusion-lsp")  # the one source: pyproject.toml's version
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.0.0+unknown"
