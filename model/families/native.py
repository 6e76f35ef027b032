"""Diffusion models that transformers implements natively (DiffusionGemma first), run through
transformers' own modeling and generation code inside our worker, behind the same engine interface
as our own models (engine/answering.py: `decode_orders`, `answer_of`, `max_tokens`, ...); loaded and
checked by native_load.py, which imports transformers (an extra, never imported by the language server).

Why the model's own generation and not our sampler: DiffusionGemma is block diffusion over a prompt
that its encoder caches, with a canvas of uniform random tokens (no mask token) that is denoised with
self-conditioning on the previous step's logits, accepted under an entropy bound and re-noised where
not accepted (generation_diffusion_gemma.py). Our sampler commits masked positions of one row that
holds prefix, canvas and suffix; none of that applies. So `NativeDecoding` drives transformers' own
step (its denoising step, with its sampler, temperature schedule and stopping criteria, made from the
checkpoint's generation_config.json) one denoising step per turn, exactly as `generate` calls it,
through the private methods that hf_private.py checks and binds (`_Canvases` holds generate's state
between canvases), which lets the worker stream the draft after each step, abandon a
superseded fill between steps and stop at a time budget. Seeded per fill (SEED), a fill equals
`torch.manual_seed(SEED); model.generate(prompt)` token for token (tests/test_native.py).

The model sees nothing after its canvas, so a fill's suffix goes into the prompt (model/chat/prompting.py;
DiffusionGemma: "chat", a user turn of its chat template). Its canvas is `canvas_length` (256)
positions; a fill keeps the tokens before the first end-of-sequence token, at most max_tokens."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from ..decoding.drive import Turns
from .hf_private import Generation, generation
from ..chat.prompting import answer_text
from ...protocol.answers import Draft
from ..decoding.results import FillResult, answer_of, text_of
from ...protocol.settings import SamplerConfig
from ..network.tokenizer import Tokenizer

SEED = 0  # every fill starts from this torch seed: the same request gets the same fill


@dataclass
class _Fill:
    """One request while NativeDecoding runs it."""

    req: object  # canvas.CanvasRequest
    result: FillResult | None = None
    stopped: bool = False


class NativeDecoding(Turns):
    """A native model's decoding (a Decoding): requests one after another, each a
    `generate` call taken apart one denoising step per turn; no request joins a running one (joins)."""

    joins = False

    def __init__(self, model, tok: Tokenizer, requests: list, cfg: SamplerConfig | None = None):
        """requests: canvas.CanvasRequest with their prompt_ids (NativeEngine makes them)."""
        self.model, self.tok, self.cfg = model, tok, cfg or SamplerConfig()
        self.ends = end_ids(model, tok)
        self.fills = [_Fill(r) for r in requests]
        self.finished: list[int] = []

    def stop(self, i: int) -> None:
        self.fills[i].stopped = True

    def active(self) -> int:
        return sum(1 for f in self.fills if f.result is None and not f.stopped)

    def result(self, i: int) -> FillResult:
        f = self.fills[i]
        return f.result or FillResult("", [], [], id=f.req.id, cancelled=True)

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
        """transformers' generate (generation_diffusion_gemma.py, batch 1, no padding), a canvas at a time,
        its steps yielded as drafts (the argmax canvas, as its own streamer's put_draft gets it); f.result at
        the end. The same calls in the same order as generate's, so the same random numbers."""
        req, t0, device = f.req, time.perf_counter(), self.model.device
        prompt = _prompt(self.model, req)
        state = _Canvases.start(self.model, _Prepared.of(self.model, req.max_tokens), prompt)
        forwards, budget_hit, conf = 0, False, []
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(SEED)
            for canvas in range(math.ceil(req.max_tokens / state.C)):
                argmax, logits, steps, late = yield from self._denoise(f, state, state.encode(canvas == 0), t0)
                forwards += steps
                if f.stopped:
                    return
                budget_hit |= late
                conf += _confidence(logits, argmax)
                state.append(argmax)
                if bool(state.finished.all()) or late or (req.one_line and self._line_written(req, state.generated())):
                    break
                state.advance()
        f.result = self._result(req, state.generated().tolist(), conf, forwards,
                                (time.perf_counter() - t0) * 1e3, budget_hit)
        yield None

    def _denoise(self, f: _Fill, state: _Canvases, inputs: tuple, t0: float):
        """One canvas denoised from the denoiser's inputs (`_Canvases.encode`) as generate does, a draft
        yielded after each step that leaves it unfinished -> (argmax canvas [1, C], the last step's
        logits [1, C, V], forwards, whether the time budget ran out)."""
        current, logits, masks, done = inputs
        argmax, forwards, late, steps = current, 0, False, state.g.gc.max_denoising_steps
        for step in reversed(range(1, steps + 1)):
            forwards += 1
            current, argmax, logits, done = state.step(current, argmax, logits, masks, done, step)
            late = self.cfg.time_budget_ms is not None and (time.perf_counter() - t0) * 1e3 > self.cfg.time_budget_ms
            if bool(done.all()) or f.stopped or late:
                break
            yield self._draft(f.req, state.generated().tolist() + argmax[0].tolist(), steps - step + 1)
        return argmax, logits, forwards, late

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
        """The generated ids before the first end-of-sequence one (a conversation's: CanvasRequest.ends too)."""
        return next((ids[:k] for k, t in enumerate(ids) if t in ends), ids)

    def _result(self, req, ids: list[int], conf: list[float], forwards: int, ms: float,
                budget_hit: bool) -> FillResult:
        ids = self._kept(ids, self.ends | req.ends)[: req.max_tokens]
        text, pieces = answer_of(*text_of(self.tok, ids, ""), req.chat, req.one_line)
        ids = ids[: len(pieces)]
        return FillResult(text, pieces, conf[: len(ids)], ms=ms, forwards=forwards, budget_hit=budget_hit,
                          id=req.id, token_ids=ids, canvas=ids)


@dataclass
class _Prepared:
    """What transformers' generate prepares from the generation config for a fill (generation_diffusion_gemma.py):
    the config itself, its sampler, logits processors and stopping criteria, and the end-of-sequence ids;
    with the model's generation steps that take them (the adapter's `Generation`)."""

    steps: Generation
    gc: object  # transformers' GenerationConfig
    sampler: object
    processors: object
    ar_stop: object
    diffusion_stop: object
    eos: torch.Tensor | None

    @classmethod
    def of(cls, model, max_tokens: int) -> _Prepared:
        steps = generation(model)
        gc, _ = steps.generation_config(None, max_new_tokens=max_tokens)
        eos = torch.tensor(gc.eos_token_id, device=model.device) if gc.eos_token_id is not None else None
        return cls(steps, gc, steps.sampler(gc), steps.logits_processor(gc, None), steps.ar_stopping_criteria(gc, None),
                   steps.diffusion_stopping_criteria(gc), eos)


@dataclass
class _Canvases:
    """generate's state from one canvas to the next (batch 1, no padding): the ids so far, the encoder's
    cache, the positions and attention masks of the next canvas, and whether the row has finished."""

    model: object
    g: _Prepared
    input_ids: torch.Tensor  # [1, P + C * canvases appended]
    prompt_length: int  # P
    cache: object
    enc_pos: torch.Tensor  # the encoder's next positions: [1, P], then the last canvas's [1, C]
    dec_pos: torch.Tensor  # [1, C] the next canvas's positions
    attention: torch.Tensor  # [1, cur_len] bool
    dec_attention: torch.Tensor  # [1, cur_len + C] bool
    cur_len: int  # the positions before the next canvas
    finished: torch.Tensor  # [1] bool

    @classmethod
    def start(cls, model, g: _Prepared, input_ids: torch.Tensor) -> _Canvases:
        """Before the first canvas after the prompt input_ids [1, P]: its cache and positions."""
        cur_len, device = input_ids.shape[1], model.device
        max_length, _ = g.steps.generated_length(g.gc, cur_len)
        cache = g.steps.cache(generation_config=g.gc, batch_size=1, max_length=max_length)
        return cls(model, g, input_ids, cur_len, cache, *_first_positions(cur_len, model.config.canvas_length, device),
                   cur_len, torch.zeros(1, dtype=torch.bool, device=device))

    @property
    def C(self) -> int:
        return self.model.config.canvas_length

    def generated(self) -> torch.Tensor:
        """The ids of the canvases appended so far [C * canvases]."""
        return self.input_ids[0, self.prompt_length:]

    def encode(self, first: bool) -> tuple:
        """The prompt (first) or the last canvas into the encoder's cache -> the denoiser's inputs: (a random
        canvas [1, C], self-conditioning logits, the attention masks, which rows are done denoising [1])."""
        steps, device = self.g.steps, self.model.device
        ids, masks = steps.encoder_inputs(
            input_ids=self.input_ids, attention_mask=self.attention, encoder_position_ids=self.enc_pos,
            cache=self.cache, is_prefill=first, canvas_length=self.C, batch_size=1)
        self.cache = self.model.model.encoder(input_ids=ids, attention_mask=masks, cache=self.cache,
                                              position_ids=self.enc_pos).cache
        return steps.denoiser_inputs(
            decoder_attention_mask=self.dec_attention, cache=self.cache, sampler=self.g.sampler,
            diffusion_stopping_criteria=self.g.diffusion_stop, batch_size=1, device=device, model_kwargs={})

    def step(self, current, argmax, logits, masks, done, step: int) -> tuple:
        """Denoising step `step` (counting down) of the canvas -> (canvas, argmax canvas [1, C], logits
        [1, C, V], done [1])."""
        g = self.g
        return g.steps.denoising_step(
            decoder_forward=self.model.forward, current_canvas=current, argmax_canvas=argmax,
            input_ids=self.input_ids, decoder_position_ids=self.dec_pos, self_conditioning_logits=logits,
            mask_mapping=masks, cache=self.cache, finished_denoising=done, cur_step=step, sampler=g.sampler,
            logits_processor=g.processors, diffusion_stopping_criteria=g.diffusion_stop)

    def append(self, argmax: torch.Tensor) -> None:
        """The denoised canvas [1, C] after the ids; `finished` once an end token or a stopping criterion says so."""
        ids = torch.cat([self.input_ids, argmax], dim=-1)
        self.input_ids, self.finished = self.g.steps.finalize_canvas(
            input_ids=ids, finished_sequences=self.finished, generation_config=self.g.gc,
            stopping_criteria=self.g.ar_stop, canvas_length=self.C, eos_tensor=self.g.eos)

    def advance(self) -> None:
        """The positions and masks of the next canvas."""
        self.cur_len, self.dec_attention, self.attention, self.enc_pos, self.dec_pos = self.g.steps.next_canvas(
            attention_mask=self.attention, decoder_attention_mask=self.dec_attention,
            decoder_position_ids=self.dec_pos, canvas_length=self.C, cur_len=self.cur_len)


def _confidence(logits: torch.Tensor, argmax: torch.Tensor) -> list[float]:
    """Each canvas token's probability under the last step's (temperature-scaled) logits [1, C, V]."""
    probs = logits.float().softmax(-1)
    return probs.gather(-1, argmax[..., None])[0, :, 0].tolist()


def _prompt(model, req) -> torch.Tensor:
    """The request's prompt ids [1, P], its start cut where the fill's canvases leave it too few positions."""
    room, prompt = prompt_room(model, req.max_tokens), req.prompt_ids
    return torch.tensor([prompt[len(prompt) - room:] if len(prompt) > room else prompt], device=model.device)


def _first_positions(cur_len: int, C: int, device):
    """generate's first canvas after a prompt of cur_len: (encoder positions [1, P], decoder positions
    [1, C], attention mask [1, P], decoder attention mask [1, P + C])."""
    enc_pos = torch.arange(0, cur_len, dtype=torch.int32, device=device)[None]
    dec_pos = torch.arange(cur_len, cur_len + C, dtype=torch.int32, device=device)[None]
    attention = torch.ones((1, cur_len), dtype=torch.bool, device=device)
    return enc_pos, dec_pos, attention, torch.nn.functional.pad(attention, (0, C), value=True)


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
    """Whole canvases, one canvas of positions left for the prompt, at most 4096 (FillRequest's limit)."""
    C = model.config.canvas_length
    return max(0, min(4096, (positions(model) // C - 1) * C))
