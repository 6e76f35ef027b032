"""Editor settings: every bad value falls back and is reported; nothing raises."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import RecordingUi
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.protocol.settings import camel, snake
from diffusion_lsp.server.config import Config, parse_config


def test_no_settings_are_the_defaults():
    assert parse_config(None) == (Config(), [])
    assert parse_config({}) == (Config(), [])


def test_an_empty_list_is_no_settings_without_a_warning():
    # a Lua client encodes an empty table as []: Neovim's plugin did, on every start
    base = Config(model=LaunchSettings(path="/ckpt"))
    assert parse_config([]) == (Config(), [])
    assert parse_config([], base) == (base, [])
    assert parse_config([{}])[1] == ["settings should be an object, got [{}] (ignored)"]  # only the empty one


def test_camel_and_snake_keys_inside_or_outside_a_section():
    raw = {"completion": {"debounceMs": 40, "confidence_cut": 0.5}, "sampling": {"policy": "topk"}}
    for settings in (raw, {"diffusionLsp": raw}, {"diffusion-lsp": raw}):
        cfg, problems = parse_config(settings)
        assert problems == []
        assert (cfg.completion.debounce_ms, cfg.completion.confidence_cut, cfg.sampling.policy) == (40, 0.5, "topk")


@pytest.mark.parametrize("section, key, value, field", [
    ("completion", "debounceMs", "soon", "debounce_ms"),
    ("completion", "debounceMs", -5, "debounce_ms"),
    ("completion", "debounceMs", True, "debounce_ms"),  # a bool is not a number here
    ("completion", "maxContextTokens", 1e9, "max_context_tokens"),
    ("completion", "enable", "yes", "enable"),
    ("completion", "disabledLanguages", "python", "disabled_languages"),
    ("sampling", "threshold", 0, "threshold"),
    ("sampling", "threshold", float("nan"), "threshold"),
    ("sampling", "policy", "beam", "policy"),
    ("sampling", "blockSize", -1, "block_size"),
    ("model", "device", "tpu", "device"),
    ("model", "threads", 0, "threads"),
    ("model", "precision", "fp8", "precision"),
])
def test_a_bad_value_falls_back_and_is_reported(section, key, value, field):
    cfg, problems = parse_config({section: {key: value}})
    assert getattr(getattr(cfg, section), field) == getattr(getattr(Config(), section), field)
    assert len(problems) == 1 and f"{section}.{key}" in problems[0] and "default" in problems[0]


def test_unknown_keys_and_wrong_shapes_are_reported_and_ignored():
    cfg, problems = parse_config({"completion": {"typo": 1}, "model": 3, "extra": {}})
    assert cfg == Config()
    assert [p.split()[0:3] for p in problems] == [["unknown", "setting", "completion.typo"],
                                                  ["model", "should", "be"], ["unknown", "setting", "extra"]]
    assert parse_config([1, 2])[1] == ["settings should be an object, got [1, 2] (ignored)"]


def test_absent_and_bad_values_keep_the_command_line_base():
    base = Config(model=LaunchSettings(path="/ckpt", device="cpu"))
    cfg, problems = parse_config({"model": {"device": "gpu!"}, "completion": {"debounceMs": 10}}, base)
    assert (cfg.model.path, cfg.model.device, cfg.completion.debounce_ms) == ("/ckpt", "cpu", 10)
    assert 'using the default "cpu"' in problems[0]


def test_types_are_coerced_only_where_harmless():
    cfg, problems = parse_config({"sampling": {"threshold": 1, "timeBudgetMs": None}, "model": {"threads": None}})
    assert problems == [] and cfg.sampling.threshold == 1.0 and isinstance(cfg.sampling.threshold, float)


def test_key_case_conversions():
    assert snake("maxContextTokens") == "max_context_tokens" and snake("idle-exit-s") == "idle_exit_s"
    assert camel("max_context_tokens") == "maxContextTokens"


def test_sampling_settings_make_the_worker_s_order():
    from diffusion_lsp.context.records import CompletionContext, SpanKind
    from diffusion_lsp.protocol.settings import SamplerConfig
    from diffusion_lsp.server.completion import fill_request

    ctx = CompletionContext("x = ", "\n", SpanKind.LINE, 16, "python", 4, "", "")
    cut = Config().completion.confidence_cut  # completion.confidenceCut
    assert fill_request(Config(), ctx, 16, None).sampling == SamplerConfig(confidence_cut=cut)
    cfg, problems = parse_config({"sampling": {"blockSize": 0, "policy": "one", "timeBudgetMs": 500},
                                  "completion": {"confidenceCut": 0}})
    assert problems == [] and fill_request(cfg, ctx, 16, None).sampling == SamplerConfig(block_size=0, policy="one",
                                                                                         time_budget_ms=500)
    assert fill_request(cfg, ctx, 16, 200).sampling.time_budget_ms == 200  # a single-line budget: the tighter one
    assert parse_config({"sampling": {"stopBelow": 0.5}})[1] == ["unknown setting sampling.stopBelow (ignored)"]


@pytest.mark.parametrize("section, key, value", [
    ("sampling", "blockSize", 10**12), ("sampling", "k", 10**9), ("sampling", "timeBudgetMs", 1e12),
    ("completion", "maxLineChars", 10**12), ("completion", "cacheSize", 10**9), ("completion", "lineBudgetMs", 1e9),
    ("worker", "idleExitS", 1e12), ("worker", "fillTimeoutS", 0), ("model", "threads", 10**6)])
def test_settings_have_upper_bounds(section, key, value):
    cfg, problems = parse_config({section: {key: value}})
    assert cfg == Config() and len(problems) == 1 and f"{section}.{key}" in problems[0]


@pytest.mark.slow
def test_the_server_never_imports_torch():
    code = "import sys, diffusion_lsp.server.server, diffusion_lsp.server.session; print('torch' in sys.modules, 'transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False False\n"


def test_the_session_shows_each_bad_setting_and_keeps_serving_flags():
    from diffusion_lsp.server.session import ServeOptions, Session

    ui = RecordingUi()
    session = Session(ServeOptions(LaunchSettings(path="/ckpt"), worker_socket="/tmp/x.sock"), ui, {}.get)
    session.configure({"diffusionLsp": {"completion": {"debounceMs": "soon"}, "model": {"device": "tpu"}}})
    assert [kind for kind, _ in ui.shown] == ["warning", "warning"]
    assert all(m.startswith("diffusion-lsp settings: ") for _, m in ui.shown)
    spec = session.backend.spec
    assert (spec.model.path, str(spec.socket), spec.model.device) == ("/ckpt", "/tmp/x.sock", "auto")


def test_a_number_too_large_for_a_float_is_one_warning_and_the_default():
    """math.isfinite overflowed on a 400-digit integer: initialize failed with an OverflowError and
    the editor could not start the server; through didChangeConfiguration the whole update was lost."""
    cfg, problems = parse_config({"sampling": {"threshold": 10 ** 400}, "completion": {"confidenceCut": 10 ** 400,
                                                                                        "debounceMs": 7}})
    assert len(problems) == 2 and all("is not valid" in p for p in problems), problems
    assert cfg.sampling.threshold == 0.9 and cfg.completion.confidence_cut == 0.5 and cfg.completion.debounce_ms == 7
