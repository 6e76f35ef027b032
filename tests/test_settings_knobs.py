"""Every setting is defined once: a name held by two settings groups is one Knob that both take
(protocol/settings.py), so it has one type, one bound and one message; what completions and next
edits share is protocol/request_knobs.py. The next-edit modes are one enum that holds every mode
the pipeline runs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from diffusion_lsp.model.families.claims import GENERAL, Claims
from diffusion_lsp.nextedit.settings import ASKED, Mode, NextEditSettings
from diffusion_lsp.nextedit.suggest import mode_for
from diffusion_lsp.protocol import request_knobs
from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.settings import Knob, SamplerConfig, hints
from diffusion_lsp.server.config import CompletionSettings, Config, parse_config, with_claims
from diffusion_lsp.server.schema import properties

SHARED = [k for k in vars(request_knobs).values() if isinstance(k, Knob)]


def groups(cls=Config) -> list[type]:
    """Every settings group of the editor settings tree (the dataclasses under Config)."""
    out = []
    for f in dataclasses.fields(cls):
        hint = hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            out += [hint, *groups(hint)]
    return out


def test_no_setting_name_is_defined_in_two_groups_apart():
    found = groups()
    assert {CompletionSettings, NextEditSettings, SamplerConfig} <= set(found)
    by_name: dict[str, list[tuple[type, dataclasses.Field]]] = {}
    for group in found:
        for f in dataclasses.fields(group):
            by_name.setdefault(f.name, []).append((group, f))
    apart = []
    for name, held in by_name.items():
        if len(held) < 2:
            continue
        knobs = {f.metadata.get("knob") for _, f in held}
        if len(knobs) != 1 or None in knobs:
            apart.append(f"{name}: {', '.join(g.__name__ for g, _ in held)}")
            continue
        knob = knobs.pop()
        assert knob.name == name, (knob.name, name)
        for group, _ in held:
            assert hints(group)[name] == knob.hint, (group.__name__, name, hints(group)[name], knob.hint)
    assert apart == [], "defined apart in two settings groups (make it one Knob both take): " + "; ".join(apart)


def test_what_completions_and_next_edits_share_is_one_group_both_take():
    assert {k.name for k in SHARED} == {"enable", "debounce_ms", "max_context_tokens", "drafts", "acceptance",
                                        "show_above"}
    for group in (CompletionSettings, NextEditSettings):
        taken = {f.name: f.metadata.get("knob") for f in dataclasses.fields(group)}
        assert all(taken[k.name] is k for k in SHARED), group.__name__


def test_a_knob_s_default_is_written_once_per_group():
    # the groups differ only in `enable`: completions are on for any model, next edits left to its claims
    differs = {k.name for k in SHARED
               if getattr(CompletionSettings(), k.name) != getattr(NextEditSettings(), k.name)}
    assert differs == {"enable"}
    assert (CompletionSettings().enable, NextEditSettings().enable) == (True, None)


@pytest.mark.parametrize("value", [48, 16_384])
def test_a_context_size_one_path_refused_before_is_now_judged_once(value):
    """maxContextTokens was 32-8192 for completions and 64-32768 for next edits: 48 was refused for a
    next edit, 16384 for a completion."""
    cfg, problems = parse_config({"completion": {"maxContextTokens": value}, "nextEdit": {"maxContextTokens": value}})
    assert problems == []
    assert cfg.completion.max_context_tokens == cfg.next_edit.max_context_tokens == value
    assert NextEditSettings(max_context_tokens=value).max_context_tokens == value


@pytest.mark.parametrize("knob, bad", [("enable", "yes"), ("debounceMs", 6000), ("maxContextTokens", 40_000),
                                       ("maxContextTokens", 16), ("drafts", 1), ("acceptance", "on"),
                                       ("showAbove", 1.5)])
def test_a_bad_shared_value_gets_one_message_in_both_groups(knob, bad):
    cfg, problems = parse_config({"completion": {knob: bad}, "nextEdit": {knob: bad}})
    assert cfg == Config() and len(problems) == 2, problems
    completion, next_edit = problems
    assert completion.startswith(f"completion.{knob}: ") and next_edit.startswith(f"nextEdit.{knob}: ")
    # the same words but for the section and the group's own default
    same = [re.sub(r"^\w+\.|using the default .*$", "", p) for p in problems]
    assert same[0] == same[1], problems


def test_the_context_bound_is_what_the_user_is_told():
    _, problems = parse_config({"completion": {"maxContextTokens": 40_000}})
    assert problems == ["completion.maxContextTokens: 40000 is not valid (between 32 and 32768); using the default 512"]
    with pytest.raises(ValueError, match=r"max_context_tokens=40000 is not valid \(between 32 and 32768\)"):
        CompletionSettings(max_context_tokens=40_000)
    with pytest.raises(ValueError, match=r"max_context_tokens=16 is not valid \(between 32 and 32768\)"):
        NextEditSettings(max_context_tokens=16)


def test_completion_enable_null_is_the_model_s_choice_on_for_every_model():
    """null was refused for completion.enable (true or false) and meant "the model's claims" for
    nextEdit.enable: one definition now, and for completions every model claims them."""
    cfg, problems = parse_config({"completion": {"enable": None}, "nextEdit": {"enable": None}})
    assert problems == [] and cfg.completion.enable is None
    for claims, next_edits in ((GENERAL, False), (Claims(next_edits=True), True)):
        claimed = with_claims(cfg, claims)
        assert (claimed.completion.enable, claimed.next_edit.enable) == (True, next_edits)
    off = with_claims(parse_config({"completion": {"enable": False}})[0], GENERAL)
    assert off.completion.enable is False


def test_an_on_off_switch_a_group_defaults_to_a_value_is_a_checkbox_in_the_editor():
    """VS Code draws a checkbox only for a plain boolean: completion.enable (default true) is one,
    though null loads from a settings file; nextEdit.enable (default null) keeps its null."""
    schema = properties()
    assert schema["diffusionLsp.completion.enable"]["type"] == "boolean"
    assert schema["diffusionLsp.nextEdit.enable"]["type"] == ["boolean", "null"]
    assert schema["diffusionLsp.nextEdit.showAbove"]["type"] == ["number", "null"]


def test_a_bad_value_and_its_default_are_said_as_a_settings_file_spells_them():
    _, problems = parse_config({"completion": {"enable": "yes", "showAbove": None, "debounceMs": 1.5}})
    assert problems[0] == 'completion.enable: "yes" is not valid (true, false or null); using the default true'
    assert problems[1].startswith("completion.debounceMs: 1.5 is not valid") and problems[1].endswith("default 0")


def test_the_sampler_s_confidence_cut_is_the_completion_s_knob():
    cut = {f.name: f for f in dataclasses.fields(SamplerConfig)}["confidence_cut"]
    completion = {f.name: f for f in dataclasses.fields(CompletionSettings)}["confidence_cut"]
    assert cut.metadata["knob"] is completion.metadata["knob"]
    assert cut.metadata["editor"] is False  # the server sets it from completion.confidenceCut
    assert (SamplerConfig().confidence_cut, CompletionSettings().confidence_cut) == (0.0, 0.5)


def test_every_mode_the_pipeline_runs_is_a_mode():
    """"api" was a free string outside MODES: a backend that cannot probe but rewrites gets it."""
    ran = {mode_for(asked, Capabilities(probe=p, rewrite=r)) for asked in ASKED for p in (False, True)
           for r in (False, True)}
    assert ran == set(Mode) and all(isinstance(m, Mode) for m in ran)
    assert mode_for("refine", Capabilities(rewrite=True)) is Mode.API


def test_a_mode_the_backend_chooses_cannot_be_asked_for():
    assert ASKED == (Mode.REFINE, Mode.FULL)
    cfg, problems = parse_config({"nextEdit": {"mode": "api"}})
    assert cfg.next_edit.mode is Mode.REFINE
    assert problems == ['nextEdit.mode: "api" is not valid (refine or full); using the default "refine"']
    assert parse_config({"nextEdit": {"mode": "full"}})[0].next_edit.mode is Mode.FULL


def test_the_readme_names_every_editor_setting():
    """The VS Code schema is made from the definitions (test_vscode_extension.py checks it); the README
    lists them by hand: model.server, model.fimTemplate, model.remoteFormat and sampling.draft* were missing."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    missing = [key for key in properties() if f"`{key.split('.', 1)[1]}`" not in readme]
    assert missing == [], missing
