"""What each server behind `--backend openai` accepts (`--server`, model.server), as data: the route and
body of a fill and of a next edit, and how the answer comes back. remote.FimClient sends what
`fill_request` / `edit_request` build; nothing here does I/O.

A fill is asked in one of two formats (model.remoteFormat):
- completions: a fill-in-the-middle completion. The suffix travels in the body's `suffix` where the
  server applies the model's FIM template itself (Mercury's /fim/completions; SGLang launched with
  --completion-template), else in the prompt, written into model.fimTemplate (vLLM, which refuses
  `suffix`). The answer is choices[0].text.
- chat: an instruct model is asked, in a system and a user message, for the code at the cursor; the
  answer is choices[0].message.content, the code in a ``` fence (`fenced_code`).

A next edit (`rewrite`) goes to Mercury's /edit/completions where the server has it, else, in the chat
format, the same tagged user message (formats/mercury.py) goes to /chat/completions with a system
message that explains it; the caller takes the region out of the answer (mercury.rewritten).

Sources, read from each engine's code (stored copies; see docs_serve_a_team.md):
- vLLM: vllm/renderers/online_renderer.py `render_completion` answers 400 "suffix is not currently
  supported" for any `suffix` that is not null (also vllm/entrypoints/openai/serving_completion.py in
  older releases; PR #9522 that would add it is open). Unknown fields are ignored with a warning
  (OpenAIBaseModel: extra="allow"). ChatCompletionRequest: `max_tokens` deprecated for
  `max_completion_tokens`. https://github.com/vllm-project/vllm/blob/main/vllm/renderers/online_renderer.py
- SGLang: python/sglang/srt/entrypoints/openai/serving_completions.py applies its completion template
  only when launched with --completion-template; parser/code_completion_parser.py
  `generate_completion_prompt_from_request` returns the prompt untouched when `suffix == ""` and
  writes a missing (None) suffix into the template as the text "None"; without the flag `suffix` is
  never read. python/sglang/srt/entrypoints/openai/protocol.py ChatCompletionRequest: `max_tokens`
  deprecated for `max_completion_tokens`.
  https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/parser/code_completion_parser.py
- Mercury: POST /v1/fim/completions {model, prompt, suffix, max_tokens}, POST /v1/edit/completions
  with exactly one user message and no streaming (https://docs.inceptionlabs.ai/capabilities/next-edit;
  Kilo-Org/cloud#3516 proxies both)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..model.chat.prompting import fenced
from ..protocol.settings import FIM_TEMPLATES, LaunchSettings
from ..formats.mercury import CURSOR

FIM_ROUTE, COMPLETIONS_ROUTE, CHAT_ROUTE = "/fim/completions", "/completions", "/chat/completions"
EDIT_ROUTE = "/edit/completions"  # Inception's next-edit endpoint (mercury-edit)


@dataclass(frozen=True)
class Profile:
    name: str
    # a completions fill with `suffix`, asked in this order: the first that is not a 404 is kept
    routes: tuple[str, ...]
    template: str  # model.fimTemplate: "refused" | "optional" | "required"
    # the `suffix` sent beside a prompt holding the template: None sends none (vLLM refuses any, even ""), ""
    # keeps SGLang's own --completion-template off the prompt (a missing suffix would be written in as "None")
    template_suffix: str | None
    edit_route: str | None  # a next-edit endpoint; None: next edits only through chat
    chat_limit: str  # the chat body's token limit ("max_tokens" is deprecated in vLLM's and SGLang's chat)
    streams: bool  # the engine documents `stream: true` (server-sent events); not used yet (no drafts)
    diffusing: bool  # it streams the whole draft after each denoising step
    doc: str


PROFILES = {p.name: p for p in (
    Profile("generic", (FIM_ROUTE, COMPLETIONS_ROUTE), "optional", None, EDIT_ROUTE, "max_tokens", True, False,
            "https://platform.openai.com/docs/api-reference/completions"),
    Profile("vllm", (COMPLETIONS_ROUTE,), "required", None, None, "max_completion_tokens", True, False,
            "https://github.com/vllm-project/vllm/blob/main/vllm/renderers/online_renderer.py"),
    Profile("sglang", (COMPLETIONS_ROUTE,), "optional", "", None, "max_completion_tokens", True, False,
            "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/parser/code_completion_parser.py"),
    Profile("mercury", (FIM_ROUTE,), "refused", None, EDIT_ROUTE, "max_tokens", True, True,
            "https://docs.inceptionlabs.ai/capabilities/next-edit"),
)}

# the chat format's prompts (what an instruct model is told); {one_line} is ONE_LINE for a one-line fill
FILL_SYSTEM = ("You complete code. The user sends a file with " + CURSOR + " where code is missing. Answer with "
               "only the code that goes at " + CURSOR + ", in one ``` code fence: not the code before or after it, "
               "no explanation.{one_line}")
ONE_LINE = " Only the rest of the line at the cursor."
FILL_USER = "```\n{prefix}" + CURSOR + "{suffix}\n```"
EDIT_SYSTEM = ("You predict the user's next edit. The user message shows recently viewed code, the current file "
               "with the region to rewrite between <|code_to_edit|> and <|/code_to_edit|> (" + CURSOR + " marks "
               "the cursor) and the edit history as unified diffs. Answer with the region as it should read "
               "next, in one ``` code fence, nothing else.")

INSTRUCT_SYSTEM = ("You edit code as the user instructs. Answer with only the rewritten section, in one ``` code "
                   "fence, nothing else.")

FENCE_TOKENS = 8  # what a chat answer's ```lang ... ``` costs beside the fill (~2 tokens each side, with slack)
_PLACE = re.compile(r"\{prefix\}|\{suffix\}")


@dataclass(frozen=True)
class Request:
    routes: tuple[str, ...]  # asked in order while they answer 404
    body: dict
    fenced: bool = False  # the fill is the code in the answer's first ``` fence (`fenced_code`)


def profile_for(server: str) -> Profile:
    if server not in PROFILES:
        raise ValueError(f"server {server!r} is not one of {', '.join(PROFILES)}")
    return PROFILES[server]


def rewrites(server: str, remote_format: str) -> bool:
    """A next edit can be asked of this server: at its edit endpoint, or through chat."""
    return profile_for(server).edit_route is not None or remote_format == "chat"


def fim_prompt(template: str, prefix: str, suffix: str) -> str:
    """`template` (a FIM_TEMPLATES name or a string holding {prefix} and {suffix}) filled in one pass, so
    that a "{suffix}" in the code before the cursor stays as it is."""
    text = FIM_TEMPLATES.get(template, template)
    return _PLACE.sub(lambda m: prefix if m.group(0) == "{prefix}" else suffix, text)


def fenced_code(answer: str) -> str:
    """The code in the first ``` fence of a chat answer; ValueError when it has none (prose is no fill)."""
    body = fenced(answer)
    if body is None:
        raise ValueError("the chat answer has no ``` code fence")
    return body


@dataclass(frozen=True)
class Asking:
    """How one client asks (LaunchSettings' server, fim_template, remote_format, and the model)."""

    profile: Profile
    model: str
    fim_template: str | None = None
    chat: bool = False  # remote_format "chat"
    temperature: float = 0.0

    @classmethod
    def of(cls, launch: LaunchSettings, temperature: float = 0.0) -> Asking:
        return cls(profile_for(launch.server), launch.remote_model, launch.fim_template,
                   launch.remote_format == "chat", temperature)

    def __post_init__(self):
        p = self.profile
        if not self.chat and p.template == "required" and self.fim_template is None:
            raise ValueError(f"server {p.name} needs fim_template (it takes no suffix)")
        if not self.chat and p.template == "refused" and self.fim_template is not None:
            raise ValueError(f"server {p.name} takes the suffix itself, not a fim_template")

    @property
    def rewrites(self) -> bool:
        return rewrites(self.profile.name, "chat" if self.chat else "completions")

    def fill_request(self, prefix: str, suffix: str, max_tokens: int, one_line: bool) -> Request:
        if self.chat:  # a one-line fill is the answer's first line: a "\n" stop would end it at the fence
            system = FILL_SYSTEM.format(one_line=ONE_LINE if one_line else "")
            return self._chat([{"role": "system", "content": system},
                               {"role": "user", "content": FILL_USER.format(prefix=prefix, suffix=suffix)}],
                              max_tokens + FENCE_TOKENS, fenced=True)
        body = {"model": self.model}
        if self.fim_template is None:
            routes = self.profile.routes
            body.update(prompt=prefix, suffix=suffix)
        else:
            routes = (COMPLETIONS_ROUTE,)
            body["prompt"] = fim_prompt(self.fim_template, prefix, suffix)
            if self.profile.template_suffix is not None:
                body["suffix"] = self.profile.template_suffix
        body.update(max_tokens=max_tokens, temperature=self.temperature)
        if one_line:
            body["stop"] = ["\n"]
        return Request(routes, body)

    def edit_request(self, content: str, max_tokens: int) -> Request | None:
        """The next edit's request; None when this server has no way to ask one (`rewrites`)."""
        if self.profile.edit_route is not None:  # Mercury's format: one user message, a chat-shaped answer
            return Request((self.profile.edit_route,), {"model": self.model,
                                                         "messages": [{"role": "user", "content": content}],
                                                         "max_tokens": max_tokens, "temperature": self.temperature})
        if self.chat:
            return self._chat([{"role": "system", "content": EDIT_SYSTEM}, {"role": "user", "content": content}],
                              max_tokens)
        return None

    def instruct_request(self, content: str, max_tokens: int) -> Request:
        """An edit from an instruction (chat_content): every server is asked through
        its chat endpoint (Mercury 2's, vLLM's, SGLang's), whatever remote_format its fills use; the
        region is the code in the answer's fence."""
        return self._chat([{"role": "system", "content": INSTRUCT_SYSTEM}, {"role": "user", "content": content}],
                          max_tokens + FENCE_TOKENS, fenced=True)

    def _chat(self, messages: list[dict], max_tokens: int, fenced: bool = False) -> Request:
        return Request((CHAT_ROUTE,), {"model": self.model, "messages": messages, self.profile.chat_limit: max_tokens,
                                       "temperature": self.temperature}, fenced)

    def describe(self) -> dict:
        p = self.profile
        return {"server": p.name, "format": "chat" if self.chat else "completions", "fim_template": self.fim_template,
                "rewrite": self.rewrites, "streams": p.streams, "diffusing": p.diffusing}
