"""A conversation as the ids before the canvas (serve-api's /v1/chat/completions): the checkpoint's
own chat template (tokenizer_config.json or chat_template.jinja), or one given at launch
(`--chat-template FILE`) for a model that has none, rendered as transformers renders it
(prompting.py render_chat: a sandbox, no code from the folder runs).

The template's markup is read as its special tokens and every message's content as text: the
template is rendered around a stand-in for each content, so a user who writes "<|im_end|>" in a
message writes those characters, not an end of turn. Tool definitions go to the template
(`tools`); a template that does not show them gets them in a system message instead, so the model
sees what it may call either way.
Bounded by sandbox.py."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..network.config import adapter_base, read_json, read_text
from .prompting import MAX_DEPTH, MAX_TEMPLATE, _token_name, chat_template, probed, render_chat
from ..network.tokenizer import Tokenizer

_STAND_IN = "\x00diffusion-lsp message {}\x00"
_STAND_INS = re.compile("\x00diffusion-lsp message (\\d+)\x00")
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template as it is rendered, with no tokenizer (serve-api renders a request's conversation
    in its own process, off the model's thread: the sandbox bounds the render)."""

    template: str
    special: tuple[tuple[str, str | None], ...] = ()  # bos_token, eos_token, ... for the template
    source: str = "checkpoint"  # where the template came from: "checkpoint" or the file given at launch

    @property
    def shows_tools(self) -> bool:
        return "tools" in self.template

    @property
    def tool_tags(self) -> tuple[str, str]:
        """What the template's tool calls are wrapped in (Qwen2.5 / Hermes: <tool_call> tags), laid on the
        canvas around a call's JSON; none: the JSON alone."""
        return ("<tool_call>\n", "\n</tool_call>") if "<tool_call>" in self.template else ("", "")

    def segments(self, messages: list[dict], tools: list[dict] | None = None) -> list[tuple[str, str]]:
        """The conversation rendered with the template's generation prompt after it, as (markup, text)
        pairs: the template's markup (read as its special tokens) and the message content after it
        (read as text; the last one ""). ValueError (one line) when the template fails on it or breaks
        a bound (prompting.TemplateOverBound)."""
        messages = [dict(m) for m in messages]
        if tools and not self.shows_tools:
            listing = "You can call these functions (answer with a JSON call):\n" + "\n".join(
                json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
            if messages and messages[0].get("role") in ("system", "developer"):
                messages[0]["content"] = f"{listing}\n\n{messages[0].get('content') or ''}"
            else:
                messages.insert(0, {"role": "system", "content": listing})
        texts = []
        for m in messages:
            if isinstance(m.get("content"), str):
                texts.append(m["content"])
                m["content"] = _STAND_IN.format(len(texts) - 1)
        rendered = render_chat(self.template, messages, dict(self.special), True, tools or None)
        out, at, seen = [], 0, set()
        for match in _STAND_INS.finditer(rendered):
            k = int(match[1])
            if k in seen or k >= len(texts):
                raise ValueError("the chat template shows a message's content more than once")
            seen.add(k)
            out.append((rendered[at:match.start()], texts[k]))
            at = match.end()
        return [*out, (rendered[at:], "")]


@dataclass(frozen=True)
class ChatFormat:
    """A chat template with the tokenizer its rendering is read with (the worker's)."""

    tok: Tokenizer
    chat: ChatTemplate

    @property
    def shows_tools(self) -> bool:
        return self.chat.shows_tools

    @property
    def tool_tags(self) -> tuple[str, str]:
        return self.chat.tool_tags

    @property
    def ends(self) -> frozenset[int]:
        """The ids an answer ends at: every special token but the mask and the bos (an end of turn, an
        end of text, the start of another turn)."""
        tok = self.tok
        return frozenset(i for i, t in tok.hf.get_added_tokens_decoder().items()
                         if t.special and i not in (tok.mask_id, tok.bos_id, tok.filler_id))

    def prompt(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The ids of the conversation with the template's generation prompt after it. ValueError (one
        line) when the template fails on it."""
        return self.tokens(self.chat.segments(messages, tools))

    def tokens(self, segments) -> list[int]:
        """The ids of `segments` (ChatTemplate.segments, also as JSON lists). ValueError when they are
        not (markup, text) pairs of strings."""
        if not (isinstance(segments, list) and all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p)
                for p in segments)):
            raise ValueError("a rendered conversation must be a list of (markup, text) pairs")
        ids = []
        for markup, text in segments:
            ids += self.tok.encode_markup(markup) + (self.tok.encode(text) if text else [])
        return ids


def launch_template(folder: Path, given: str | None = None) -> ChatTemplate | None:
    """The chat template a conversation is put in: the file `given` at launch, else the folder's own;
    None when there is neither. ValueError naming an unreadable file, or one whose render of a short
    conversation breaks a bound (prompting.probed). An adapter's folder: its base model's."""
    folder = adapter_base(folder) or folder
    config = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").exists() else {}
    special = tuple((f"{role}_token", _token_name(config.get(f"{role}_token")) if isinstance(config, dict) else None)
                    for role in ("bos", "eos", "pad", "unk"))
    if given:
        return ChatTemplate(probed(read_text(Path(given), MAX_TEMPLATE), given), special, given)
    template = chat_template(folder)
    return None if template is None else ChatTemplate(template, special)


def chat_format(tok: Tokenizer, folder: Path, given: str | None = None) -> ChatFormat | None:
    """launch_template's, read with `tok`."""
    found = launch_template(folder, given)
    return None if found is None else ChatFormat(tok, found)


def conversation(messages, tools=None) -> tuple[list[dict], list[dict] | None]:
    """OpenAI-shaped messages (and tools) as a template takes them: content parts joined into their
    text, a tool call's `arguments` JSON string as the object templates write with tojson (as vLLM
    passes them). ValueError naming what is malformed."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ValueError(f"messages[{i}] must be an object with a role ({', '.join(ROLES)})")
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise ValueError(f"messages[{i}].content: only text parts are supported")
            content = "".join(p["text"] for p in content)
        if content is not None and not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string, a list of text parts or null")
        msg = {"role": m["role"], "content": content if content is not None else ""}
        if m.get("name") is not None:
            msg["name"] = str(m["name"])
        if m["role"] == "tool":
            msg["tool_call_id"] = str(m.get("tool_call_id", ""))
        calls = m.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise ValueError(f"messages[{i}].tool_calls must be a list")
            msg["tool_calls"] = [_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]
        out.append(msg)
    if tools is not None:
        if not (isinstance(tools, list) and all(
                isinstance(t, dict) and t.get("type", "function") == "function" and isinstance(t.get("function"), dict)
                and isinstance(t["function"].get("name"), str) and t["function"]["name"] for t in tools)):
            raise ValueError('tools must be a list of {"type": "function", "function": {"name": ...}}')
        for k, t in enumerate(tools):
            shallow(t, f"tools[{k}]")
    return out, tools or None


def _call(c, where: str) -> dict:
    f = c.get("function") if isinstance(c, dict) else None
    if not isinstance(f, dict) or not isinstance(f.get("name"), str):
        raise ValueError(f"{where} must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}")
    args = f.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            pass  # kept as the client wrote it
        except RecursionError:  # nested past what the decoder itself takes
            raise ValueError(f"{where}.function.arguments nests deeper than {MAX_DEPTH} levels") from None
    shallow(args, f"{where}.function.arguments")
    return {"id": str(c.get("id", "")), "type": "function", "function": {"name": f["name"], "arguments": args}}


def shallow(value, where: str) -> None:
    """ValueError naming `where` when `value` (JSON-like data from a client) nests past MAX_DEPTH
    levels: nothing that builds a prompt recurses on it deeper than that (
    _plain_template_data, a template's tojson). Walked without recursion."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise ValueError(f"{where} nests deeper than {MAX_DEPTH} levels")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
