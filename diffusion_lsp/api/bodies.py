"""The API's request bodies, checked without I/O: a fill (`/v1/completions`, `/v1/fim/completions`)
and a next edit (`/v1/edit/completions`). A bad body is a BadRequest naming the field, answered 400
in OpenAI's error shape; a field this API does not know is ignored and counted (clients send many:
`user`, `seed`, Zed's `environment`), and a known field asking for what it cannot do (`n` > 1,
`logprobs`, `echo`) is refused rather than silently ignored.

A prompt may carry its suffix in a fill-in-the-middle template instead of in `suffix`: the
templates of Qwen / CodeGemma, StarCoder, CodeLlama, DeepSeek-Coder, Codestral and GLM are taken
apart (what Zed's OpenAI-compatible edit-prediction provider sends, with its `prompt_format`).
The formats: Mercury Edit's (formats/mercury.py), an instruction's (formats/instruct.py)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..model.network.text import valid_text
from ..formats import mercury
from ..protocol.requests import max_tokens_refusal

MAX_STOPS = 4
MAX_STOP_CHARS = 64
DEFAULT_MAX_TOKENS = 64

# name -> (template regex, which group is the prefix, which the suffix)
FIM_TEMPLATES = {
    "qwen": (re.compile(r"^<\|fim_prefix\|>(.*)<\|fim_suffix\|>(.*)<\|fim_middle\|>$", re.S), 1, 2),
    "starcoder": (re.compile(r"^<fim_prefix>(.*)<fim_suffix>(.*)<fim_middle>$", re.S), 1, 2),
    "codellama": (re.compile(r"^<PRE> (.*) <SUF>(.*) <MID>$", re.S), 1, 2),
    "deepseek": (re.compile(r"^<｜fim▁begin｜>(.*)<｜fim▁hole｜>(.*)<｜fim▁end｜>$", re.S), 1, 2),
    "codestral": (re.compile(r"^\[SUFFIX\](.*)\[PREFIX\](.*)$", re.S), 2, 1),
    "glm": (re.compile(r"^<\|code_prefix\|>(.*)<\|code_suffix\|>(.*)<\|code_middle\|>$", re.S), 1, 2),
}
# fields a client may send that change nothing here (sampling knobs a confidence-ordered decoder has
# no use for, bookkeeping); anything else unknown is ignored too, but reported as such
ACCEPTED = {"top_p", "seed", "user", "presence_penalty", "frequency_penalty", "logit_bias", "stream_options",
            "environment", "metadata", "service_tier", "store", "prompt_cache_key"}


class BadRequest(Exception):
    """A body this API cannot answer: 400 with the message and the offending `param`."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass
class Fim:
    """A fill request, whatever route and shape it came in."""

    model: str | None
    prefix: str
    suffix: str
    max_tokens: int
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    diffusing: bool = False  # stream the whole draft after every denoising step
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    ignored: list[str] = field(default_factory=list)  # unknown fields, ignored


@dataclass
class Edit:
    model: str | None
    request: mercury.ParsedEdit
    max_tokens: int
    ignored: list[str] = field(default_factory=list)


def split_fim(prompt: str) -> tuple[str, str]:
    """(prefix, suffix) of a prompt in a FIM template; (prompt, "") otherwise."""
    for pattern, p, s in FIM_TEMPLATES.values():
        m = pattern.match(prompt)
        if m:
            return m.group(p), m.group(s)
    return prompt, ""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    """A JSON number that is finite (an integer of 400 digits is, and math.isfinite overflows on it)."""
    return _is_int(v) or (isinstance(v, float) and math.isfinite(v))


def _limit_field(body: dict) -> str:
    """max_tokens, or max_completion_tokens (OpenAI's newer name) when only it is given."""
    return "max_tokens" if "max_tokens" in body or "max_completion_tokens" not in body else "max_completion_tokens"


def asked_max_tokens(body: dict) -> bool:
    """The body gives a token limit of its own (else the default, which a constrained layout need not keep)."""
    return body.get(_limit_field(body)) is not None


def _max_tokens(body: dict, cap: int) -> int:
    """The body's token limit (`_limit_field`), at most `cap` (Gate.most_tokens): a refusal names the
    field the client sent."""
    name = _limit_field(body)
    n = body.get(name)
    if n is None:
        return min(DEFAULT_MAX_TOKENS, cap)
    if (refused := max_tokens_refusal(n, cap, name)) is not None:
        raise BadRequest(refused, name)
    return n


def _common(body, known: set[str], cap: int) -> tuple[str | None, int, list[str]]:
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object, got {type(body).__name__}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {model!r}", "model")
    temperature = body.get("temperature")
    if temperature is not None and not (_number(temperature) and 0 <= temperature <= 2):
        raise BadRequest(f"temperature must be a number between 0 and 2, got {temperature!r}", "temperature")
    top_p = body.get("top_p")
    if top_p is not None and not (_number(top_p) and 0 <= top_p <= 1):
        raise BadRequest(f"top_p must be a number between 0 and 1, got {top_p!r}", "top_p")
    for name, ok in (("n", 1), ("best_of", 1)):
        v = body.get(name)
        if v is not None and v != ok:
            raise BadRequest(f"{name} must be 1: this API returns one choice", name)
    if body.get("logprobs") not in (None, False, 0):
        raise BadRequest("logprobs are not supported", "logprobs")
    if body.get("echo") not in (None, False):
        raise BadRequest("echo is not supported", "echo")
    ignored = sorted(k for k in body if k not in known and k not in ACCEPTED and isinstance(k, str))
    return model, _max_tokens(body, cap), ignored


def parse_fim(body, cap: int, needs_suffix_field: bool = False) -> Fim:
    """/v1/fim/completions or /v1/completions (with `suffix`, or a prompt in a FIM template)."""
    known = {"model", "prompt", "suffix", "max_tokens", "max_completion_tokens", "stop", "temperature", "stream",
             "diffusing", "n", "best_of", "logprobs", "echo"}
    model, max_tokens, ignored = _common(body, known, cap)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string (one prompt per request)", "prompt")
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise BadRequest(f"suffix must be a string, got {type(suffix).__name__}", "suffix")
    if not suffix:
        prompt, suffix = split_fim(prompt)
    prompt, suffix = valid_text(prompt), valid_text(suffix or "")  # lone surrogates: U+FFFD, as the model reads them
    stop = stops_of(body)
    flags = {}
    for name in ("stream", "diffusing"):
        v = body.get(name, False)
        if v is None:
            v = False
        if not isinstance(v, bool):
            raise BadRequest(f"{name} must be true or false, got {v!r}", name)
        flags[name] = v
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    include_usage = bool((options or {}).get("include_usage", False))
    return Fim(model, prompt, suffix or "", max_tokens, stop, flags["stream"], flags["diffusing"], include_usage,
               ignored)


def stops_of(body: dict) -> list[str]:
    """The body's `stop`: a string or a list of at most MAX_STOPS short ones."""
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else [] if stop is None else stop
    if not (isinstance(stop, list) and len(stop) <= MAX_STOPS
            and all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stop)):
        raise BadRequest(f"stop must be a string or at most {MAX_STOPS} non-empty strings of at most "
                         f"{MAX_STOP_CHARS} characters", "stop")
    return stop


def parse_edit(body, cap: int) -> Edit:
    """/v1/edit/completions: one user message in Inception's next-edit format."""
    known = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "stream", "n", "best_of",
             "logprobs", "echo"}
    model, max_tokens, ignored = _common(body, known, cap)
    if body.get("stream") not in (None, False):
        raise BadRequest("stream is not supported on /v1/edit/completions: the answer is one region", "stream")
    messages = body.get("messages")
    if not (isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages)):
        raise BadRequest("messages must be a non-empty list of objects", "messages")
    users = [m for m in messages if m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if isinstance(content, list):  # content parts: the text ones, joined
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if not isinstance(content, str):
        raise BadRequest("the last user message must have text content", "messages")
    try:
        parsed = mercury.parse_edit_request(valid_text(content))  # the region comes back in the answer
    except ValueError as e:
        raise BadRequest(f"not a next-edit request: {e}", "messages") from None
    return Edit(model, parsed, max_tokens, ignored)


@dataclass
class Instruct:
    """An edit from an instruction at /v1/edit/completions: `input` (the code to rewrite, OpenAI's
    legacy /v1/edits shape) between an optional `prefix` and `suffix` of its file."""

    model: str | None
    prefix: str
    input: str
    suffix: str
    instruction: str
    max_tokens: int | None
    language: str | None = None
    ignored: list[str] = field(default_factory=list)


def parse_instruct(body, cap: int) -> Instruct:
    """/v1/edit/completions with `instruction`."""
    known = {"model", "input", "instruction", "prefix", "suffix", "language", "max_tokens", "max_completion_tokens",
             "temperature", "stream", "n", "best_of", "logprobs", "echo"}
    model, max_tokens, ignored = _common(body, known, cap)
    if body.get("stream") not in (None, False):
        raise BadRequest("stream is not supported on /v1/edit/completions: the answer is one region", "stream")
    texts = {}
    for name in ("input", "instruction", "prefix", "suffix", "language"):
        v = body.get(name, "" if name != "language" else None)
        if v is not None and not isinstance(v, str):
            raise BadRequest(f"{name} must be a string", name)
        texts[name] = valid_text(v) if isinstance(v, str) else v
    if not texts["instruction"].strip():
        raise BadRequest("instruction must say what to change", "instruction")
    return Instruct(model, texts["prefix"], texts["input"], texts["suffix"], texts["instruction"],
                    max_tokens if asked_max_tokens(body) else None, texts["language"], ignored)


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """(text up to the first stop sequence, whether one was found)."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def stream_safe(text: str, stop: list[str]) -> str:
    """The part of a growing text that can be sent: no tail that may be the start of a stop sequence."""
    hold = 0
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    return text[:len(text) - hold]
