"""serve-api's request bodies without a server (diffusion_lsp/api/bodies.py): FIM templates taken
apart, a body checked field by field, stop sequences. The routes themselves are test_api's."""

from __future__ import annotations

import pytest

from diffusion_lsp.api.bodies import BadRequest, cut_at_stop, parse_fim, split_fim, stream_safe
from test_api import PREFIX, SUFFIX


@pytest.mark.parametrize("prompt", [
    f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
    f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>",
    f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>",
    f"<｜fim▁begin｜>{PREFIX}<｜fim▁hole｜>{SUFFIX}<｜fim▁end｜>",
    f"[SUFFIX]{SUFFIX}[PREFIX]{PREFIX}",
    f"<|code_prefix|>{PREFIX}<|code_suffix|>{SUFFIX}<|code_middle|>",
])
def test_every_fim_template_is_taken_apart(prompt):
    assert split_fim(prompt) == (PREFIX, SUFFIX)


def test_a_request_body_is_checked_field_by_field():
    ok = parse_fim({"prompt": "a", "suffix": "b", "max_tokens": 5, "stop": "\n", "user": "u", "frobnicate": 1}, 64)
    assert (ok.prefix, ok.suffix, ok.max_tokens, ok.stop, ok.ignored) == ("a", "b", 5, ["\n"], ["frobnicate"])
    for body, param in [({"prompt": 3}, "prompt"), ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
                        ({"prompt": "a", "max_tokens": True}, "max_tokens"), ({"prompt": "a", "stop": [1]}, "stop"),
                        ({"prompt": "a", "temperature": "hot"}, "temperature"), ({"prompt": "a", "n": 2}, "n"),
                        ({"prompt": "a", "stream": "yes"}, "stream"), ({"prompt": "a", "logprobs": 5}, "logprobs")]:
        with pytest.raises(BadRequest) as e:
            parse_fim(body, 64)
        assert e.value.param == param, body
    with pytest.raises(BadRequest):
        parse_fim(["not", "an", "object"], 64)


def test_stop_sequences_cut_the_text_and_hold_back_what_may_start_one():
    assert cut_at_stop("abc\ndef", ["\n"]) == ("abc", True)
    assert cut_at_stop("abc", ["\n"]) == ("abc", False)
    assert stream_safe("x = 1 # TO", ["# TODO"]) == "x = 1 "
    assert stream_safe("x = 1", ["# TODO"]) == "x = 1"
