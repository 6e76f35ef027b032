"""The private parts of transformers behind one adapter (model/families/hf_private.py): it refuses a transformers
outside the supported range and one that lacks a private attribute with one RuntimeError naming the
version, the attribute and the range (on stand-ins: a stand-in transformers module with its version,
a stand-in model with an attribute deleted); its range is pyproject.toml's; and nothing else in the
package names a private attribute of transformers (an AST walk, shown to find the uses the package had)."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
import types
from dataclasses import fields
from pathlib import Path

import pytest

from diffusion_lsp.model.families import hf_private
from diffusion_lsp.model.families.hf_private import GENERATION, SUPPORTED, Generation, eager_attention, generation

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = "hf_private.py"
RANGE = "transformers>=5.24,<6"


def stand_in_transformers(monkeypatch, version: str, **classes) -> types.ModuleType:
    """A transformers module of `version` holding `classes`, in place of the installed one."""
    module = types.ModuleType("transformers")
    module.__version__ = version
    for name, cls in classes.items():
        setattr(module, name, cls)
    monkeypatch.setitem(sys.modules, "transformers", module)
    return module


def stand_in_model(*without: str) -> type:
    """A model class with each private generation method (each returns its own name), less `without`."""
    cls = type("StandIn", (), {name: (lambda self, *a, _name=name, **k: _name) for name in GENERATION})
    for name in without:
        delattr(cls, name)
    return cls


@pytest.mark.parametrize("version", ["4.57.1", "5.23.2", "6.0.0", "main"])
def test_a_transformers_outside_the_supported_range_is_refused_naming_it_and_the_range(monkeypatch, version):
    stand_in_transformers(monkeypatch, version)
    with pytest.raises(RuntimeError) as refused:
        generation(stand_in_model()())
    message = str(refused.value)
    assert message.startswith(f"transformers {version} is installed, outside the range diffusion-lsp supports "
                              f"({RANGE}), whose StandIn._prepare_generation_config and other private parts "
                              f"it calls")
    assert f"pip install '{RANGE}'" in message


@pytest.mark.parametrize("missing", ["_denoising_step", "_prepare_kwargs_for_next_canvas"])
def test_a_missing_private_attribute_is_refused_naming_the_version_the_attribute_and_the_range(monkeypatch, missing):
    stand_in_transformers(monkeypatch, "5.24.0")
    with pytest.raises(RuntimeError) as refused:
        generation(stand_in_model(missing)())
    assert str(refused.value) == (f"transformers 5.24.0 has no StandIn.{missing}, which diffusion-lsp calls; "
                                  f"it supports {RANGE} (pip install '{RANGE}')")


def test_a_supported_transformers_binds_each_private_method_to_its_own_name(monkeypatch):
    stand_in_transformers(monkeypatch, "5.31.0.dev0")
    bound = generation(stand_in_model()())
    assert {f.name: getattr(bound, f.name)() for f in fields(Generation)} == {
        "generation_config": "_prepare_generation_config", "sampler": "_prepare_sampler",
        "logits_processor": "_prepare_logits_processor", "ar_stopping_criteria": "_prepare_ar_stopping_criteria",
        "diffusion_stopping_criteria": "_prepare_diffusion_stopping_criteria",
        "generated_length": "_prepare_generated_length", "cache": "_prepare_cache_for_generation",
        "encoder_inputs": "_prepare_encoder_inputs", "denoiser_inputs": "_prepare_denoiser_inputs",
        "denoising_step": "_denoising_step", "finalize_canvas": "_finalize_canvas",
        "next_canvas": "_prepare_kwargs_for_next_canvas"}


def test_the_model_class_is_checked_before_a_model_is_built(monkeypatch):
    module = stand_in_transformers(monkeypatch, "5.24.0", Good=stand_in_model(), Bad=stand_in_model("_finalize_canvas"))
    assert hf_private.generation_class(module, "Good") is module.Good
    with pytest.raises(RuntimeError, match=r"^transformers 5\.24\.0 has no StandIn\._finalize_canvas, "):
        hf_private.generation_class(module, "Bad")
    with pytest.raises(RuntimeError, match=r"^transformers 5\.24\.0 has no transformers\.Gone, "):
        hf_private.generation_class(module, "Gone")


def test_eager_attention_is_set_through_the_checked_attribute(monkeypatch):
    stand_in_transformers(monkeypatch, "5.24.0")
    config = type("Config", (), {"_attn_implementation": None})()
    eager_attention(config)
    assert config._attn_implementation == "eager"
    with pytest.raises(RuntimeError, match=r"^transformers 5\.24\.0 has no Config\._attn_implementation, "):
        eager_attention(type("Config", (), {})())
    stand_in_transformers(monkeypatch, "4.57.0")
    with pytest.raises(RuntimeError, match=r"^transformers 4\.57\.0 is installed, outside the range"):
        eager_attention(config)


def test_the_supported_range_is_pyproject_s_transformers_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert SUPPORTED == ">=5.24,<6" and extras["transformers"] == [f"transformers{SUPPORTED}"]
    assert f"transformers{SUPPORTED}" in extras["test"]


def package_files() -> list[Path]:
    """Every module of the package, wherever its folders live (model/ and kernels/ may be mapped in)."""
    roots = {Path(p) for name in ("diffusion_lsp", "diffusion_lsp.model", "diffusion_lsp.kernels")
             for p in importlib.util.find_spec(name).submodule_search_locations}
    return sorted({f.resolve() for root in roots for f in root.rglob("*.py")})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def uses(source: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(private names of transformers by how they are written: imports from transformers with a private part,
    chains from a name bound to transformers with one, as (line, name); attributes with a private name on
    anything but self or cls, and getattr-style strings, as (line, name): private to transformers if it
    defines them)."""
    bound, written, accessed = set(), [], []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "transformers":
                    bound.add(a.asname or "transformers")
                    written += [(node.lineno, a.name)] if any(map(_private, a.name.split("."))) else []
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "transformers":
            for a in node.names:
                bound.add(a.asname or a.name)
                if any(map(_private, [*node.module.split("."), a.name])):
                    written.append((node.lineno, f"{node.module}.{a.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain = ast.unparse(node)
            if chain.split(".")[0] in bound:
                written.append((node.lineno, chain))
            elif not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                accessed.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            accessed.append((node.lineno, node.args[1].value))
    return written, accessed


def transformers_defines(names: set[str]) -> set[str]:
    """Those of `names` that the installed transformers' source defines: a def, a class or module level
    assignment, or a `self.` one (read as text: importing transformers takes seconds)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not names:
        return set()
    pattern = re.compile(rb"(?:def |self\.|^[ \t]*)(" + b"|".join(re.escape(n.encode()) for n in sorted(names))
                         + rb")\s*[(=:]", re.M)
    found = set()
    for path in Path(spec.origin).parent.rglob("*.py"):
        found.update(m.decode() for m in pattern.findall(path.read_bytes()))
    return found


def private_transformers_uses(sources: dict[str, str]) -> list[str]:
    """Every private name of transformers written in `sources` (name -> text) -> "name:line: what"."""
    written, accessed = {}, {}
    for name, source in sources.items():
        written[name], accessed[name] = uses(source)
    theirs = transformers_defines({attr for found in accessed.values() for _, attr in found})
    return sorted([f"{name}:{line}: {what}" for name, found in written.items() for line, what in found]
                  + [f"{name}:{line}: {attr}" for name, found in accessed.items() for line, attr in found
                     if attr in theirs])


# what model/families/native.py and model/families/reference.py wrote before the adapter, and imports the walk must see
BEFORE = '''
import transformers
import transformers.models._private as hidden
from transformers.generation import _helper
from transformers.utils import logging

def run(model, gc, cur_len, cfg, steps):
    max_length, _ = model._prepare_generated_length(gc, cur_len)
    current, argmax, self_cond, done = model._denoising_step(decoder_forward=model.forward)
    cfg._attn_implementation = "eager"
    transformers.utils._thing()
    getattr(model, "_finalize_canvas")(steps._own_name)
    logging.set_verbosity_error()
'''


def test_the_walk_finds_private_transformers_names_however_they_are_written():
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed: which private names are its own is read from its source")
    assert private_transformers_uses({"before": BEFORE}) == [
        "before:10: _attn_implementation", "before:11: transformers.utils._thing", "before:12: _finalize_canvas",
        "before:3: transformers.models._private", "before:4: transformers.generation._helper",
        "before:8: _prepare_generated_length", "before:9: _denoising_step"]


def test_no_module_but_the_adapter_names_a_private_part_of_transformers():
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed: which private names are its own is read from its source")
    files = package_files()
    assert [f for f in files if f.name == ADAPTER]  # the adapter is among them, left out below
    sources = {str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f): f.read_text()
               for f in files if f.name != ADAPTER}
    assert private_transformers_uses(sources) == []
