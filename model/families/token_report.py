"""What a checkpoint's tokenizer is, for `model check`: its files and size, the special tokens by role as the
folder's own configs name them (config.json's *_token_id, tokenizer_config.json's *_token) beside the family's
candidate names the loader falls back to (table.py), which families' tokens the vocabulary holds, and the ids
of the prompt the product builds for a one-line example, so a user can compare them with the model card.
Nothing here is a token id written in code: every id is looked up by name or read from the folder. The example
row is the sampler's (model/decoding/canvas.py build_row), a prefix-only family's prompt its Prompter's
(model/chat/prompting.py), and DreamOn's row ends with its end-of-text token after the suffix, as dreamon.py's
_decode builds it."""

from __future__ import annotations

from pathlib import Path

from ..chat.prompting import prompter_for
from ..decoding.canvas import CanvasRequest, build_row
from ..network.config import read_json
from ..network.tokenizer import Tokenizer
from .table import FAMILIES, Family

# role -> (config.json key holding its id, tokenizer_config.json key holding its name, Family field of candidates)
ROLES = {
    "mask": ("mask_token_id", "mask_token", "mask"),
    "pad": ("pad_token_id", "pad_token", "filler"),
    "eos": ("eos_token_id", "eos_token", "end"),
    "bos": ("bos_token_id", "bos_token", "bos"),
    "expand": ("expand_token_id", "expand_token", "expand"),
}
# the one-line example: a cursor after `return ` in a one-line function, a canvas of EXAMPLE_TOKENS masks
EXAMPLE = ("def add(a, b): return ", "  # the sum\n")
EXAMPLE_TOKENS = 4


def _json(path: Path) -> dict:
    """A config file's object; {} when it is absent or unreadable (the loader already said what it needs)."""
    try:
        value = read_json(path) if path.is_file() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _name(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value if isinstance(value, str) else None


def _own_name(config: dict, name: str) -> str | None:
    """The role's name in our own format's config.json (SpecialTokens: the pad is the filler;
    eos and expand, where a model has them, are extra roles)."""
    own = config.get("special_tokens")
    if not isinstance(own, dict):
        return None
    extra = own.get("extra") if isinstance(own.get("extra"), dict) else {}
    return _name(own.get({"pad": "filler"}.get(name, name))) or _name(extra.get(name))


def role(tok: Tokenizer, name: str, config: dict, tok_config: dict, family: Family | None) -> dict:
    """One role: {"token", "id", "from"} where the folder names it (config.json first), else where the family's
    candidates find it; {"missing": why} when neither does."""
    id_key, name_key, field = ROLES[name]
    ids = config.get(id_key)
    for i in ids if isinstance(ids, list) else [ids]:
        if type(i) is int and 0 <= i < tok.vocab_size:
            return {"token": tok.hf.id_to_token(i), "id": i, "from": f"config.json {id_key}"}
    for token, where in ((_name(tok_config.get(name_key)), f"tokenizer_config.json {name_key}"),
                         (_own_name(config, name), "config.json special_tokens")):
        if token is not None and tok.hf.token_to_id(token) is not None:
            return {"token": token, "id": tok.hf.token_to_id(token), "from": where}
    candidates = getattr(family, field) if family else ()
    found = next((t for t in candidates if tok.hf.token_to_id(t) is not None), None)
    if found is not None:
        return {"token": found, "id": tok.hf.token_to_id(found), "from": f"{family.name}'s name for it"}
    where = f"{id_key} in config.json, {name_key} in tokenizer_config.json"
    return {"missing": f"not named ({where}{', nor ' + ' or '.join(candidates) if candidates else ''})"}


def used_ids(tok: Tokenizer) -> dict[str, int | None]:
    """The id the product puts in each role (pretrained.special_tokens chose them by name): the filler pads."""
    extra = {name: tok.id_of(name) if name in tok.special.extra else None for name in ("eos", "expand")}
    return {"mask": tok.mask_id, "pad": tok.filler_id, "bos": tok.bos_id, **extra}


def families_with_tokens(tok: Tokenizer) -> list[str]:
    """The families whose mask, filler and (shifted ones) bos candidates this vocabulary all holds."""
    def has(names):
        return any(tok.hf.token_to_id(n) is not None for n in names)

    return [f.name for f in FAMILIES.values() if has(f.mask) and has(f.filler) and (has(f.bos) or not f.shift_logits)]


def example_prompt(tok: Tokenizer, family: Family | None, folder: Path, max_seq_len: int) -> dict:
    """The row the sampler builds for EXAMPLE (build_row, without token healing), ids and their text; a
    prefix-only family's prompt is its Prompter's, DreamOn's row ends with its end-of-text token."""
    dreamon = "expand" in tok.special.extra
    try:
        prompter = prompter_for(family, tok, folder)
    except ValueError as e:  # a FIM token or a chat template the folder lacks: the rest of the report stands
        return {"prefix": EXAMPLE[0], "suffix": EXAMPLE[1], "skipped": str(e)}
    prompt_ids = prompter.fill(*EXAMPLE, max_seq_len - EXAMPLE_TOKENS - 1) if prompter else None
    req = CanvasRequest(*EXAMPLE, max_tokens=EXAMPLE_TOKENS, prompt_ids=prompt_ids)
    ids = build_row(req, tok, max_seq_len - dreamon, heal=False).ids + ([tok.id_of("eos")] if dreamon else [])
    return {"prefix": EXAMPLE[0], "suffix": EXAMPLE[1], "ids": ids,
            "pieces": [tok.hf.decode([i], skip_special_tokens=False) for i in ids]}


def token_report(folder: Path, tok: Tokenizer, family: Family | None, max_seq_len: int) -> dict:
    """`model check`'s "tokenizer" entry for a checkpoint loaded from `folder` (for an adapter: its base)."""
    folder = Path(folder)
    config, tok_config = _json(folder / "config.json"), _json(folder / "tokenizer_config.json")
    files = "tokenizer.json" if (folder / "tokenizer.json").exists() else "vocab.json + merges.txt"
    roles = {name: role(tok, name, config, tok_config, family) for name in ROLES}
    for name, used in used_ids(tok).items():  # where the loader's choice is not what the folder names
        if used is not None and roles[name].get("id") != used:
            roles[name]["product_uses"] = {"token": tok.hf.id_to_token(used), "id": used}
    return {"files": files, "vocab_size": tok.vocab_size, "roles": roles,
            "families_with_these_tokens": families_with_tokens(tok),
            "example": example_prompt(tok, family, folder, max_seq_len)}
