"""Putting a fill to a prefix-only model (model/families/table.py `prompt`): a model that sees nothing after its
canvas (block diffusion, DiffusionGemma's encoder over the prompt) gets the code after the cursor in
its prompt, and the answer is the canvas after the prompt.

- "fim": `<prefix>P<suffix>S<middle>` in the family's FIM tokens (PSM order, as Seed-Coder and
  Qwen2.5-Coder were trained), the tokens as ids so that code that spells a FIM token stays text;
- "chat": one user turn of the checkpoint's own chat template asking for the code at the cursor
  (prompts/infill_chat.txt), or for a region rewritten (prompts/edit_chat.txt, the content in
  Mercury Edit's tagged format, formats/mercury.py, as Zeta and Mercury Edit prompt for edits).

The chat template is data from the folder (tokenizer_config.json `chat_template`, or
chat_template.jinja), rendered in jinja2's immutable sandbox the way transformers renders it
(`apply_chat_template`); no code from the folder runs. An instruct model answers in prose or a code
fence now and then: `answer_text` keeps the code.
A prompt's text: prompts/NAME.txt; its bounds are sandbox.py's; the remote backend's chat answers
are read as backend/profiles.py says."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from . import sandbox
from ..network.config import read_json, read_text
from ..network.tokenizer import Tokenizer, fit_context

MAX_TEMPLATE = 1 << 20  # bytes of a chat template: the largest published ones are ~20 KB
MAX_DEPTH = 64  # levels of nesting of what a template is given (a tool's JSON schema, a call's arguments)
CURSOR = "<|cursor|>"
_STAND_IN = "\x00diffusion-lsp: the user's text\x00"  # in a template's rendering, where the text goes
_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:\n?```|\Z)", re.S)  # the first fence; unclosed: cut by the token limit


def instruction(name: str) -> str:
    """A prompt's text, from the prompts folder (prompts are data)."""
    return resources.files(__package__).joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")


def chat_template(folder: Path) -> str | None:
    """The checkpoint's chat template: chat_template.jinja, else tokenizer_config.json's
    `chat_template` (a string, or a list of named templates: the "default" one); None without one.
    ValueError naming the file when it is unreadable or its template breaks a bound (`probed`)."""
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        return probed(read_text(jinja, MAX_TEMPLATE), str(jinja))
    config = folder / "tokenizer_config.json"
    if not config.exists():
        return None
    found = read_json(config).get("chat_template") if isinstance(read_json(config), dict) else None
    if isinstance(found, list):
        found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
    if found is not None and not isinstance(found, str):
        raise ValueError(f"{config}: chat_template is not a string")
    return found if found is None else probed(found, f"{config}: chat_template")


class TemplateOverBound(ValueError):
    """A chat template whose render broke a bound of the sandbox (its clock, a size)."""


_PROBE = [{"role": "user", "content": "Hello"}]  # the short conversation a template is tried on when it is read


def probed(template: str, where: str) -> str:
    """`template`, once a render of a short conversation keeps within the bounds: a template that loops
    or builds a huge value on any conversation is refused when it is read (at launch), not at each
    request. ValueError naming `where` when it does not; a template that merely fails (raises) on
    that conversation is left to fail per request."""
    try:
        render_chat(template, _PROBE, {})
    except TemplateOverBound as e:
        raise ValueError(f"{where}: {e}") from None
    except ValueError:
        pass
    return template


def render_chat(template: str, messages: list[dict], special: dict[str, str | None],
                add_generation_prompt: bool = True, tools: list[dict] | None = None,
                documents: list[dict] | None = None) -> str:
    """The template rendered as transformers' apply_chat_template renders it (tokenize=False, the
    5.x chat_template_utils): jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks,
    loop controls and a `{% generation %}` block that renders its body; `raise_exception`,
    `strftime_now`, a `dict` that only builds dicts, a `namespace` that refuses underscore names, and
    a `tojson` that does not escape HTML. What the template sees: `messages` with their None-valued
    keys dropped and a reasoning under `reasoning_content`, `thinking` or `reasoning` under all
    three; `tools` (OpenAI-shaped definitions, {"type": "function", "function": {...}}) and
    `documents` as given, None when absent (defined, as there); `add_generation_prompt`;
    `special`'s bos_token, eos_token, ... by name (a None one: not defined). All of it is rebuilt
    from plain data first (strings, numbers, dicts, lists; anything else an inert "<TypeName>").
    The render is bounded (the sandbox: a wall-clock budget, a size budget, no `lipsum`).
    ValueError (one line) when the template fails, raises or breaks a bound, or an input is not of
    that shape (also nested past MAX_DEPTH)."""
    if tools is not None and not all(isinstance(t, dict) for t in tools):
        raise ValueError("the chat template's tools must be JSON schemas (dicts)")
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise ValueError("the chat template's documents must be dicts (with 'title' and 'text')")
    chat = []
    for message in _plain_template_data(list(messages)):
        if not isinstance(message, dict):
            raise ValueError(f"a chat message must be a dict, not {message!r}")
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        chat.append(message)
    import jinja2

    try:
        return sandbox.render(
            template, messages=chat, tools=_plain_template_data(tools), documents=_plain_template_data(documents),
            add_generation_prompt=add_generation_prompt,
            **_plain_template_data({k: v for k, v in special.items() if v is not None}))
    except sandbox.TemplateBound as e:
        raise TemplateOverBound(f"the chat template failed: {e}") from None
    except jinja2.exceptions.TemplateError as e:
        raise ValueError(f"the chat template failed: {' '.join(str(e).split())}") from None
    except (ArithmeticError, AttributeError, LookupError, RecursionError, TypeError, ValueError) as e:
        raise ValueError(f"the chat template failed: {type(e).__name__}: {' '.join(str(e).split())}") from None


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # the names transformers aliases


def _plain_template_data(value, depth: int = 0):
    """`value` rebuilt of plain JSON-like data, as transformers' `_plain_template_data` rebuilds what a
    template sees: exact scalars as they are, str/int/float subclasses as the base type, mappings,
    lists, tuples, dataclasses and pydantic models (`model_dump`) walked, a numpy scalar as its
    `item()`, anything else an inert "<TypeName>" (a template only asks whether such a key is there).
    ValueError past MAX_DEPTH levels of nesting (a client's data: no recursion without a bound)."""
    import dataclasses
    from collections.abc import Mapping

    if depth > MAX_DEPTH + 8:  # the client's data (chat.shallow) within the levels of the messages around it
        raise ValueError(f"the chat template's data nests deeper than {MAX_DEPTH} levels")
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain_template_data(k, depth + 1): _plain_template_data(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_template_data(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain_template_data(v, depth + 1) for v in value)
    if any(c.__name__ == "generic" and c.__module__ == "numpy" for c in type(value).__mro__):
        return _plain_template_data(value.item(), depth)  # np.generic, without importing numpy
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain_template_data(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain_template_data(value.model_dump(), depth)
    return f"<{type(value).__name__}>"


@dataclass(frozen=True)
class Prompter:
    """How one checkpoint's fills and rewrites become the ids before its canvas."""

    convention: str  # families.PROMPTS
    tok: Tokenizer
    fim_ids: tuple[int, int, int] = ()  # prefix, suffix, middle ("fim")
    fim_order: str = "psm"  # Family.fim_order
    template: str | None = None  # "chat": the checkpoint's chat template (None: a plain user/answer layout)
    special: tuple[tuple[str, str | None], ...] = ()  # bos_token, eos_token, ... for the template

    def fill(self, prefix: str, suffix: str, room: int) -> list[int]:
        """The ids before the canvas for a fill between prefix and suffix, at most `room` of them: the
        prefix is cut on the left and the suffix on the right, as fit_context cuts a canvas row."""
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
        before, after = self.turn
        return self.tok.encode_markup(before) + self.tok.encode(user) + self.tok.encode_markup(after)

    @cached_property
    def turn(self) -> tuple[str, str]:
        """The template's markup before and after a user turn's text: the same for every fill, so rendered
        once (prompter_for renders it when the checkpoint loads, not on the model's thread at a fill).
        ValueError when the template fails, breaks a bound or does not show the text once."""
        rendered = render_chat(self.template, [{"role": "user", "content": _STAND_IN}], dict(self.special))
        if rendered.count(_STAND_IN) != 1:
            raise ValueError("the chat template does not show a user message's content once")
        before, after = rendered.split(_STAND_IN)
        return before, after


def prompter_for(family, tok: Tokenizer, folder: Path) -> Prompter | None:
    """The Prompter of a family (Family) whose folder is `folder`; None for an infill one.
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
    return rendered(Prompter("chat", tok, template=chat_template(folder), special=special))


def rendered(prompter: Prompter) -> Prompter:
    """`prompter` with its user turn rendered (Prompter.turn): a template that fails on it or breaks a
    bound is refused as the checkpoint loads (ValueError)."""
    if prompter.convention == "chat" and prompter.template is not None:
        prompter.turn  # noqa: B018 - rendered now, kept for every fill
    return prompter


def _token_name(value) -> str | None:
    """tokenizer_config.json's bos_token and kin: a string, or an AddedToken object's content."""
    return value.get("content") if isinstance(value, dict) else value if isinstance(value, str) else None


def fenced(answer: str) -> str | None:
    """The body of the first ``` code fence of an instruct model's answer; None when it wrote none
    (also the remote backend's chat answers)."""
    m = _FENCE.search(answer)
    return None if m is None else m.group(1)


def answer_text(text: str, convention: str) -> str:
    """The code in a model's answer: a chat model's first code fence's body when it wrote one, and
    never the cursor mark the prompt showed it."""
    if convention == "chat" and (body := fenced(text)) is not None:
        text = body
    return text.replace(CURSOR, "")
