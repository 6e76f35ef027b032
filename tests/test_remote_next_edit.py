"""Next edits through a remote backend: the API's edit endpoint (Mercury's `/edit/completions`,
formats/mercury.py) against the scripted API of remote_api.py, from the client up to the language
server's NextEditor over a RemoteBackend."""

from __future__ import annotations

import asyncio

import pytest

from conftest import RecordingUi
from remote_api import ENV, KEY, client
from diffusion_lsp.context.records import Document
from diffusion_lsp.nextedit.history import EditLog
from diffusion_lsp.formats.mercury import rewritten
from diffusion_lsp.backend.api_client import RemoteError
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import NextEditor
from diffusion_lsp.server.positions import UTF16, range_at
from diffusion_lsp.backend.remote import RemoteBackend
from diffusion_lsp.server.stats import Stats

TEXT = "def area(width, h):\n    return w * h\n"
DOC = Document("file:///m.py", TEXT, "python", 3)


def chat(content: str):
    return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}


def edit(c, content="<|code_to_edit|>\nx\n<|/code_to_edit|>", max_tokens=64):
    async def go():
        try:
            return await c.edit(content, max_tokens)
        finally:
            await c.aclose()
    return asyncio.run(go())


def test_an_edit_request_is_one_user_message_at_the_edit_endpoint(api):
    api.script.append(chat("```python\ny = 2\n```"))
    c, _ = client(api)
    done = edit(c)
    path, headers, body = api.got[0]
    assert path == "/v1/edit/completions" and headers["Authorization"] == f"Bearer {KEY}"
    assert body == {"model": "mercury-edit", "messages": [{"role": "user", "content": "<|code_to_edit|>\nx\n"
                                                           "<|/code_to_edit|>"}], "max_tokens": 64, "temperature": 0.0}
    assert rewritten(done.text) == "y = 2\n"


def test_an_api_without_an_edit_endpoint_is_one_error(api):
    api.script.append((404, {"error": {"message": "no such route"}}))
    c, _ = client(api)
    with pytest.raises(RemoteError, match="no next-edit endpoint") as e:
        edit(c)
    assert e.value.kind == "endpoint" and KEY not in str(e.value)


@pytest.mark.parametrize("answer, region", [
    ("```python\ndef area(width, h):\n    return width * h\n```", "def area(width, h):\n    return width * h\n"),
    ("<|code_to_edit|>\nx = 1<|cursor|>\n<|/code_to_edit|>", "x = 1\n"),
    ("plain\n", "plain\n"),
])
def test_the_answer_loses_its_fence_tags_and_cursor(answer, region):
    assert rewritten(answer) == region


def test_the_server_asks_the_edit_endpoint_and_answers_the_minimal_edit(api):
    api.script.append(chat("```python\ndef area(width, h):\n    return width * h\n```"))
    cfg = parse_config({"model": {"backend": "openai", "baseUrl": api.base, "remoteModel": "mercury-edit",
                                  "apiKeyEnv": ENV}, "worker": {"fillTimeoutS": 20},
                      # an API's model claims nothing: the user turns them on; the API's edit, not the rename's sites
                      "nextEdit": {"enable": True, "follow": False}})[0]
    ui, stats = RecordingUi(), Stats()
    link = RemoteBackend(ui, cfg.model, fill_timeout_s=cfg.worker.fill_timeout_s)
    steps = EditLog()
    steps.note(DOC.uri, "m.py", TEXT.replace("width", "w", 1), TEXT, 0, 0, 0)  # the user renamed w -> width
    editor = NextEditor(link, stats.next_edit, ui.log, steps)
    editor.configure(cfg)

    async def go():
        try:
            return await editor.suggest(DOC, 3, 0, 14, UTF16, "m.py")
        finally:
            await link.close()

    got = asyncio.run(go()).shown
    at = TEXT.index("w * h")
    # minimal: "idth" inserted after the "w" that stays
    assert (got.text, got.start, got.end, range_at(TEXT, got.start, got.end, UTF16)) == ("idth", at + 1, at + 1,
                                                                                         ((1, 12), (1, 12)))
    content = api.got[0][2]["messages"][0]["content"]
    assert "<|code_to_edit|>\ndef area(width<|cursor|>, h):" in content  # the cursor where the rename ended
    assert "-def area(w, h):\n+def area(width, h):" in content  # the history
    assert stats.next_edit.reasons == {"edit": 1}
