"""Shared fixtures: a tiny real checkpoint written in our on-disk format, and an oracle model; and the
two tiers: `pytest -m "not slow"` runs the in-process tests (about a minute), `pytest` all of them.

A test that starts a process (the language server, the worker, serve-api, an editor, a benchmark, any
`python` or other program but git) is slow, and says so one way: `pytestmark = pytest.mark.slow` at
the top of a module whose every test starts one, `@pytest.mark.slow` on the test elsewhere. git is
the exception: the data pipeline calls it as it would a library, a few ms a call. A test may be slow
for its running time alone (more than about ten seconds on two cores); its mark's comment says so.
The check below fails a test that starts a process and is not marked slow, naming the command."""

from __future__ import annotations

import os
import signal

# the tests run on the CPU on every host: a GPU host would otherwise run the end-to-end tests on CUDA
# ("auto" picks it), in this process and in every process the tests start. Set before torch looks.
# The GPU tier (tests/test_gpu.py) is its own run: `DIFFUSION_LSP_TEST_GPU=1 pytest tests/test_gpu.py`.
# Without it the Triton kernels run on CPU tensors in Triton's interpreter (set before triton is imported).
if os.environ.get("DIFFUSION_LSP_TEST_GPU") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TRITON_INTERPRET"] = "1"

import sysconfig  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from diffusion_lsp.model.families.checkpoint import save_checkpoint
from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.network.tokenizer import train_bpe
from diffusion_lsp.model.network.transformer import DiffusionTransformer, KVCache

def pytest_configure(config):
    """What the servers remember between starts (server/notice.py) goes to a fresh folder, never
    the user's home; the processes the tests start inherit it."""
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="diffusion-lsp-state-")


# ---- the slow marker's check: a test that starts a process and is not marked slow fails ----

ALLOWED_PROGRAMS = {"git"}  # the one program a fast test may start (the module docstring says why)


def _command(argv) -> list[str]:
    argv = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv)
    return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]


class ProcessStarts:
    """Notes every process started while it is entered. Every way Python starts one goes through
    these: `subprocess.Popen` (subprocess.run, asyncio's subprocesses and so pytest-lsp's client,
    os.popen), multiprocessing's spawn (`spawnv_passfds`), `os.fork` (its fork and forkserver, and
    os.spawn*), `os.posix_spawn[p]` and `os.system`. Each is wrapped to note the command and go on:
    the test runs as it would, and fails after."""

    def __init__(self):
        import multiprocessing.util
        import subprocess

        self.commands: list[list[str]] = []
        self._wrapped = [(subprocess.Popen, "_execute_child", lambda a: a[1]),  # (self, args, executable, ...)
                         (multiprocessing.util, "spawnv_passfds", lambda a: a[1]),  # (path, args, passfds)
                         (os, "posix_spawn", lambda a: a[1]), (os, "posix_spawnp", lambda a: a[1]),
                         (os, "fork", lambda a: ["(a fork)"]), (os, "system", lambda a: a[0].split())]
        self._saved: list[tuple] = []

    def __enter__(self) -> ProcessStarts:
        for owner, name, argv_of in self._wrapped:
            real = getattr(owner, name)
            self._saved.append((owner, name, real))
            setattr(owner, name, self._noting(real, argv_of))
        return self

    def _noting(self, real, argv_of):
        def start(*args, **kwargs):
            self.commands.append(_command(argv_of(args)))
            return real(*args, **kwargs)
        return start

    def __exit__(self, *exc) -> None:
        for owner, name, real in reversed(self._saved):
            setattr(owner, name, real)
        self._saved.clear()

    def unmarked(self) -> list[str]:
        """The commands a test not marked slow may not run."""
        return [" ".join(c)[:200] for c in self.commands if Path(c[0]).name not in ALLOWED_PROGRAMS]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _unless_slow(item, "its fixtures"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _unless_slow(item, "it"))


def _unless_slow(item, who: str):
    if item.get_closest_marker("slow") is not None:
        return (yield)
    with ProcessStarts() as starts:
        result = yield
    if started := starts.unmarked():
        pytest.fail(f"{who} started a process ({'; '.join(started[:3])}): a test that starts one is marked "
                    "slow (tests/conftest.py)", pytrace=False)
    return result


# the scripted OpenAI-compatible API fixture `api`; a skip for a package that cannot be imported fails
pytest_plugins = ["remote_api", "import_skips"]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
CORPUS_FILES = ["json/decoder.py", "json/encoder.py", "textwrap.py", "shlex.py"]


def corpus_texts() -> list[str]:
    return [(STDLIB / f).read_text() for f in CORPUS_FILES] + ["x = self.foo(bar)\n" * 50]


@pytest.fixture(scope="session")
def tokenizer():
    return train_bpe(corpus_texts(), vocab_size=512)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tokenizer) -> Path:
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny"))
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", model, tokenizer)


class OracleModel(torch.nn.Module):
    """A fake denoiser with known logits: position q should hold table[q] (filler where the table has
    nothing). Its confidence is p_hi at positions in `easy` or whose left neighbour is no longer a
    mask, else p_lo, so parallel policies have something to decide. Speaks the sampler's model API:
    hidden(), logits() and head_weight() (None: a head that is not one matrix), full and cached modes."""

    def __init__(self, tok, table: dict[int, int], easy=(), p_hi=0.99, p_lo=0.6, shift=False,
                 rival: dict[int, int] | None = None):
        super().__init__()
        self.tok, self.table, self.easy = tok, table, set(easy)
        self.p_hi, self.p_lo, self.rival = p_hi, p_lo, rival or {}
        self.config = ModelConfig(vocab_size=tok.vocab_size, dim=8, n_layers=1, n_heads=1,
                                  max_seq_len=512, shift_logits=shift)
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.calls = 0

    def hidden(self, tokens, positions, key_mask, cache=None):
        self.calls += 1
        left_is_mask = torch.zeros_like(tokens, dtype=torch.bool)
        left_is_mask[:, 1:] = tokens[:, :-1] == self.tok.mask_id
        shift = int(self.config.shift_logits)
        if shift:  # output i predicts position i + 1, whose left neighbour is token i
            left_is_mask = tokens == self.tok.mask_id
        h = torch.stack([(positions + shift).float(), left_is_mask.float()], -1)  # [B, S, 2]
        return h, KVCache([], [], key_mask)

    def head_weight(self):
        return None

    def logits(self, h):
        V = self.config.vocab_size
        flat = h.reshape(-1, h.shape[-1])
        out = torch.full((flat.shape[0], V), -1e4)
        for s in range(flat.shape[0]):
            q, left_mask = int(flat[s, 0]), bool(flat[s, 1])
            target = self.table.get(q, self.tok.filler_id)
            p = self.p_hi if (q in self.easy or not left_mask) else self.p_lo
            rest = (1 - p) / (V - 1)
            out[s] = torch.log(torch.tensor(rest))
            out[s, target] = torch.log(torch.tensor(p))
            if q in self.rival:  # a rival token more likely than the target
                out[s, self.rival[q]] = torch.log(torch.tensor(min(0.98, p + 0.3)))
        return out.reshape(*h.shape[:-1], V)


@pytest.fixture
def oracle():
    return OracleModel


# ---- a real LSP client against the real server process (pytest-lsp), shared by the e2e tests ----

LSP_TIMEOUT = 60  # seconds: only reached when a test is failing


async def within(awaitable, timeout: float = LSP_TIMEOUT):
    import asyncio

    return await asyncio.wait_for(awaitable, timeout)


async def start_server(model, socket, caps, options, env: dict | None = None):
    """A pytest-lsp client over `diffusion-lsp serve --model MODEL [--worker-socket SOCKET]`, initialized."""
    import sys

    from lsprotocol import types
    from pytest_lsp import ClientServerConfig

    command = [sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(model)]
    command += [] if socket is None else ["--worker-socket", str(socket)]
    client = await ClientServerConfig(server_command=command, server_env=env).start()
    client.init_result = await within(client.initialize_session(
        types.InitializeParams(capabilities=caps, initialization_options=options)))
    return client


async def stop_server(client) -> None:
    await within(client.shutdown_session())
    await client.stop()


async def loads_ended(client, n: int) -> None:
    """Wait for the n-th model load to end ($/progress end)."""
    from lsprotocol import types

    def ended():
        return sum(isinstance(v, types.WorkDoneProgressEnd) for vs in client.progress_reports.values() for v in vs)
    while ended() < n:
        await within(client.wait_for_notification(types.PROGRESS))


def open_doc(client, uri: str, text: str, language: str = "python") -> None:
    from lsprotocol import types

    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)))


def completion_params(uri: str, line: int, character: int):
    from lsprotocol import types

    return types.InlineCompletionParams(
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character))


async def complete(client, uri: str, line: int, character: int) -> list:
    from lsprotocol import types

    result = await within(client.text_document_inline_completion_async(completion_params(uri, line, character)))
    return list(result.items) if isinstance(result, types.InlineCompletionList) else list(result or [])


class RecordingUi:
    """The session's Ui (server/link.py) without LSP: what was shown, logged and reported as progress."""

    def __init__(self):
        self.shown, self.logged = [], []

    def show(self, kind, message):
        self.shown.append((kind, message))

    def log(self, kind, message):
        self.logged.append((kind, message))

    async def progress_begin(self, title, message):
        return "token"

    def progress_end(self, token, message):
        self.logged.append(("progress", message))


class Hung(BaseException):
    """Not an OSError (TimeoutError is one, and a command's `except OSError` would take it for a refusal)."""


@pytest.fixture
def no_hang():
    """A read or a write that blocks (a FIFO with no other end) fails the test after 20 s instead of
    hanging it."""
    def hung(*_):
        raise Hung("blocked: the command waited on a FIFO")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
