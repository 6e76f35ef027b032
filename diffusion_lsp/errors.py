"""Exceptions shared by the command line and its subcommands."""


class UserError(Exception):
    """An expected failure: printed as one line `diffusion-lsp: error: ...`, exit code 2."""
