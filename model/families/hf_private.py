"""The private parts of transformers this package calls, each named once here and reached only through
this module, behind one check of the installed version.

transformers has no public way to run DiffusionGemma's generation a denoising step at a time (native.py
streams a draft after each step, drops a superseded fill between steps and stops at a time budget), so
native.py drives the private methods `generate` itself calls (generation_diffusion_gemma.py's
DiffusionGemmaGenerationMixin), bound to a model by `generation`; and the reference forward of
reference.py sets a config's private attention choice before a model is built (`eager_attention`). Any
release may rename or drop them. Before one is used, `check` makes sure the installed transformers is
within SUPPORTED (pyproject.toml's `transformers` extra; tests/test_hf_private.py holds the two equal) and
has every attribute named, and raises one RuntimeError naming the installed version, the missing
attribute and the supported range, instead of an AttributeError from inside a denoising loop. Nothing
outside this module names a private attribute of transformers (tests/test_hf_private.py walks the package).
transformers is an extra: it is imported on first use, never with this module."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from types import ModuleType

LOWEST, BELOW = (5, 24), (6,)  # the releases the private names below were read from and tested with
SUPPORTED = f">={LOWEST[0]}.{LOWEST[1]},<{BELOW[0]}"
INSTALL = f"pip install 'transformers{SUPPORTED}'"


def _private(name: str):
    """A field of `Generation`: the private method of transformers that it is bound to."""
    return field(metadata={"private": name})


@dataclass(frozen=True)
class Generation:
    """DiffusionGemma's `generate` taken apart (transformers' DiffusionGemmaGenerationMixin): its private
    methods bound to one model, under names of ours, called with the arguments `generate` gives them."""

    generation_config: Callable = _private("_prepare_generation_config")  # -> (GenerationConfig, kwargs)
    sampler: Callable = _private("_prepare_sampler")
    logits_processor: Callable = _private("_prepare_logits_processor")
    ar_stopping_criteria: Callable = _private("_prepare_ar_stopping_criteria")
    diffusion_stopping_criteria: Callable = _private("_prepare_diffusion_stopping_criteria")
    generated_length: Callable = _private("_prepare_generated_length")  # -> (max_length, min_length)
    cache: Callable = _private("_prepare_cache_for_generation")
    encoder_inputs: Callable = _private("_prepare_encoder_inputs")  # -> (ids, masks)
    denoiser_inputs: Callable = _private("_prepare_denoiser_inputs")  # -> (canvas, logits, masks, done)
    denoising_step: Callable = _private("_denoising_step")  # -> (canvas, argmax, logits, done)
    finalize_canvas: Callable = _private("_finalize_canvas")  # -> (ids, finished)
    next_canvas: Callable = _private("_prepare_kwargs_for_next_canvas")  # -> (length, masks and positions)


GENERATION = tuple(f.metadata["private"] for f in fields(Generation))
ATTENTION = "_attn_implementation"  # PreTrainedConfig's: which attention a model built from it runs


def installed() -> str:
    """The installed transformers' version (ImportError when it is not installed)."""
    import transformers  # an extra, imported on first use

    return transformers.__version__


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string ("5.24.0.dev0" -> (5, 24)); () when it has none."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return tuple(int(part) for part in found.groups()) if found else ()


def check(owner: type | ModuleType, names: Iterable[str]) -> None:
    """The installed transformers is within SUPPORTED and `owner` (a class of transformers, or the module)
    has each attribute in `names`; else RuntimeError naming the version, the attribute and the range."""
    names, version, where = list(names), installed(), owner.__name__
    if not LOWEST <= _release(version) < BELOW:
        raise RuntimeError(f"transformers {version} is installed, outside the range diffusion-lsp supports "
                           f"(transformers{SUPPORTED}), whose {where}.{names[0]}"
                           f"{' and other private parts' if len(names) > 1 else ''} it calls ({INSTALL})")
    missing = next((name for name in names if not hasattr(owner, name)), None)
    if missing is not None:
        raise RuntimeError(f"transformers {version} has no {where}.{missing}, which diffusion-lsp calls; "
                           f"it supports transformers{SUPPORTED} ({INSTALL})")


def generation_class(module: ModuleType, name: str) -> type:
    """transformers' class `name` (module: transformers) whose generation `Generation` drives, checked."""
    check(module, [name])
    cls = getattr(module, name)
    check(cls, GENERATION)
    return cls


def generation(model: object) -> Generation:
    """`model`'s private generation methods, each checked to exist first."""
    check(type(model), GENERATION)
    return Generation(**{f.name: getattr(model, f.metadata["private"]) for f in fields(Generation)})


def eager_attention(config: object) -> None:
    """A model built from `config` runs transformers' eager attention (the plain matmul and softmax), which
    takes the reference forward's 4D float mask as it is."""
    check(type(config), [ATTENTION])
    setattr(config, ATTENTION, "eager")
