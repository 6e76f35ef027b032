"""What a checkpoint says it is good for, read from its config.json without torch: the language
server reads it to choose its defaults (next edits off for a model that does not claim them,
completions only in the model's languages, a word to the user about a demo model).

Our format keeps them under "claims":
    "claims": {"languages": ["python"], "next_edits": false, "demo": true}
- languages: the languages it was trained on (canonical names of context/languages.py); absent or
  null: a general code model, any language.
- next_edits: its next-edit suggestions are worth showing (trained and measured for them).
- demo: a small demonstration model; the server says so once (server/notice.py).
A Hugging Face folder of an open family (Dream, DiffuCoder, LLaDA, CoDA, ...) claims any language
and no next edits: none of them was trained for next-edit suggestions.
Adapters: lora.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..network.config import adapter_base, read_json


@dataclass(frozen=True)
class Claims:
    languages: tuple[str, ...] | None = None  # None: any language
    next_edits: bool = False
    demo: bool = False

    def to_dict(self) -> dict:
        return {"languages": None if self.languages is None else list(self.languages),
                "next_edits": self.next_edits, "demo": self.demo}

    @classmethod
    def from_dict(cls, raw: dict) -> Claims:
        """ValueError naming a bad or unknown key (a typo must not silently claim nothing)."""
        if not isinstance(raw, dict):
            raise ValueError(f"claims should be an object, got {type(raw).__name__}")
        unknown = sorted(set(raw) - {"languages", "next_edits", "demo"})
        if unknown:
            raise ValueError(f"unknown claims keys: {', '.join(map(str, unknown))}")
        languages = raw.get("languages")
        if languages is not None and not (isinstance(languages, list) and all(isinstance(x, str) for x in languages)):
            raise ValueError(f"claims.languages should be a list of language names or null, got {languages!r}")
        flags = {k: raw.get(k, False) for k in ("next_edits", "demo")}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise ValueError(f"claims.{key} should be true or false, got {value!r}")
        return cls(None if languages is None else tuple(languages), **flags)


GENERAL = Claims()  # an open checkpoint or a remote API: any language, no next-edit claim


def read_claims(folder: str | Path) -> Claims:
    """The claims of a checkpoint folder; GENERAL when it makes none (or cannot be read: loading it
    says what is wrong, in the worker)."""
    base = adapter_base(folder)
    if base is not None:  # low-rank adapters claim what their base model does
        folder = base
    try:
        config = read_json(Path(folder) / "config.json")  # never opens a FIFO, never reads 1 GB
    except ValueError:
        return GENERAL
    raw = config.get("claims") if isinstance(config, dict) else None
    if raw is None:
        return GENERAL
    try:
        return Claims.from_dict(raw)
    except ValueError:
        return GENERAL
