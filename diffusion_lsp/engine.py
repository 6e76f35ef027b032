"""Loading a checkpoint and running fills: the one entry point the worker process, the in-process
backend (backend/local.py) and the model benchmarks use. `answer` and `answer_probe` take the
Backend's orders and give its answers (backend/orders.py); `fill` and `probe` are the model's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .cpus import default_threads
from .model.decoding import run
from .model.settings import FLOAT_DTYPES, LaunchSettings

DEFAULT_MODEL = Path(__file__).parent / "checkpoints" / "default"
MAX_PARALLEL_CALLS = 4  # tool calls in one answer


def model_folder(path: str | Path | None) -> Path:
    """The checkpoint folder a `model.path` / `--model` names: the embedded model when none."""
    return Path(path) if path else DEFAULT_MODEL


@dataclass
class Engine:
    model: object  # DiffusionTransformer
    tokenizer: object  # diffusion_lsp.model.tokenizer.Tokenizer
    meta: dict  # the checkpoint's config.json
    memo: object = field(default_factory=lambda: _context_memo())  # model/reuse.py: a `doc`'s last
    # fill (or probe) seeds its next fill
    # a prefix-only model's (model/prompting.py Prompter: families.py `prompt` "fim" or "chat"): a fill's
    # suffix goes into its prompt; None: infill, the suffix on the row after the canvas
    prompter: object = None
    # model/chat.py ChatFormat: the chat template a conversation is put in (the checkpoint's, or the one
    # given at launch); None: the model answers no conversation
    chat_format: object = None
    structured = True  # our sampler decodes JSON under constraints (model/structured.py)

    @property
    def capabilities(self) -> dict:
        """backend/base.py Capabilities, as the worker says them. A probe scores given tokens between
        prefix and suffix on the row, which only an infill model has (no drafts from the user's code,
        no remask-and-refine otherwise); a model asked in chat rewrites a region from an edit prompt."""
        convention = "infill" if self.prompter is None else self.prompter.convention
        chat = self.chat_format is not None
        return {"probe": convention == "infill", "rewrite": convention == "chat", "drafts": True, "chat": chat,
                "structured": chat and self.structured}

    def decoding(self, requests, cfg=None):
        """A decoding of `requests` (model/canvas.py FillRequest) for its caller to drive step by step
        (model/decoding.py Decoding: model/sampler.py's; DreamOn's variable-length VariableDecoding, whose
        canvas changes size, gives no drafts)."""
        from .model.dreamon import VariableDecoding, expands
        from .model.sampler import Decoding

        if expands(self.tokenizer):  # DreamOn: the span grows and shrinks as it decodes
            return VariableDecoding(self.model, self.tokenizer, requests, cfg)
        return Decoding(self.model, self.tokenizer, requests, cfg, self.memo)

    def fill(self, requests, cfg=None) -> list:
        """Fill `requests` to the end -> model/sampler.py FillResult per request."""
        decoding = self.decoding(requests, cfg)
        run(decoding)
        return decoding.results()

    def decode_orders(self, orders, keys):
        """A decoding of the Backend's orders (backend/orders.py FillOrder, one sampling config for all)
        as one batch; keys[i] names order i's document (its context is remembered for its next fill)."""
        return self.decoding(self._requests(orders, keys, 0), orders[0].sampling)

    def join(self, decoding, orders, keys) -> list[int]:
        """Orders that join a running decoding (`decoding.joins`; the same sampling) -> their indices."""
        return decoding.add(self._requests(orders, keys, len(decoding)))

    def _requests(self, orders, keys, first: int) -> list:
        from .model.canvas import FillRequest

        return [FillRequest(o.prefix, o.suffix, o.max_tokens, id=first + i, one_line=o.one_line, drafts=o.drafts,
                            **{"doc": k or None, "candidates": o.candidates,
                               **(self._conversation(o.chat, o.max_tokens) if o.chat
                                  else self._prompted(o.prefix, o.suffix, o.max_tokens))})
                for i, (o, k) in enumerate(zip(orders, keys))]

    def chat_prompt(self, chat: str, n: int) -> list[int]:
        """The ids of a conversation (FillOrder.chat's JSON text: its messages and tools, and their
        rendering when serve-api rendered them) before a canvas of n; ValueError when the model has no
        chat template or the conversation is malformed, DoesNotFit when it is too long."""
        import json

        from .model.canvas import DoesNotFit
        from .model.chat import conversation

        if self.chat_format is None:
            raise ValueError("the model has no chat template (give one with --chat-template FILE)")
        raw = json.loads(chat)
        if raw.get("rendered") is not None:  # rendered by serve-api, off this thread (model/chat.py segments)
            ids = self.chat_format.tokens(raw["rendered"])
        else:
            messages, tools = conversation(raw.get("messages"), raw.get("tools"))
            ids = self.chat_format.prompt(messages, tools)
        room = self.prompt_room(n)
        if len(ids) > room:
            raise DoesNotFit(f"the conversation is {len(ids)} tokens: with an answer of {n} the model has room "
                             f"for {room}")
        return ids

    def _conversation(self, chat: str, n: int) -> dict:
        """A conversation's FillRequest fields: its prompt; no doc, no candidates (as `_prompted`)."""
        return {"prompt_ids": self.chat_prompt(chat, n), "doc": None, "candidates": (), "ends": self.chat_format.ends}

    def answer_structured(self, order, stop=None):
        """backend/orders.py StructuredOrder -> Answered: JSON under a schema (model/jsonschema.py) decoded
        with its skeleton on the canvas (model/structured.py), or tool calls; ValueError for a request
        the model cannot answer (jsonschema.Unsupported: a schema it cannot express); model/stop.py
        OrderStopped at the next forward once `stop` (a threading.Event) is set."""
        import json

        from .backend.orders import Answered, FillOrder
        from .model.canvas import DoesNotFit
        from .model.jsonschema import Choice, Obj, compile_schema, for_object, tool_call
        from .model.stop import watched
        from .model.structured import decode_json, opens_with

        if self.chat_format is not None and not self.structured:
            raise ValueError("this model does not decode JSON under constraints")
        output = json.loads(order.output)
        if order.max_tokens > self.max_tokens():
            raise DoesNotFit(f"max_tokens {order.max_tokens} does not fit the model: at most {self.max_tokens()}",
                             "max_tokens")
        prompt, cfg = self.chat_prompt(order.chat, order.max_tokens), order.sampling
        model, tok, fmt = watched(self.model, stop), self.tokenizer, self.chat_format
        limit = output.get("limit")  # the request's own max_tokens, which the answer's positions stay within

        def decode(node, lead="", trail="", within=limit):
            try:
                return decode_json(model, tok, prompt, node, cfg.threshold, lead, trail, within)
            except DoesNotFit as e:  # the layout alone is past the model: the schema's field
                if e.param is not None:
                    raise
                raise DoesNotFit(str(e), "tools" if "tools" in output else "response_format") from None

        if "tools" not in output:
            node = compile_schema(output["schema"]) if "schema" in output else for_object()
            r = decode(node)
            return Answered("json", r.text, tokens=r.canvas, decoded=r.decoded, forwards=r.forwards, ms=r.ms)
        tools, choice = output["tools"], output.get("choice", "auto")
        functions = {t["function"]["name"]: t["function"].get("parameters") for t in tools}
        lead, trail = fmt.tool_tags
        forwards, ms = 0, 0.0
        if choice == "auto":  # does the model open a call (the template's tag or a JSON object) or answer?
            call, forwards, ms = opens_with(model, tok, prompt, tok.encode_markup(lead or "{")[:1], order.max_tokens)
            if not call:
                fill = self._answered(self.answer([FillOrder("", "", order.max_tokens, sampling=cfg, chat=order.chat)],
                                                  [""], [stop] if stop else None)[0])
                return Answered("text", fill.text, tokens=fill.tokens, decoded=fill.tokens,
                                forwards=forwards + fill.forwards, ms=ms + fill.ms)
        calls, tokens, decoded = [], 0, 0
        while True:
            name = choice if choice in functions else None
            if name is None:
                if len(functions) == 1:
                    name = next(iter(functions))
                else:  # the function first, chosen whole; then its arguments under its parameters
                    names = tuple(json.dumps(n, ensure_ascii=False) for n in functions)
                    r = decode(Obj((("name", Choice(names)),)), lead)
                    name, forwards, ms = r.value["name"], forwards + r.forwards, ms + r.ms
            try:  # every call within what max_tokens leaves
                r = decode(tool_call(name, functions[name]), lead, trail, None if limit is None else limit - tokens)
            except DoesNotFit:
                if not calls:
                    raise
                break
            calls.append({"name": name, "arguments": json.dumps(r.value["arguments"], ensure_ascii=False)})
            tokens, decoded, forwards, ms = tokens + r.canvas, decoded + r.decoded, forwards + r.forwards, ms + r.ms
            # parallel calls where the template writes calls in tags (one after another): another one when the
            # model's first choice after this call is another opening tag
            if not (output.get("parallel") and lead and len(calls) < MAX_PARALLEL_CALLS):
                break
            prompt = prompt + tok.encode_markup(lead) + tok.encode(r.text) + tok.encode_markup(trail + "\n")
            again, f, t = opens_with(model, tok, prompt, tok.encode_markup(lead)[:1], order.max_tokens)
            forwards, ms = forwards + f, ms + t
            if not again:
                break
        return Answered("tool_calls", "", calls, tokens=tokens, decoded=decoded, forwards=forwards, ms=ms)

    def _prompted(self, prefix: str, suffix: str, n: int, content: str | None = None) -> dict:
        """A prefix-only model's FillRequest fields: the prompt before a canvas of n (a fill's, or with
        `content` a rewrite's), in the positions the canvas leaves; none for an infill model."""
        if self.prompter is None:
            return {}
        room = self.prompt_room(n)
        ids = self.prompter.fill(prefix, suffix, room) if content is None else self.prompter.rewrite(content, room)
        # no doc: reuse.py lines a row up with the document's last fill by its prefix and suffix tokens, which a
        # prompt row does not hold where they stand; no candidates: drafts are verified by scoring (a probe)
        return {"prompt_ids": ids, "chat": self.prompter.convention == "chat", "doc": None, "candidates": ()}

    def prompt_room(self, n: int) -> int:
        """Positions a prompt may take beside a canvas of n: all but the canvas and a fixed first token."""
        from .model.canvas import canvas_room

        return canvas_room(self.tokenizer, self.model.config.max_seq_len) - n

    def answer_rewrite(self, order, stop=None):
        """backend/orders.py RewriteOrder -> Fill: the tagged region (nextedit/mercury.py) in a chat model's
        prompt (prompting.py), the answer on the canvas; ValueError for a model not asked in chat (ours
        rewrite a region by re-masking it: nextedit/suggest.py); model/stop.py OrderStopped between steps
        once `stop` is set."""
        if not self.capabilities["rewrite"]:
            raise ValueError("this model rewrites a region by re-masking it, not from an edit prompt")
        from .model.canvas import FillRequest

        n = min(order.max_tokens, self.max_tokens())
        return self._answer_one(FillRequest("", "", n, id=0, **self._prompted("", "", n, order.content)), stop)

    def answer_instruct(self, order, stop=None):
        """backend/orders.py InstructOrder -> Fill, the region as the instruction says (nextedit/instruct.py):
        a model asked in chat gets the instruction and the tagged region in a user turn; any other re-masks
        the region between the code around it, the instruction a comment above it; OrderStopped between
        steps once `stop` is set."""
        from .model.canvas import FillRequest
        from .nextedit.instruct import chat_content, commented

        n = min(order.max_tokens, self.max_tokens())
        if self.capabilities["rewrite"]:  # prefix-only, asked in chat
            ids = self.prompter.ask(chat_content(order), self.prompt_room(n))
            return self._answer_one(FillRequest("", "", n, id=0, prompt_ids=ids, chat=True), stop)
        prefix = commented(order)
        return self._answer_one(FillRequest(prefix, order.suffix, n, id=0, **self._prompted(prefix, order.suffix, n)),
                                stop)

    def _answer_one(self, request, stop=None):
        """One canvas.FillRequest decoded to its end -> its Fill; OrderStopped between steps once `stop`
        is set (a fill's own way: the decoding stops its row)."""
        decoding = self.decoding([request])
        steps = run(decoding, stop)
        return self._answered(self.answer_of(decoding, 0), f"after {steps} step{'s' * (steps != 1)}")

    @staticmethod
    def _answered(fill, how_far: str = ""):
        """A single order's Fill, or OrderStopped for a stopped one (answer_of's None)."""
        from .model.stop import OrderStopped

        if fill is None:
            raise OrderStopped(f"stopped {how_far}".strip())
        return fill

    @staticmethod
    def answer_of(decoding, i: int):
        """Order i's answer once it has finished: a Fill, or None when it was stopped."""
        from .backend.orders import DraftTally, Fill

        r = decoding.result(i)
        if r.cancelled:
            return None
        return Fill(r.text, r.pieces, r.confidence, r.ms, r.forwards, r.reused, r.end_confidence, r.batch,
                    r.budget_hit, draft=DraftTally(r.draft.offered, r.draft.tokens, len(r.draft.kept))
                    if r.draft else DraftTally())

    @classmethod
    def answers(cls, decoding) -> list:
        """A driven decoding's results as the Backend's answers: a Fill per order, None for a stopped one."""
        return [cls.answer_of(decoding, i) for i in range(len(decoding))]

    def answer(self, orders, keys, stops=None) -> list:
        """Fill `orders` to the end -> a Fill per order; with `stops` (a threading.Event per order),
        an order whose event is set is abandoned between steps (None)."""
        decoding = self.decode_orders(orders, keys)
        run(decoding, stops)
        return self.answers(decoding)

    def answer_probe(self, order, key: str | None = None):
        """backend/orders.py ProbeOrder -> Probed (model/probe.py); ValueError for a prefix-only model.
        No stop: a probe is a few forwards, and its model is read by the kernels it calls too."""
        from .backend.orders import Probed

        if not self.capabilities["probe"]:
            raise ValueError(f"a {self.meta.get('family')} model sees no suffix on its row: it cannot score "
                             "given tokens where they stand (no probe)")
        r = self.probe(order.prefix, order.middle, order.suffix, order.stride, doc=key or None)
        return Probed(r.pieces, r.prob, r.best, r.forwards, r.ms)

    def max_tokens(self) -> int:
        """The largest canvas a fill may ask for: the model's positions less its fixed first token
        (model/canvas.py canvas_room), and for DreamOn the end of text after the suffix."""
        from .model.canvas import canvas_room
        from .model.dreamon import expands

        room = canvas_room(self.tokenizer, self.model.config.max_seq_len)
        return room - 1 if expands(self.tokenizer) else room

    def probe(self, prefix: str, middle: str, suffix: str, stride: int = 4, doc: str | None = None):
        """model/probe.py: how sure the model is of `middle`'s tokens where they stand; with `doc`,
        the next fill for `doc` starts from the probe's context (reuse.py)."""
        from .model.probe import probe

        return probe(self.model, self.tokenizer, prefix, middle, suffix, stride, self.memo, doc)


@dataclass
class NativeEngine(Engine):
    """A model transformers runs (model/native.py: DiffusionGemma): its own generation a step at a
    time, a fill's suffix in its prompt. It cannot probe (scoring given tokens where they stand needs
    a mask to put beside them, and its canvas has none), so no drafts from the user's code; a region
    is rewritten from an edit prompt (`answer_rewrite`) when it is asked in chat. No request joins a
    running decoding."""

    structured = False  # transformers' own decoding runs its canvas: no constraints on it

    def decoding(self, requests, cfg=None):
        from .model.native import NativeDecoding

        return NativeDecoding(self.model, self.tokenizer, requests, cfg)

    @staticmethod
    def join(decoding, orders, keys) -> list[int]:
        raise ValueError("a native model's decoding cannot be joined")

    def prompt_room(self, n: int) -> int:
        from .model.native import prompt_room

        return prompt_room(self.model, n)

    def max_tokens(self) -> int:
        from .model.native import largest_fill

        return largest_fill(self.model)



def _context_memo():
    from .model.reuse import ContextMemo  # torch: imported with the model, not with this module

    return ContextMemo()


def pick_device(name: str = "auto") -> str:
    """The device `name` asks for; ValueError when this machine has no such device (a CUDA or MPS
    device asked for where torch has none gave a traceback from deep inside the loader)."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        index = int(name.partition(":")[2] or 0)
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise ValueError(f"device {name}: this machine has {have} CUDA device{'s' * (have != 1)} torch can use")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device mps: torch has no MPS device on this machine")
    return name


def _stored_16bit(folder: Path):
    """bfloat16 or float16 when every tensor of a Hugging Face folder is stored in it, else None."""
    import torch
    from safetensors import safe_open

    from .model.config import adapter_base
    from .model.pretrained import is_hf_folder, weight_files

    folder = adapter_base(folder) or folder  # low-rank adapters are merged into their base's weights
    if not is_hf_folder(folder):
        return None
    dtypes = set()
    for path in set(weight_files(folder).values()):  # headers only; raises CheckpointError as loading would
        with safe_open(str(path), framework="pt") as f:
            dtypes |= {f.get_slice(name).get_dtype() for name in f.keys()}
    return {"BF16": torch.bfloat16, "F16": torch.float16}.get(dtypes.pop()) if len(dtypes) == 1 else None


def _float_dtype(precision: str, device: str, folder: Path):
    """The dtype a float `precision` (not int8) loads weights in; None: the loader's own choice
    (float32 for our own format, a Hugging Face folder's torch_dtype off the CPU, model/pretrained.py)."""
    import torch

    from .model.config import adapter_base
    from .model.pretrained import is_hf_folder

    if precision != "auto":
        return getattr(torch, FLOAT_DTYPES[precision])
    if not device.startswith("cuda") or is_hf_folder(adapter_base(folder) or folder):
        return None
    # our own format is stored in float32: on a GPU with native bf16 (compute capability 8.0+; older
    # ones only emulate it) bf16 halves the weight bytes each pass reads
    with torch.cuda.device(device):
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else None


def load_engine(launch: LaunchSettings = LaunchSettings()) -> Engine:
    """Load a checkpoint folder (default: the embedded model): our own format or a Hugging Face folder
    of a supported family (model/pretrained.py). Raises CheckpointError when the folder is missing,
    corrupt or unsupported. precision "auto": int8 weights on a CPU that has the kernels
    (model/quantize.py), else float32 on CPU; on a CUDA GPU bf16 for our own format (where the GPU has
    it) and the checkpoint's own for a Hugging Face folder (bf16 stays bf16); "fp32", "bf16", "fp16":
    that dtype for every format on every device; "int8" only on CPU."""
    import torch

    from .model.checkpoint import CheckpointError
    from .model.pretrained import load_folder

    path, precision = launch.path, launch.precision
    if precision == "int8" and launch.device not in ("auto", "cpu"):  # said before whether it exists
        raise ValueError(f"int8 weights are for CPU inference, not {launch.device}")
    device = pick_device(launch.device)
    if device == "cpu":
        torch.set_num_threads(launch.threads or default_threads(1))
    folder = model_folder(path)
    if path is None and not (folder / "config.json").exists():
        raise CheckpointError(f"the embedded default model is missing ({folder}); pass --model DIR")
    if precision == "int8" and device != "cpu":
        raise ValueError(f"int8 weights are for CPU inference, not {device}")
    from .model.families import NATIVE_INT8, is_native_folder

    if is_native_folder(folder):  # a family only transformers runs (model/native.py): its own dtypes, no int8
        from .model.native import load_native

        if precision == "int8":
            raise ValueError(NATIVE_INT8)
        model, tokenizer, meta, prompter = load_native(
            folder, device, None if precision == "auto" else getattr(torch, FLOAT_DTYPES[precision]))
        return NativeEngine(model, tokenizer, meta, prompter=prompter,
                            chat_format=_chat_format(folder, tokenizer, launch.chat_template))
    from .model.quantize import int8_available, quantize_int8

    int8 = precision == "int8" or (precision == "auto" and device == "cpu" and int8_available())
    # int8 from a bf16/fp16 folder: load it as stored and let quantize_int8 widen one matrix at a time,
    # so no float32 model ever exists. Peak RSS of an int8 load of a Qwen2.5-Coder-0.5B shaped folder
    # (`bench pretrained`): 3553 MB loading float32 then quantizing, 2230 MB this way (1331 MB of it
    # anonymous; the rest is the file's pages, mapped while any bf16 tensor of it lives).
    dtype = _stored_16bit(folder) if int8 else _float_dtype(precision, device, folder)
    model, tokenizer, meta = load_folder(folder, device, dtype)
    if int8:
        quantize_int8(model)
    return Engine(model, tokenizer, meta, prompter=_prompter(folder, meta, tokenizer),
                  chat_format=_chat_format(folder, tokenizer, launch.chat_template))


def _chat_format(folder: Path, tokenizer, given: str | None):
    """model/chat.py ChatFormat: the template given at launch, else the checkpoint's (an adapter's is its
    base model's); None without either. CheckpointError when a template cannot be read."""
    from .model.checkpoint import CheckpointError
    from .model.chat import chat_format

    try:
        return chat_format(tokenizer, folder, given)
    except ValueError as e:
        raise CheckpointError(f"chat template: {e}") from None


def _prompter(folder: Path, meta: dict, tokenizer):
    """A prefix-only family's Prompter (model/prompting.py; an adapter's is its base model's); None
    for an infill one and for our own format. CheckpointError when the folder lacks what it needs."""
    from .model.checkpoint import CheckpointError
    from .model.config import adapter_base
    from .model.families import FAMILIES
    from .model.prompting import prompter_for

    try:
        return prompter_for(FAMILIES.get(meta.get("family")), tokenizer, adapter_base(folder) or folder)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
