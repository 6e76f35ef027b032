"""What a backend can do, declared (never found by looking for a method): the language server,
serve-api and the next-edit pipeline read it to choose what to ask.
Structured answers are model/structured/constrained.py's."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    probe: bool = False  # scores given tokens (next edit's remask-and-refine needs it)
    rewrite: bool = False  # rewrites a region from an edit prompt (an API's edit endpoint, a model asked in chat)
    drafts: bool = False  # streams the draft after every denoising step
    chat: bool = False  # answers a conversation: it has a chat template (its own, or one given at launch)
    structured: bool = False  # decodes JSON under a schema's constraints: our own sampler

    def message(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_message(cls, raw) -> Capabilities | None:
        """What a worker's state event says its model can do (`message`); None while it says none
        (still loading) or says it in another shape."""
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k), bool) for k in names):
            return None
        return cls(**{k: raw[k] for k in names})
