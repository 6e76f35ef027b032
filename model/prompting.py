"""Putting a fill to a prefix-only model (families.py `prompt`): a model that sees nothing after its
canvas (block diffusion, DiffusionGemma's encoder over the prompt) gets the code after the cursor in
its prompt, and the answer is the canvas after the prompt.

- "fim": `<prefix>P<suffix>S<middle>` in the family's FIM tokens (PSM order, as Seed-Coder and
  Qwen2.5-Coder were trained), the tokens as ids so that code that spells a FIM token stays text;
- "chat": one user turn of the checkpoint's own chat template asking for the code at the cursor
  (prompts/infill_chat.txt), or for a region rewritten (prompts/edit_chat.txt, the content in
  Mercury Edit's tagged format, nextedit/mercury.py, as Zeta and Mercury Edit prompt for edits).

The chat template is data from the folder (tokenizer_config.json `chat_template`, or
chat_template.jinja), rendered in jinja2's immutable sandbox the way transformers renders it
(`apply_chat_template`); no code from the folder runs. An instruct model answers in prose or a code
fence now and then: `answer_text` keeps the code."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .canvas import fit_context
from .config import read_json, read_text
from .tokenizer import Tokenizer

MAX_TEMPLATE = 1 << 20  # bytes of a chat template: the largest published ones are ~20 KB
CURSOR = "<|cursor|>"
_STAND_IN = "\x00diffusion-lsp: the user's text\x00"  # in a template's rendering, where the text goes
_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:\n?```|\Z)", re.S)  # the first fence; unclosed: cut by the token limit


def instruction(name: str) -> str:
    """A prompt's text: model/prompts/NAME.txt (prompts are data)."""
    return resources.files(__package__).joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")


def chat_template(folder: Path) -> str | None:
    """The checkpoint's chat template: chat_template.jinja, else tokenizer_config.json's
    `chat_template` (a string, or a list of named templates: the "default" one); None without one.
    ValueError naming the file when it is unreadable."""
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        return read_text(jinja, MAX_TEMPLATE)
    config = folder / "tokenizer_config.json"
    if not config.exists():
        return None
    found = read_json(config).get("chat_template") if isinstance(read_json(config), dict) else None
    if isinstance(found, list):
        found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
    if found is not None and not isinstance(found, str):
        raise ValueError(f"{config}: chat_template is not a string")
    return found


def render_chat(template: str, messages: list[dict], special: dict[str, str | None],
                add_generation_prompt: bool = True) -> str:
    """The template rendered as transformers' apply_chat_template renders it (tokenize=False): jinja2's
    ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, `raise_exception`
    and a `tojson` that does not escape HTML; `special`: bos_token, eos_token, ... by name.
    ValueError (one line) when the template fails or raises."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                **{k: v for k, v in special.items() if v is not None})
    except jinja2.exceptions.TemplateError as e:
        raise ValueError(f"the chat template failed: {e}") from None


@dataclass(frozen=True)
class Prompter:
    """How one checkpoint's fills and rewrites become the ids before its canvas."""

    convention: str  # families.PROMPTS
    tok: Tokenizer
    fim_ids: tuple[int, int, int] = ()  # prefix, suffix, middle ("fim")
    fim_order: str = "psm"  # families.py Family.fim_order
    template: str | None = None  # "chat": the checkpoint's chat template (None: a plain user/answer layout)
    special: tuple[tuple[str, str | None], ...] = ()  # bos_token, eos_token, ... for the template

    def fill(self, prefix: str, suffix: str, room: int) -> list[int]:
        """The ids before the canvas for a fill between prefix and suffix, at most `room` of them: the
        prefix is cut on the left and the suffix on the right, as canvas.fit_context cuts a row."""
        tok = self.tok
        if self.convention == "fim":
            p, s = fit_context(tok.encode(prefix), tok.encode(suffix), max(room - 3, 0))
            pre, suf, mid = self.fim_ids
            return [suf, *s, pre, *p, mid] if self.fim_order == "spm" else [pre, *p, suf, *s, mid]
        overhead = len(self._chat(instruction("infill_chat").format(code=CURSOR)))
        p, s = fit_context(tok.encode(prefix), tok.encode(suffix), max(room - overhead, 0))
        return self._chat(instruction("infill_chat").format(code=tok.decode(p) + CURSOR + tok.decode(s)))

    def rewrite(self, content: str, room: int) -> list[int]:
        """The ids before the canvas for a region rewrite (`content` in Mercury Edit's format); the
        content is cut on the left to `room`."""
        if self.convention != "chat":
            raise ValueError(f"a {self.convention} model rewrites no region (only a chat model is asked to)")
        ids = self._chat(instruction("edit_chat").format(content=content))
        return ids[len(ids) - room:] if len(ids) > room else ids

    def _chat(self, user: str) -> list[int]:
        """One user turn: the template's markup read as its special tokens, the user's text (the code)
        as text. The template is rendered around a stand-in for the text, which is stripped first, so a
        template that trims a message renders the same as with the text itself."""
        user = user.strip()
        if self.template is None:
            return self.tok.encode(f"{user}\n\n")
        rendered = render_chat(self.template, [{"role": "user", "content": _STAND_IN}], dict(self.special))
        if rendered.count(_STAND_IN) != 1:
            raise ValueError("the chat template does not show a user message's content once")
        before, after = rendered.split(_STAND_IN)
        return self.tok.encode_markup(before) + self.tok.encode(user) + self.tok.encode_markup(after)


def prompter_for(family, tok: Tokenizer, folder: Path) -> Prompter | None:
    """The Prompter of a family (families.py Family) whose folder is `folder`; None for an infill one.
    ValueError naming what the folder lacks (a FIM token, a readable chat template)."""
    if family is None or family.prompt == "infill":
        return None
    if family.prompt == "fim":
        ids = tuple(next((tok.hf.token_to_id(n) for n in names if tok.hf.token_to_id(n) is not None), None)
                    for names in family.fim)
        if None in ids:
            missing = [names[0] for names, i in zip(family.fim, ids) if i is None]
            raise ValueError(f"the tokenizer has no FIM token {', '.join(missing)} (a {family.name} model needs them)")
        return Prompter("fim", tok, fim_ids=ids, fim_order=family.fim_order)
    config = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").exists() else {}
    special = tuple((f"{role}_token", _token_name(config.get(f"{role}_token")))
                    for role in ("bos", "eos", "pad", "unk") if isinstance(config, dict))
    return Prompter("chat", tok, template=chat_template(folder), special=special)


def _token_name(value) -> str | None:
    """tokenizer_config.json's bos_token and kin: a string, or an AddedToken object's content."""
    return value.get("content") if isinstance(value, dict) else value if isinstance(value, str) else None


def fenced(answer: str) -> str | None:
    """The body of the first ``` code fence of an instruct model's answer; None when it wrote none
    (also the remote backend's chat answers: backend/profiles.py)."""
    m = _FENCE.search(answer)
    return None if m is None else m.group(1)


def answer_text(text: str, convention: str) -> str:
    """The code in a model's answer: a chat model's first code fence's body when it wrote one, and
    never the cursor mark the prompt showed it."""
    if convention == "chat" and (body := fenced(text)) is not None:
        text = body
    return text.replace(CURSOR, "")
