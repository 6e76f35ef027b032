"""Diffusion models that transformers implements natively (DiffusionGemma first), run through
transformers' own modeling and generation code inside our worker, behind the same engine interface
as our own models (engine/answering.py: `decode_orders`, `answer_of`, `max_tokens`, ...). transformers is an
extra (`pip install 'diffusion-lsp[transformers]'`), imported here only: never by the language server.

Why the model's own generation and not our sampler: DiffusionGemma is block diffusion over a prompt
that its encoder caches, with a canvas of uniform random tokens (no mask token) that is denoised with
self-conditioning on the previous step's logits, accepted under an entropy bound and re-noised where
not accepted (generation_diffusion_gemma.py). Our sampler commits masked positions of one row that
holds prefix, canvas and suffix; none of that applies. So `NativeDecoding` drives transformers' own
step (`_denoising_step`, with its sampler, temperature schedule and stopping criteria, made from the
checkpoint's generation_config.json by `_prepare_generation_config`) one denoising step per turn,
exactly as `generate` calls it, which lets the worker stream the draft after each step, abandon a
superseded fill between steps and stop at a time budget. Seeded per fill (SEED), a fill equals
`torch.manual_seed(SEED); model.generate(prompt)` token for token (tests/test_native.py).

The model sees nothing after its canvas, so a fill's suffix goes into the prompt (prompting.py;
DiffusionGemma: "chat", a user turn of its chat template). Its canvas is `canvas_length` (256)
positions; a fill keeps the tokens before the first end-of-sequence token, at most max_tokens."""

from __future__ import annotations

import math
import reprlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .checkpoint import CheckpointError, check_finite
from .config import SpecialTokens, read_json, regular_file, size_problem
from .families import native_family
from .hf_tokenizer import load_tokenizer_files
from .pretrained import weight_headers
from .prompting import Prompter, answer_text, chat_template, rendered
from .results import Draft, FillResult, answer_of, text_of
from .settings import SamplerConfig
from .tokenizer import Tokenizer

SEED = 0  # every fill starts from this torch seed: the same request gets the same fill
INSTALL = "pip install 'diffusion-lsp[transformers]'"


def _tokens(hf, folder: Path) -> SpecialTokens:
    """Gemma's vocab: <pad> 0, <eos> 1, <bos> 2, <mask> 4 by name. Tokenizer wants a mask and a filler:
    the filler is the eos (decode drops it), the mask <mask> or the pad (neither is ever on a canvas)."""
    def first(*names):
        return next((n for n in names if hf.token_to_id(n) is not None), None)

    eos, bos, mask = first("<eos>", "</s>"), first("<bos>", "<s>"), first("<mask>", "<pad>")
    if eos is None or mask is None:
        raise CheckpointError(f"checkpoint {folder}: the tokenizer has no <eos> or no <mask>/<pad> token")
    return SpecialTokens(mask=mask, filler=eos, bos=bos)


def load_native(folder: str | Path, device: str = "cpu",
                dtype: torch.dtype | None = None) -> tuple[object, Tokenizer, dict, Prompter]:
    """(the transformers model, our tokenizer, config.json plus "family", the prompter) of a native
    folder (engine/answering.py NativeEngine holds them); CheckpointError when transformers is missing or
    the folder does not load (weights from model.safetensors only: use_safetensors, nothing unpickled, no
    remote code)."""
    folder = Path(folder)
    try:
        config = read_json(folder / "config.json")
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    family = native_family(config) if isinstance(config, dict) else None
    if family is None:
        raise CheckpointError(f"checkpoint {folder}: not a family transformers runs natively")
    check_config(config, family, folder)
    try:
        import transformers
    except ImportError:
        raise CheckpointError(f"checkpoint {folder}: {family.name} runs through transformers' own modeling code, "
                              f"which is not installed ({INSTALL})") from None
    cls = getattr(transformers, family.model_class)
    where = check_weights(cls, config, folder)
    check_generation(folder)
    try:
        hf = load_tokenizer_files(folder)
        tok = Tokenizer(hf, _tokens(hf, folder))
        template = chat_template(folder) if family.prompt == "chat" else None
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    if dtype is None:
        dtype = torch.float32 if torch.device(device).type == "cpu" else "auto"
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars on the worker's log
    transformers.utils.logging.set_verbosity_error()
    try:
        model = cls.from_pretrained(
            str(folder), dtype=dtype, local_files_only=True, use_safetensors=True, trust_remote_code=False)
    except Exception as e:  # transformers raises OSError, ValueError, KeyError, safetensors errors ...
        raise CheckpointError(f"checkpoint {folder}: transformers could not load it "
                              f"({type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]})") from None
    state = model.state_dict()  # every name a tied tensor has, the file's among them
    for name, (path, _) in where.items():
        if name in state:
            check_finite(name, state[name], f"checkpoint {folder}: {path.name}")
    special = (("bos_token", tok.special.bos), ("eos_token", tok.special.filler))
    try:
        prompter = rendered(Prompter(family.prompt, tok, template=template, special=special))
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    return model.to(device).eval(), tok, {**config, "family": family.name}, prompter


# The longest canvas: FillOrder's largest fill (4096 tokens); published DiffusionGemma's is 256
MAX_CANVAS = 4096


def check_config(config: dict, family, folder: Path) -> None:
    """config.json's sizes within config.py's bounds, its canvas within the positions and its token ids
    within the vocab, from config.json alone: transformers builds whatever its config says (a million
    layers take minutes on the way to running out of memory) and looks an absent image_token_id up as
    the published vocab's, past a smaller vocab's end, only once it generates."""
    def fault(key, problem):
        return CheckpointError(f"checkpoint {folder}: config.json {key} {problem}")

    for field, key, value in family.sizes(config):
        problem = size_problem(field, value)
        if problem:
            raise fault(key, problem)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    layers, types = text.get("num_hidden_layers"), text.get("layer_types")
    if types is not None and (not isinstance(types, list) or (layers is not None and len(types) != layers)):
        raise fault("text_config.layer_types", f"should be a list of num_hidden_layers ({layers}) layer types, "
                                               f"got {reprlib.repr(types)}")
    positions = text.get("max_position_embeddings", 131072)  # DiffusionGemmaTextConfig's default
    canvas, most = config.get("canvas_length", 256), min(MAX_CANVAS, positions // 2)
    if type(canvas) is not int or not 1 <= canvas <= most:
        raise fault("canvas_length", f"should be an integer from 1 to {most} (at most {MAX_CANVAS}, and two canvases "
                                     f"within text_config.max_position_embeddings {positions}), "
                                     f"got {reprlib.repr(canvas)}")
    vocab = text.get("vocab_size", 262144)
    for key in family.token_ids:
        value = config.get(key)
        if value is None:
            raise fault(key, f"is missing (a {family.name} config names its image tokens; transformers' default is "
                             f"the published vocab's id)")
        if type(value) is not int or not 0 <= value < vocab:
            raise fault(key, f"should be a token id from 0 to {vocab - 1} (text_config.vocab_size), "
                             f"got {reprlib.repr(value)}")


# Denoising steps per canvas: a fill without a time budget runs them all (published DiffusionGemma: 48)
MAX_STEPS = 1024


def check_generation(folder: Path) -> None:
    """generation_config.json (read by transformers for each fill): at most MAX_STEPS denoising steps,
    and every number in it finite (a NaN temperature bound would make every step's logits NaN)."""
    path = folder / "generation_config.json"
    if not path.exists():
        return
    try:
        gen = read_json(path)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    if not isinstance(gen, dict):
        raise CheckpointError(f"checkpoint {folder}: generation_config.json holds a {type(gen).__name__}, "
                              f"not an object")
    steps = gen.get("max_denoising_steps")
    if steps is not None and (type(steps) is not int or not 1 <= steps <= MAX_STEPS):
        raise CheckpointError(f"checkpoint {folder}: generation_config.json max_denoising_steps should be an integer "
                              f"from 1 to {MAX_STEPS}, got {reprlib.repr(steps)}")

    def numbers(value, key):  # (key path, float) of every float, nested objects included
        if isinstance(value, float):
            yield key, value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from numbers(v, f"{key}.{k}" if key else str(k))

    bad = next(((k, v) for k, v in numbers(gen, "") if not math.isfinite(v)), None)
    if bad:
        raise CheckpointError(f"checkpoint {folder}: generation_config.json {bad[0]} should be a finite number, "
                              f"got {bad[1]}")


def check_weights(cls, config: dict, folder: Path) -> dict[str, tuple[Path, list[int]]]:
    """The model config.json describes, built on the meta device (nothing allocated), against the
    safetensors headers (each file a regular one): every tensor it needs is there with its shape, so
    transformers neither builds a model larger than its files nor fills a missing tensor with random
    values. Also checks that every other file transformers may open is a regular file. Returns
    weight_headers' tensor name -> (file, shape)."""
    for path in sorted(folder.iterdir()):
        if path.suffix in (".json", ".safetensors", ".jinja"):  # what from_pretrained and the tokenizer read
            try:
                regular_file(path)
            except ValueError as e:
                raise CheckpointError(f"checkpoint {folder}: {e}") from None
    where = weight_headers(folder)
    try:
        cfg = cls.config_class.from_dict(config)
        with torch.device("meta"):
            shell = cls(cfg)
    except Exception as e:  # transformers' strict configs raise their own errors
        raise CheckpointError(f"checkpoint {folder}: bad config.json ({type(e).__name__}: "
                              f"{(str(e).splitlines() or [''])[0][:300]})") from None
    tied = set(getattr(shell, "all_tied_weights_keys", None) or {})
    for name, t in shell.state_dict().items():
        if name not in where and name not in tied:
            raise CheckpointError(f"checkpoint {folder}: config.json and the weights do not match (the model it "
                                  f"describes has {name}, which the weights do not hold)")
        if name in where and list(where[name][1]) != list(t.shape):
            raise CheckpointError(f"checkpoint {folder}: config.json and the weights do not match ({name} is "
                                  f"{list(where[name][1])}, config.json gives {list(t.shape)})")
    return where


@dataclass
class _Fill:
    """One request while NativeDecoding runs it."""

    req: object  # canvas.FillRequest
    result: FillResult | None = None
    stopped: bool = False


class NativeDecoding:
    """A native model's decoding (decoding.py's Decoding): requests one after another, each a
    `generate` call taken apart one denoising step per turn; no request joins a running one (joins)."""

    joins = False

    def __init__(self, model, tok: Tokenizer, requests: list, cfg: SamplerConfig | None = None):
        """requests: canvas.FillRequest with their prompt_ids (engine/answering.py NativeEngine makes them)."""
        self.model, self.tok, self.cfg = model, tok, cfg or SamplerConfig()
        self.ends = end_ids(model, tok)
        self.fills = [_Fill(r) for r in requests]
        self.finished: list[int] = []

    def add(self, requests):
        raise ValueError("a native model's decoding cannot be joined")

    def stop(self, i: int) -> None:
        self.fills[i].stopped = True

    def __len__(self) -> int:
        return len(self.fills)

    def take_finished(self) -> list[int]:
        done, self.finished = self.finished, []
        return done

    def active(self) -> int:
        return sum(1 for f in self.fills if f.result is None and not f.stopped)

    def result(self, i: int) -> FillResult:
        f = self.fills[i]
        return f.result or FillResult(f.req.id, "", [], [], [], 0, 0.0, cancelled=True)

    def results(self) -> list[FillResult]:
        return [self.result(i) for i in range(len(self.fills))]

    @torch.inference_mode()
    def __iter__(self):
        for i, f in enumerate(self.fills):
            if f.stopped:
                self.finished.append(i)
                continue
            for draft in self._run(f):
                yield [(i, draft)] if draft is not None and f.req.drafts else []
                if f.stopped:
                    break
            self.finished.append(i)

    def _run(self, f: _Fill):
        """transformers' generate (generation_diffusion_gemma.py, batch 1, no padding), its steps
        yielded as drafts (the argmax canvas, as its own streamer's put_draft gets it); f.result at the end."""
        model, req = self.model, f.req
        t0 = time.perf_counter()
        C = model.config.canvas_length
        canvases = math.ceil(req.max_tokens / C)
        room, prompt = prompt_room(model, req.max_tokens), req.prompt_ids
        device = model.device
        input_ids = torch.tensor([prompt[len(prompt) - room:] if len(prompt) > room else prompt], device=device)
        gc, _ = model._prepare_generation_config(None, max_new_tokens=req.max_tokens)
        cur_len = initial = input_ids.shape[1]
        max_length, _ = model._prepare_generated_length(gc, cur_len)
        cache = model._prepare_cache_for_generation(generation_config=gc, batch_size=1, max_length=max_length)
        eos = torch.tensor(gc.eos_token_id, device=device) if gc.eos_token_id is not None else None
        enc_pos = torch.arange(0, cur_len, dtype=torch.int32, device=device)[None]
        dec_pos = torch.arange(cur_len, cur_len + C, dtype=torch.int32, device=device)[None]
        attention = torch.ones((1, cur_len), dtype=torch.bool, device=device)
        dec_attention = torch.nn.functional.pad(attention, (0, C), value=True)
        sampler = model._prepare_sampler(gc)
        processors = model._prepare_logits_processor(gc, None)
        ar_stop = model._prepare_ar_stopping_criteria(gc, None)
        diffusion_stop = model._prepare_diffusion_stopping_criteria(gc)
        forwards, budget_hit, late = 0, False, False
        finished = torch.zeros(1, dtype=torch.bool, device=device)
        conf = []
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(SEED)
            for canvas in range(canvases):
                ids, enc_masks = model._prepare_encoder_inputs(
                    input_ids=input_ids, attention_mask=attention, encoder_position_ids=enc_pos, cache=cache,
                    is_prefill=canvas == 0, canvas_length=C, batch_size=1)
                cache = model.model.encoder(input_ids=ids, attention_mask=enc_masks, cache=cache,
                                            position_ids=enc_pos).cache
                current, self_cond, masks, done = model._prepare_denoiser_inputs(
                    decoder_attention_mask=dec_attention, cache=cache, sampler=sampler,
                    diffusion_stopping_criteria=diffusion_stop, batch_size=1, device=device, model_kwargs={})
                argmax = current
                for step in reversed(range(1, gc.max_denoising_steps + 1)):
                    forwards += 1
                    current, argmax, self_cond, done = model._denoising_step(
                        decoder_forward=model.forward, current_canvas=current, argmax_canvas=argmax,
                        input_ids=input_ids, decoder_position_ids=dec_pos, self_conditioning_logits=self_cond,
                        mask_mapping=masks, cache=cache, finished_denoising=done, cur_step=step, sampler=sampler,
                        logits_processor=processors, diffusion_stopping_criteria=diffusion_stop)
                    late = (self.cfg.time_budget_ms is not None
                            and (time.perf_counter() - t0) * 1e3 > self.cfg.time_budget_ms)
                    if bool(done.all()) or f.stopped or late:
                        break
                    yield self._draft(req, input_ids[0, initial:].tolist() + argmax[0].tolist(),
                                      gc.max_denoising_steps - step + 1)
                if f.stopped:
                    return
                budget_hit |= late
                probs = self_cond.float().softmax(-1)  # [1, C, V]: the last step's (temperature-scaled) logits
                conf += probs.gather(-1, argmax[..., None])[0, :, 0].tolist()
                input_ids = torch.cat([input_ids, argmax], dim=-1)
                input_ids, finished = model._finalize_canvas(input_ids=input_ids, finished_sequences=finished,
                                                             generation_config=gc, stopping_criteria=ar_stop,
                                                             canvas_length=C, eos_tensor=eos)
                if bool(finished.all()) or late or (req.one_line and self._line_written(req, input_ids[0, initial:])):
                    break
                cur_len, dec_attention, attention, enc_pos, dec_pos = model._prepare_kwargs_for_next_canvas(
                    attention_mask=attention, decoder_attention_mask=dec_attention, decoder_position_ids=dec_pos,
                    canvas_length=C, cur_len=cur_len)
        f.result = self._result(req, input_ids[0, initial:].tolist(), conf, forwards,
                                (time.perf_counter() - t0) * 1e3, budget_hit)
        yield None

    def _line_written(self, req, ids: torch.Tensor) -> bool:
        """A one-line fill's first line is in the canvases generated so far, so later ones cannot change
        it (each canvas is final once generated): a line break in the text, and for a chat answer in the
        body of its code fence (prose before a fence would be cut in the end: decoding goes on)."""
        text = self.tok.decode(self._kept(ids.tolist(), self.ends | req.ends))
        if req.chat:
            fenced = text.find("```")
            return fenced >= 0 and "\n" in text[fenced:] and "\n" in answer_text(text, "chat").strip("\n")
        return "\n" in text

    def _draft(self, req, ids: list[int], step: int) -> Draft:
        text = self.tok.decode(self._kept(ids, self.ends | req.ends))
        return Draft(step, "", text, 0)

    @staticmethod
    def _kept(ids: list[int], ends: frozenset[int]) -> list[int]:
        """The generated ids before the first end-of-sequence one (a conversation's: FillRequest.ends too)."""
        return next((ids[:k] for k, t in enumerate(ids) if t in ends), ids)

    def _result(self, req, ids: list[int], conf: list[float], forwards: int, ms: float,
                budget_hit: bool) -> FillResult:
        ids = self._kept(ids, self.ends | req.ends)[: req.max_tokens]
        text, pieces = answer_of(*text_of(self.tok, ids, ""), req.chat, req.one_line)
        ids = ids[: len(pieces)]
        return FillResult(req.id, text, ids, pieces, conf[: len(ids)], forwards, ms, budget_hit=budget_hit,
                          canvas=ids)


def end_ids(model, tok: Tokenizer) -> frozenset[int]:
    """The ids a fill ends at: generation_config.json's eos_token_id (Gemma's lists <end_of_turn> too),
    else the text config's, and the tokenizer's filler (its eos)."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = model.config.get_text_config().eos_token_id
    return frozenset([eos] if isinstance(eos, int) else list(eos or [])) | {tok.filler_id}


def positions(model) -> int:
    return model.config.get_text_config().max_position_embeddings


def prompt_room(model, max_tokens: int) -> int:
    """Positions left for the prompt before a fill of `max_tokens`: generation goes in whole canvases."""
    C = model.config.canvas_length
    return positions(model) - math.ceil(max_tokens / C) * C


def largest_fill(model) -> int:
    """Whole canvases, one canvas of positions left for the prompt, at most 4096 (FillOrder's limit)."""
    C = model.config.canvas_length
    return max(0, min(4096, (positions(model) // C - 1) * C))
