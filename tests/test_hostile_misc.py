"""Hostile input to the smaller surfaces: a `regress` baseline that is not one (checked whole before
anything is measured: exit 3 naming the field, a FIFO refused unopened, deep JSON refused), an API
error that echoes the key in another form (percent-encoded, base64, in a basic-auth blob), `--json`
output that must stay strict JSON, and editWithInstruction's expected refusals (an LSP error
response, no ERROR traceback in the log)."""

from __future__ import annotations

import asyncio
import base64
import codecs
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from diffusion_lsp.cli import build_parser, main
from diffusion_lsp.regress import baseline, command
from diffusion_lsp.keyscrub import HIDDEN, scrub_key
from diffusion_lsp.backend.api_client import MAX_SCAN, head
from diffusion_lsp.regress.workload import sample

from remote_api import KEY
from test_regress import files, run_record


# ---- regress baselines ----

def good_baseline() -> dict:
    """A baseline as `regress --save` writes it (figures made up, the workload sampled for real)."""
    record = run_record()
    workload = sample(files(), "the test's files", 8, 2, 2, 3, 0)
    return {"format": command.FORMAT, "created": "2026-01-01T00:00:00+00:00", "version": "0",
            "machine": {"cpu": "x", "cores": 2, "threads": 1, "python": "3.11", "platform": "linux"},
            "model": {"backend": "local", "name": "m", "fingerprint": "0" * 16},
            "settings": {"completion": {"debounceMs": 0}}, "repeat": 3, "calibration": record["calibration"],
            "figures": record["figures"], "workload": workload.to_wire()}


def compare(path: Path, capsys) -> tuple[int, str]:
    """`regress --compare PATH` in this process: (exit code, what it printed)."""
    args = build_parser().parse_args(["regress", "--compare", str(path), "--threads", "1"])
    code = args.run(args)
    return code, capsys.readouterr().out


FIG = "python single-line | e2e p50"


def broken(change) -> dict:
    base = good_baseline()
    change(base)
    return base


# each: what is wrong, and the field the refusal names
BROKEN = [
    (lambda b: b.pop("machine"), "baseline: machine is missing"),
    (lambda b: b.update(model="m"), "baseline: model must be an object"),
    (lambda b: b["model"].pop("fingerprint"), "baseline: model.fingerprint is missing"),
    (lambda b: b.update(figures=[1, 2]), "baseline: figures must be a non-empty object"),
    (lambda b: b.update(figures={}), "baseline: figures must be a non-empty object"),
    (lambda b: b.update(calibration={}), "baseline: calibration.matmul_ms is missing"),
    (lambda b: b["calibration"].update(matmul_ms=[]), 'baseline: calibration["matmul_ms"] must be a non-empty list'),
    (lambda b: b["calibration"].update(matmul_ms=[0.0]), 'calibration["matmul_ms"][0] must be a number above 0'),
    (lambda b: b["figures"][FIG].update(value=float("nan")), f'figures["{FIG}"].value must be a finite number'),
    (lambda b: b["figures"][FIG].update(value=10 ** 400), f'figures["{FIG}"].value must be a finite number'),
    (lambda b: b["figures"][FIG].update(values=[]), f'figures["{FIG}"].values must be a non-empty list'),
    (lambda b: b["figures"][FIG].update(n="30"), f'figures["{FIG}"].n must be an integer'),
    (lambda b: b["figures"][FIG].update(figure="speed"), f'figures["{FIG}"].figure must be one of e2e p50'),
    (lambda b: b["figures"][FIG].update(figure=["e2e p50"]), f'figures["{FIG}"].figure must be one of e2e p50'),
    (lambda b: b["figures"][FIG].pop("row"), f'figures["{FIG}"].row is missing'),
    (lambda b: b.update(settings={"completion": 5}), 'baseline: settings["completion"] must be an object'),
    (lambda b: b.update(created=None), "baseline: created must be a string"),
    (lambda b: b.update(workload=[]), "baseline: workload must be an object"),
    (lambda b: b["workload"]["files"][0].update(text=5), "baseline: workload.files[0].text must be a string"),
    (lambda b: b["workload"]["files"][0].update(renames=[["x", [1], [2, 3]]]),
     "baseline: workload.files[0].renames[0][1] must be a list of two"),
]


def test_a_baseline_as_saved_passes_the_check():
    baseline.check(good_baseline())  # no ValueError
    saved = json.loads(json.dumps(good_baseline(), indent=1))  # as the file holds it
    baseline.check(saved)


@pytest.mark.parametrize("change, named", BROKEN)
def test_each_field_the_compare_reads_is_checked(change, named):
    with pytest.raises(ValueError, match="^baseline: ") as e:
        baseline.check(broken(change))
    assert named in str(e.value)


@pytest.mark.parametrize("change, named", [BROKEN[0], BROKEN[1], BROKEN[3], BROKEN[5]],
                         ids=["no-machine", "model-string", "figures-list", "empty-calibration"])
def test_a_broken_baseline_is_refused_with_exit_3_before_anything_runs(change, named, tmp_path, capsys, monkeypatch):
    """These four were a KeyError or AttributeError traceback, three after a minute of measuring."""
    from diffusion_lsp.regress import measure

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured a baseline that cannot be compared")
    monkeypatch.setattr(measure, "run", no_measuring)
    path = tmp_path / "base.json"
    path.write_text(json.dumps(broken(change)))
    code, out = compare(path, capsys)
    assert code == command.INCOMPATIBLE, out
    assert out.strip().splitlines()[-1].startswith("regress: BASELINE INCOMPATIBLE: ") and named in out


def test_a_number_of_too_many_digits_is_refused_in_the_baselines_words(tmp_path, capsys):
    """The re-run probe's case: a 100,000-digit integer was refused with Python's own advice to call
    sys.set_int_max_str_digits()."""
    path = tmp_path / "big.json"
    path.write_text('{"machine": ' + "9" * 100_000 + "}")
    code, out = compare(path, capsys)
    assert code == command.INCOMPATIBLE and f"a number has more than {sys.get_int_max_str_digits()} digits" in out
    assert "set_int_max_str_digits" not in out


def test_deeply_nested_json_is_refused_without_a_recursion_error(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code, out = compare(path, capsys)
    assert code == command.INCOMPATIBLE and "is not JSON (nested too deeply)" in out
    (tmp_path / "settings.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(command.UserError, match="is not JSON"):
        command._settings(str(tmp_path / "settings.json"))
    path.write_text("[" * 500 + "]" * 500)  # json reads it; the compare of two such values would not
    code, out = compare(path, capsys)
    assert code == command.INCOMPATIBLE and f"nested too deeply (more than {baseline.MAX_DEPTH} levels)" in out
    baseline.parse(json.dumps(good_baseline()).encode())  # a real one is a few levels deep


@pytest.mark.slow
def test_a_fifo_as_the_baseline_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "base.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "regress", "--compare", str(fifo)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == command.COULD_NOT_RUN, done.stdout + done.stderr
    assert "FIFO" in done.stdout and "Traceback" not in done.stderr
    os.mkfifo(tmp_path / "settings.json")
    with pytest.raises(command.UserError, match="FIFO"):
        command._settings(str(tmp_path / "settings.json"))


# ---- the key, in every form an API echoes ----

RESERVED_KEY = "sk/Ab+cd=ef?gh:ij&kl#MN@01$23/45"  # no 8 characters of it that `quote` leaves as they are


def echoes(key: str) -> dict:
    raw = key.encode()
    b64 = base64.b64encode
    out = {"upper": key.upper(), "quote": quote(key, safe=""), "quote-lower-hex": quote(key, safe="").lower(),
           "every-byte": "".join(f"%{c:02X}" for c in raw), "every-byte-lower": "".join(f"%{c:02x}" for c in raw),
           "partly": "".join(f"%{c:02X}" if i % 2 else chr(c) for i, c in enumerate(raw)),
           "quote_plus": quote_plus(key), "twice": quote(quote(key, safe=""), safe=""),
           "base64": b64(raw).decode(), "base64-unpadded": b64(raw).decode().rstrip("="),
           "urlsafe": base64.urlsafe_b64encode(raw).decode().rstrip("="),
           "bearer": b64(b"Bearer " + raw).decode(), "basic-auth": "Basic " + b64(b"user:" + raw).decode(),
           "hex": raw.hex().upper()}
    for o in range(3):  # inside a larger blob, at each byte alignment
        out[f"blob-{o}"] = b64(b"x" * o + json.dumps({"headers": {"authorization": key}}).encode()).decode()
    return out


ECHOES = echoes(KEY)


@pytest.mark.parametrize("key", [KEY, RESERVED_KEY], ids=["key", "reserved-characters"])
@pytest.mark.parametrize("form", ECHOES)
def test_the_scrubber_hides_every_form_of_the_key(form, key):
    echoed = echoes(key)[form]
    said = scrub_key(f"invalid credentials {echoed} for this model", key)
    assert said.startswith("invalid credentials ") and said.endswith("[key] for this model"), said
    assert echoed.split()[-1] not in said
    assert scrub_key("a plain sk-other-key and dGhpcyBpcyBmaW5l stay", key) == "a plain sk-other-key and dGhpcyBpcyBmaW5l stay"


def hidden_echoes(key: str) -> dict:
    """Forms of the key no single word of the text shows (the probe's, after the word-by-word scrub)."""
    raw, b64 = key.encode(), base64.b64encode
    return {"base32": base64.b32encode(raw).decode(), "json-escapes": "".join(f"\\u{ord(c):04x}" for c in key),
            "percent-u": "".join(f"%u{ord(c):04X}" for c in key), "html-entities": "".join(f"&#{ord(c)};" for c in key),
            "spaced": " ".join(key), "zero-width": "\u200b".join(key), "fullwidth": "".join(
                chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in key),
            "hex-spaced": " ".join(f"{c:02x}" for c in raw), "rot13": codecs.encode(key, "rot13"),
            "reversed-base64": b64(raw[::-1]).decode(), "base64-of-base64": b64(b64(raw)).decode()}


@pytest.mark.parametrize("key", [KEY, RESERVED_KEY], ids=["key", "reserved-characters"])
@pytest.mark.parametrize("form", hidden_echoes(KEY))
def test_a_key_no_word_shows_hides_the_whole_message(form, key):
    """The re-run probe's forms: each reached fim's stderr (a key spelled out with spaces, as HTML
    entities, in base32, a base64 of its base64, ...). The text is not shown at all."""
    echoed = hidden_echoes(key)[form]
    assert scrub_key(f"invalid credentials {echoed} for this model", key) == HIDDEN
    kept = "the request took 3 s; see https://status.example.com/incident/4e1b77 for the model gpt-4o-mini"
    assert scrub_key(kept, key) == kept


@pytest.mark.parametrize("form", ["every-byte", "base64", "basic-auth", "blob-2"])
def test_fim_stderr_never_shows_the_key_echoed_encoded(api, tmp_path, capsys, caplog, form):
    from test_remote import remote_flags, source

    api.default = (401, {"error": {"message": f"the key {ECHOES[form]} is not valid"}})
    code = main(["fim", str(source(tmp_path)), "--at", "2:12", *remote_flags(api)])
    err = capsys.readouterr().err
    assert code == 2 and "[key] is not valid" in err, err
    for text in (err, caplog.text):
        assert ECHOES[form] not in text and KEY not in text


@pytest.mark.parametrize("form", ["html-entities", "spaced", "base64-of-base64"])
def test_fim_stderr_says_only_that_the_api_echoed_the_key_where_no_word_shows_it(api, tmp_path, capsys, caplog,
                                                                                  form):
    from test_remote import remote_flags, source

    echoed = hidden_echoes(KEY)[form]
    api.default = (401, {"error": {"message": f"the key {echoed} is not valid"}})
    code = main(["fim", str(source(tmp_path)), "--at", "2:12", *remote_flags(api)])
    err = capsys.readouterr().err
    assert code == 2 and HIDDEN in err and "HTTP 401" in err, err
    for text in (err, caplog.text):
        assert echoed not in text and echoed[:24] not in text


@pytest.mark.parametrize("form", ["every-byte-lower", "bearer", "urlsafe"])
def test_the_editor_is_never_shown_the_key_echoed_encoded(api, form):
    from test_remote_server import failed_fill

    api.default = (401, {"error": {"message": f"the key {ECHOES[form]} is not valid"}})
    ui, error = failed_fill(api)
    assert "[key] is not valid" in ui.shown[0][1]
    assert ECHOES[form] not in repr((ui.shown, ui.logged, str(error)))


def test_an_api_text_is_scrubbed_over_its_start_less_the_word_the_cut_went_through():
    """The scrub ran over the whole of a 4 MiB body (4.6 s on the event loop); now over its first
    MAX_SCAN characters, and a key the cut leaves too short to be known is dropped with its word."""
    text = "x" * (MAX_SCAN - 7) + " " + KEY + " more"
    assert head(text) == "x" * (MAX_SCAN - 7) + " "
    assert head("short " + KEY) == "short " + KEY


# ---- editWithInstruction's expected refusals ----

class FakeInstruct:
    """A backend whose instruct answers what the test says: a Fill's text, or raises."""

    def __init__(self):
        self.outcome: object = "    return [2 * x for x in xs]\n"

    async def ready(self) -> None:
        pass

    async def instruct(self, key, order):
        from diffusion_lsp.protocol.answers import Fill

        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return Fill(self.outcome, [self.outcome], [1.0], ms=1.0, tokens=1)


class InProcess:
    """The real server (create_server) driven through its protocol's front door in this process:
    bodies in, each response awaited by id (bounded), the document put straight in its workspace."""

    def __init__(self, tmp_path: Path):
        from diffusion_lsp.protocol.settings import LaunchSettings
        from diffusion_lsp.server.server import create_server
        from diffusion_lsp.server.session import ServeOptions

        self.ls = create_server(ServeOptions(LaunchSettings(path=str(tmp_path / "no-model"))))
        self.backend = FakeInstruct()  # the session's once initialize has configured its own
        self.responses: dict = {}
        self.arrived = asyncio.Event()
        self.ls.protocol.set_writer(self, include_headers=False)

    def write(self, data: bytes) -> None:
        message = json.loads(data)
        if "id" in message and "method" not in message:
            self.responses[message["id"]] = message
            self.arrived.set()

    def close(self) -> None:
        pass

    async def ask(self, msg_id, method: str, params) -> dict:
        self.ls.protocol.receive(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                                             "params": params}).encode())
        while msg_id not in self.responses:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 30)
        return self.responses.pop(msg_id)


SOURCE = "def double(xs):\n    out = []\n    for x in xs:\n        out.append(2 * x)\n    return out\n"
URI = "file:///tmp/a.py"


def edit_params(uri=URI, version=1, end_line=4) -> dict:
    return {"textDocument": {"uri": uri, "version": version}, "instruction": "use a list comprehension",
            "range": {"start": {"line": 1, "character": 0}, "end": {"line": end_line, "character": 0}}}


def test_edit_with_instruction_refusals_are_error_responses_not_error_tracebacks(tmp_path, caplog):
    """pygls logged each refusal raised after dispatch (unknown document, stale version, a position
    past the end, superseded) as an ERROR with its traceback: 31 in one session."""
    import logging

    from lsprotocol import types

    from diffusion_lsp.protocol.failure import BackendError, Failure, Stop

    server = InProcess(tmp_path)
    method = "diffusionLsp/editWithInstruction"

    async def go() -> dict:
        got = {}
        assert "result" in await server.ask(0, "initialize", {"capabilities": {}})
        server.ls.session.backend = server.backend
        server.ls.workspace.put_text_document(types.TextDocumentItem(URI, "python", 1, SOURCE))
        got["unknown document"] = await server.ask(1, method, edit_params(uri="file:///tmp/nowhere.py"))
        got["stale version"] = await server.ask(2, method, edit_params(version=7))
        got["past the end"] = await server.ask(3, method, edit_params(end_line=40))
        server.backend.outcome = BackendError.dropped(Stop.SUPERSEDED, "a newer request")
        got["superseded"] = await server.ask(4, method, edit_params())
        server.backend.outcome = BackendError(Failure.UNAVAILABLE, "the worker is not running")
        got["backend failed"] = await server.ask(5, method, edit_params())
        server.backend.outcome = "    return [2 * x for x in xs]\n"
        got["answered"] = await server.ask(6, method, edit_params())
        server.backend.outcome = RuntimeError("a bug")
        got["bug"] = await server.ask(7, method, edit_params())
        return got

    with caplog.at_level(logging.INFO):
        got = asyncio.run(go())
    codes = {case: answer["error"]["code"] for case, answer in got.items() if "error" in answer}
    assert codes == {"unknown document": -32602, "stale version": -32801, "past the end": -32602,
                     "superseded": -32800, "backend failed": -32803, "bug": -32603}, got
    assert "unknown document" in got["unknown document"]["error"]["message"]
    assert "past the end" in got["past the end"]["error"]["message"]
    assert got["answered"]["result"]["newText"].startswith("    return [2 * x")
    refusals = [r for r in caplog.records if r.getMessage().startswith(f"answered {method} #")]
    assert sorted(int(r.getMessage().split("#")[1].split()[0]) for r in refusals) == [1, 2, 3, 4, 5]
    assert all(r.levelno <= logging.WARNING and r.exc_info is None for r in refusals)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [(r.name, r.getMessage()) for r in errors]
    assert errors[0].exc_info is not None and "a bug" in errors[0].exc_text  # a bug still is one


# ---- --json output is strict JSON ----

def strict(line: str):
    """json.loads that refuses NaN and Infinity, as jq and JSON.parse do."""
    def refuse(word):
        raise ValueError(f"not JSON: {word}")
    return json.loads(line, parse_constant=refuse)


class NanBackend:
    """A backend whose fills have a NaN confidence and an infinite time (a model whose logits overflowed)."""

    def _fill(self):
        from diffusion_lsp.protocol.answers import Fill

        return Fill("x + 1", ["x", " + 1"], [float("nan"), 0.5], ms=float("inf"), forwards=2)

    async def fill(self, key, order):
        return self._fill()

    async def fill_many(self, orders):
        return [self._fill() for _ in orders]

    async def close(self) -> None:
        pass


def test_fim_json_and_batch_print_strict_json_when_a_figure_is_not_finite(tmp_path, capsys, monkeypatch):
    from diffusion_lsp import fim, fim_batch

    monkeypatch.setattr(fim, "command_backend", lambda launch: NanBackend())
    monkeypatch.setattr(fim_batch, "command_backend", lambda launch: NanBackend())
    source = tmp_path / "a.py"
    source.write_text("y = \n")
    assert main(["fim", str(source), "--at", "1:5", "--json", "--context-tokens", "0"]) == 0
    record = strict(capsys.readouterr().out)
    assert record["confidence"] == [None, 0.5] and record["ms"] is None and record["text"] == "x + 1"
    batch = tmp_path / "in.jsonl"
    batch.write_text(json.dumps({"id": 1, "prefix": "y = "}) + "\n")
    assert main(["fim", "--batch", str(batch), "--context-tokens", "0"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert strict(line) == {"id": 1, "text": "x + 1", "tokens": 2, "forwards": 2, "ms": None}


def test_strict_dumps_makes_every_non_finite_float_null_at_any_depth():
    from diffusion_lsp import jsonout

    value = {"a": [1.0, float("nan"), {"b": (float("-inf"), 2)}], "c": "NaN", "d": True}
    assert strict(jsonout.dumps(value)) == {"a": [1.0, None, {"b": [None, 2]}], "c": "NaN", "d": True}
