"""Loading a model transformers implements natively (native.py: DiffusionGemma first) from a folder,
checked before transformers builds anything: config.json's sizes, canvas and token ids within bounds
(`check_config`), generation_config.json's steps and numbers (`check_generation`), and every tensor the
model needs in the safetensors headers with its shape (`check_weights`), after hf_private.py has
checked that the installed transformers is one whose private generation native.py can drive.
transformers is an extra (`pip install 'diffusion-lsp[transformers]'`), imported here and by
hf_private.py only: never by the language server. The bounds are model/network/config.py's."""

from __future__ import annotations

import math
import reprlib
from pathlib import Path

import torch

from .checkpoint import CheckpointError, check_finite
from ..network.config import SpecialTokens, read_json, regular_file, size_problem
from .table import native_family
from .hf_private import generation_class
from .hf_tokenizer import load_tokenizer_files
from .pretrained import weight_headers
from ..chat.prompting import Prompter, chat_template, rendered
from ..network.tokenizer import Tokenizer

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
    folder (NativeEngine holds them); CheckpointError when transformers is missing or
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
    cls = generation_class(transformers, family.model_class)  # RuntimeError outside the versions supported
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


# The longest canvas: FillRequest's largest fill (4096 tokens); published DiffusionGemma's is 256
MAX_CANVAS = 4096


def check_config(config: dict, family, folder: Path) -> None:
    """config.json's sizes within ModelConfig's bounds, its canvas within the positions and its token ids
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
