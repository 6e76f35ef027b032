"""serve-api's Mercury-style `/v1/edit/completions` follows the change its edit history made, by the
language server's rules (nextedit/follow.py): a rename's sites and a signature's calls in the region
come back edited without asking the model, which answered the region unchanged in a user trial. A
history of another file, a half-typed line or no history at all is the model's to answer. In
process: the app over a Service whose model is a fake that is sure of every token (so it changes
nothing) and counts what it is asked."""

from __future__ import annotations

import pytest

from diffusion_lsp.api.app import create_app
from diffusion_lsp.api.metrics import Metrics
from diffusion_lsp.api.service import Service
from diffusion_lsp.context.tokens import approx_tokens
from diffusion_lsp.formats import mercury
from diffusion_lsp.nextedit.history import diffs_between, steps_of
from diffusion_lsp.protocol.answers import Probed
from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.worker.spec import WorkerSpec

OLD = '''def area(w, h):
    """The area of a w by h box."""
    total = w * h
    return total


def boxes(items):
    return [area(i.w, i.h) for i in items]
'''


class SureModel:
    """A backend sure of every token it is shown: the next-edit decoding changes nothing."""

    capabilities = Capabilities(probe=True)
    counts = {"worker_crashes": 0}

    def __init__(self):
        self.asked = 0

    async def start(self):
        pass

    async def ready(self):
        pass

    async def close(self):
        pass

    def describe(self) -> dict:
        return {"state": "ready"}

    def suspect(self):
        pass

    async def probe(self, key, order):
        self.asked += 1
        lines = order.middle.splitlines(keepends=True)
        return Probed(lines, [0.99] * len(lines), [0.99] * len(lines), order.stride, 1.0)

    async def fill(self, key, order):
        raise AssertionError("nothing is doubted: no fill")


@pytest.fixture
def api(tmp_path):
    from starlette.testclient import TestClient

    service = Service(WorkerSpec(tmp_path / "w.sock"), Metrics())
    service.backend = model = SureModel()
    with TestClient(create_app(service, models=["diffusion-lsp"])) as http:
        def ask(text: str, first: int, last: int, history: list[str], path: str = "geo.py") -> str:
            """The region of lines first..last (0-based, inclusive) as the route answers it."""
            lines = text.splitlines(keepends=True)
            before, region, after = "".join(lines[:first]), "".join(lines[first:last + 1]), "".join(lines[last + 1:])
            content = mercury.edit_request(path, before, region, 0, after, history, approx_tokens, 4000)
            got = http.post("/v1/edit/completions", json={"model": "diffusion-lsp",
                                                          "messages": [{"role": "user", "content": content}]})
            assert got.status_code == 200, got.text
            return mercury.rewritten(got.json()["choices"][0]["message"]["content"])
        ask.model = model
        yield ask


def test_a_rename_in_the_history_comes_back_at_its_sites_in_the_region(api):
    text = OLD.replace("def area(w, h):", "def area(width, h):")
    got = api(text, 1, 3, diffs_between("geo.py", OLD, text))
    # the name's uses; a word of the docstring is no site (a `:param w:` field would be)
    assert got == '    """The area of a w by h box."""\n    total = width * h\n    return total\n'
    assert api.model.asked == 0  # the rules answered: the model was not asked


def test_a_parameter_added_in_the_history_reaches_the_calls_in_the_region(api):
    text = OLD.replace("def area(w, h):", "def area(w, h, scale):")
    got = api(text, 6, 7, diffs_between("geo.py", OLD, text))
    assert got == "def boxes(items):\n    return [area(i.w, i.h, scale) for i in items]\n"


def test_what_the_rules_cannot_follow_is_the_models(api):
    renamed = OLD.replace("def area(w, h):", "def area(width, h):")
    region = "".join(renamed.splitlines(keepends=True)[1:4])
    assert api(renamed, 1, 3, diffs_between("other.py", OLD, renamed)) == region  # another file's history
    assert api(renamed, 1, 3, []) == region  # no history
    half = OLD.replace("    total = w * h", "    total = w *")
    assert api(half, 6, 7, diffs_between("geo.py", OLD, half)) == "".join(OLD.splitlines(keepends=True)[6:8])
    assert api.model.asked == 3


def test_the_history_is_placed_where_its_lines_stand_when_the_request_cuts_the_file():
    text = OLD.replace("def area(w, h):", "def area(width, h):")
    history = "".join(diffs_between("geo.py", OLD, text)) + "a note between the diffs\n"
    assert [s.first for s in steps_of(history, "geo.py", text)] == [0]
    assert [s.first for s in steps_of(history, "geo.py", "# a line the client cut above\n" + text)] == [1]
    assert steps_of(history, "geo.py", "nothing of it\n") == [] and steps_of(history, "else.py", text) == []
