"""A completion through the real server and worker with a Hugging Face folder of each family as the
model (tiny random checkpoints from test_pretrained.py): the request reaches the family's model and
is answered. Random weights say nothing useful, so the test checks the path, not the text."""

from __future__ import annotations

import pytest
import pytest_asyncio
from lsprotocol import types

from conftest import complete, loads_ended, open_doc, start_server, stop_server, within
from test_pretrained import TOKENS, build

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
OPTIONS = {"completion": {"confidenceCut": 0.0, "debounceMs": 0}, "worker": {"idleExitS": 0},
           "model": {"threads": 1}}
CAPS = types.ClientCapabilities(
    window=types.WindowClientCapabilities(work_done_progress=True),
    text_document=types.TextDocumentClientCapabilities(inline_completion=types.InlineCompletionClientCapabilities()))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-server")
    return {family: build(family, root)[0] for family in TOKENS}


@pytest.mark.parametrize("family", list(TOKENS))
async def test_a_completion_goes_through_each_family(folders, family, tmp_path):
    client = await start_server(folders[family], tmp_path / "worker.sock", CAPS, OPTIONS)
    try:
        open_doc(client, "file:///add.py", "def add(a, b):\n    return \n\nprint(add(1, 2))\n")
        await loads_ended(client, 1)
        items = await complete(client, "file:///add.py", 1, 11)
        report = await within(client.protocol.send_request_async("diffusionLsp/stats", {}))
        c = report.counts  # a fresh server: exact counts
        assert report.worker.state == "ready" and (c.requests, c.errors) == (1, 0)
        assert (c.answered, c.empty) == ((1, 0) if items else (0, 1))
        assert c.model_calls == 1 + (c.parse_rejects > c.resamples_skipped)  # and once more for a re-sample
        assert not [m for m in client.log_messages if "fill failed" in m.message]
    finally:
        await stop_server(client)
