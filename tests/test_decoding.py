"""The Decoding protocol and `run`: every decoding declares it, and run stops a request between steps
once its flag is set (the first step always runs), for one flag or one flag per request."""

from __future__ import annotations

import threading
import typing

import pytest

from diffusion_lsp.model.decoding.canvas import CanvasRequest
from diffusion_lsp.model.decoding.drive import Decoding, run, steps
from diffusion_lsp.model.families.dreamon import VariableDecoding
from diffusion_lsp.model.families.native import NativeDecoding
from diffusion_lsp.model.decoding.sampler import Decoding as BatchDecoding
from diffusion_lsp.protocol.settings import SamplerConfig


@pytest.mark.parametrize("cls", [BatchDecoding, VariableDecoding, NativeDecoding])
def test_every_decoding_has_every_member_of_the_protocol(cls):
    members = {name for name in vars(Decoding) if not name.startswith("_")} | {"__iter__", "__len__"}
    members |= set(typing.get_type_hints(Decoding))  # joins
    assert members >= {"joins", "stop", "take_finished", "active", "add", "result", "results"}
    assert [m for m in sorted(members) if not hasattr(cls, m)] == []


def test_run_stops_the_flagged_request_after_the_step_in_which_its_flag_was_set(tokenizer, oracle):
    model = oracle(tokenizer, {q: tokenizer.encode(" ok")[0] for q in range(200)})
    reqs = [CanvasRequest("a = 1\n", "", 6), CanvasRequest("b = 2\n", "", 6)]
    cfg = SamplerConfig(policy="one", heal=False)
    stops = [threading.Event(), threading.Event()]
    decoding = BatchDecoding(model, tokenizer, reqs, cfg)
    for turn, _ in enumerate(steps(decoding, stops)):
        if turn == 0:
            stops[1].set()
    kept, stopped = decoding.results()
    assert stopped.cancelled and stopped.forwards == 1
    assert not kept.cancelled and kept.forwards == 6


def test_run_with_one_flag_set_before_it_starts_runs_one_step_of_every_request(tokenizer, oracle):
    model = oracle(tokenizer, {q: tokenizer.encode(" ok")[0] for q in range(200)})
    reqs = [CanvasRequest("a = 1\n", "", 6), CanvasRequest("b = 2\n", "", 6)]
    stop = threading.Event()
    stop.set()
    decoding = BatchDecoding(model, tokenizer, reqs, SamplerConfig(policy="one", heal=False))
    assert run(decoding, stop) == 1
    assert [(r.cancelled, r.forwards) for r in decoding.results()] == [(True, 1), (True, 1)]
