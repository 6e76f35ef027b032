"""Words the server says to the user once per install, never again: that the model in use is a
small demo (its checkpoint claims `demo`, model/families/claims.py) and where a better one is, and that a
workspace's own model was not used because this machine did not adapt it (local_state.py).

What was said is remembered in $XDG_STATE_HOME/diffusion-lsp/said.json (~/.local/state when unset).
It is shown with window/showMessage, not a request with buttons: Neovim answers a
window/showMessageRequest with a blocking inputlist(), which would hang the editor's first start."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..engine import DEFAULT_MODEL
from ..local_state import read_state, state_dir
from ..model.families.claims import Claims

DEMO = "demo-model"
README_SECTION = "use-a-real-model"


def state_file() -> Path:
    return state_dir() / "said.json"


def _said() -> dict:
    said = read_state(state_file())
    return said if isinstance(said, dict) else {}


def already_said(key: str) -> bool:
    return bool(_said().get(key))


def remember(key: str) -> bool:
    """Record that `key` was said; False when the state cannot be written (it is said again next
    time: better twice than a user never told)."""
    path, said = state_file(), _said()
    said[key] = True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(said, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def readme_link() -> str:
    """The README's section on real models: the file beside a source checkout; an installed wheel
    has no README, so its model card (which says the same in short) instead."""
    readme = DEFAULT_MODEL.parents[2] / "README.md"
    if readme.is_file():
        return f"{readme.as_uri()}#{README_SECTION}"
    return f"{(DEFAULT_MODEL / 'MODEL_CARD.md').as_uri()}#{README_SECTION}"


def demo_message(claims: Claims) -> str:
    """One sentence and a link, in markdown: VS Code makes [text](url) a link in its notification,
    Neovim shows it as written (the plugin keeps it whole in :messages)."""
    what = ([] if claims.languages is None else ["/".join(n.capitalize() for n in claims.languages) + " only"]) + (
        [] if claims.next_edits else ["no next edits of its own: the rest of your change (a rename, a signature, an edit repeated) is still proposed"])
    said = f" ({', '.join(what)})" if what else ""
    return (f"diffusion-lsp: a small offline demo model{said}; its suggestions are rarely right. "
            f"[Use a real model]({readme_link()})")


def untrusted_key(folder: str, stamp: tuple) -> str:
    """One per folder and state of its files: a model a later pull brings is told of again."""
    return f"untrusted-model:{folder}:{':'.join(map(str, stamp))}"


def untrusted_message(folder: str) -> str:
    """Why the workspace's model is not used, and the setting that uses it."""
    return (f"diffusion-lsp: this workspace has a model, {folder}, that `diffusion-lsp adapt` did not write on "
            "this machine (or whose files changed since; a repository can ship one), so it is not used. To use "
            f"it, set model.path (diffusionLsp.model.path) to {folder}; or run `diffusion-lsp adapt` to make one.")
