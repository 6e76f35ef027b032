"""Which model answers in a workspace. model.path when the settings name one; else the model
`diffusion-lsp adapt` made for this workspace (ROOT/.diffusion-lsp/model) when this machine's record
says adapt wrote it for this workspace, with these files (local_state.py), and it would load
(model/families/quick_check.py, without torch); else the embedded one. A model folder the repository
brought (a clone can ship one) is not used: the session tells the user once what to set to use it.
An adapted model that would not load is passed over for the base, with one message saying why and
how to make it again."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..acceptance.model import EDIT_FILE as EDIT_ACCEPTANCE_FILE
from ..acceptance.model import FILE as ACCEPTANCE_FILE
from ..acceptance.model import WORKSPACE_DIR as ACCEPTANCE_DIR
from ..acceptance.model import AcceptanceModel
from ..context.repo import ADAPTED_DIR
from ..local_state import trusted
from ..model.network.config import read_json
from ..model.families.quick_check import problem
from ..protocol.settings import LaunchSettings


@dataclass(frozen=True)
class ModelChoice:
    path: str | None  # what model.path becomes (None: the embedded model)
    source: str  # "settings", "workspace" (adapted), "embedded", or "remote"
    refused: str | None = None  # the workspace's adapted model was found and would not load: why
    untrusted: str | None = None  # a workspace model this machine did not adapt was found there (its folder)
    adapted: dict | None = None  # its config.json "adapted" (repo, base, minutes, steps)
    stamp: tuple = ()  # the adapted model's config.json (size, mtime) when this was chosen

    def describe(self) -> str:
        if self.source == "workspace":
            a = self.adapted or {}
            how = f", adapted for {a['minutes']:g} minutes ({a.get('steps', '?')} steps)" \
                if isinstance(a.get("minutes"), (int, float)) else ""
            return f"the workspace's adapted model {self.path}{how}"
        if self.source == "settings":
            return f"the model in {self.path} (model.path)"
        if self.source == "remote":
            return "a remote API (model.backend openai)"
        return "the embedded model" + (f" ({self.untrusted} was not adapted on this machine: model.path uses it)"
                                       if self.untrusted else "")


def _stamp(folder: Path) -> tuple:
    """(size, mtime) of the files `adapt` writes last: config.json, or adapter.json for adapters."""
    out = ()
    for name in ("config.json", "adapter.json"):
        try:
            st = os.stat(folder / name)
        except OSError:
            continue
        out += (name, st.st_size, st.st_mtime_ns)
    return out


def choose(launch: LaunchSettings, root: str | None) -> ModelChoice:
    """The model for `launch` (the settings) in the workspace at `root` (None: no workspace)."""
    if launch.backend != "local":
        return ModelChoice(None, "remote")
    if launch.path:
        return ModelChoice(launch.path, "settings")
    folder = Path(root) / ADAPTED_DIR if root else None
    key = None if folder is None else next((folder / k for k in ("adapter.json", "config.json")
                                            if (folder / k).exists()), None)
    if key is None:
        return ModelChoice(None, "embedded")
    stamp = _stamp(folder)
    if not trusted(folder, Path(root)):
        return ModelChoice(None, "embedded", untrusted=str(folder), stamp=stamp)
    why = problem(folder)
    if why is not None:
        return ModelChoice(None, "embedded", refused=f"{folder}: {why}", stamp=stamp)
    try:
        adapted = read_json(key).get("adapted")
    except (ValueError, AttributeError):  # rewritten since it was checked
        adapted = None
    return ModelChoice(str(folder), "workspace", adapted=adapted if isinstance(adapted, dict) else None, stamp=stamp)


def changed(choice: ModelChoice, root: str | None) -> bool:
    """Whether the workspace's adapted model was written (or removed) since `choice` was made: a
    stat of one file, cheap enough for every opened document."""
    if choice.source in ("settings", "remote") or not root:
        return False
    return _stamp(Path(root) / ADAPTED_DIR) != choice.stamp


RULES = {"completion": "shown by the rules: the model's fill, cut at completion.confidenceCut",
         "edit": "next edits shown by the rules: the change's own sites, else the model's edit"}


def acceptance_for(choice: ModelChoice, model_dir: Path | None, root: str | None,
                   kind: str = "completion") -> tuple[AcceptanceModel | None, str]:
    """(the acceptance model of `kind` that decides what is shown, one line saying which or why none):
    the one `diffusion-lsp calibrate` fitted for this workspace on this machine
    (ROOT/.diffusion-lsp/acceptance), else the one beside the model's weights (not for a remote API's
    model), else None (the rules)."""
    name, places = ACCEPTANCE_FILE if kind == "completion" else EDIT_ACCEPTANCE_FILE, []
    if root:
        folder = Path(root) / ACCEPTANCE_DIR
        if (folder / name).exists() and trusted(folder, Path(root)):
            places.append(folder / name)
    if choice.source != "remote" and model_dir is not None:
        places.append(model_dir / name)
    problems = []
    for path in places:
        if not path.exists():
            continue
        try:
            model = AcceptanceModel.load(path, kind)
        except ValueError as e:
            problems.append(f"{path} is unusable ({e})")
            continue
        return model, f"acceptance: {path} (shown when P >= {model.show_above:g})"
    none = f"no {'next-edit ' if kind == 'edit' else ''}acceptance model; "
    return None, f"acceptance: {'; '.join(problems) + '; ' if problems else none}{RULES[kind]}"
