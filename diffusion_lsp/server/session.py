"""One editor session, without LSP types: its settings and statistics, and the parts that serve it,
each the one owner of its flow: the completer (a completion), the next editor, the backend (the
model worker, or with model.backend "openai" a remote FIM API: protocol/backend.py), the indexer
(background work on open documents) and the recent edits. The server adapts it to pygls
(server.py) and reports through a Reporter (protocol/backend.py).
Claims: model/families/claims.py; the workspace's model: workspace_model.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..protocol.backend import Reporter
from ..backend.factory import backend_for
from ..backend.remote import RemoteBackend
from ..context.cutting import memoized
from ..context.tokens import model_token_counter
from ..context.records import Document
from ..engine import model_folder
from ..model.families.claims import GENERAL, Claims, read_claims
from ..protocol.settings import LaunchSettings
from ..nextedit.history import EditLog
from ..worker.link import WorkerLink
from ..worker.spec import WorkerSpec
from .completion import Completer
from . import notice
from .config import Config, WorkerSettings, parse_config, with_claims
from .indexer import Indexer
from .next_edit import NextEditor
from .stats import Stats
from .workspace_model import RULES, ModelChoice, acceptance_for, changed, choose


@dataclass
class ServeOptions:
    """`diffusion-lsp serve` flags: the defaults the editor's settings override."""

    launch: LaunchSettings = LaunchSettings()
    worker_socket: str | None = None


def worker_spec(cfg: Config) -> WorkerSpec:
    """The worker the editor settings ask for (model.*, worker.*)."""
    return WorkerSpec.of(cfg.model, cfg.worker.socket, idle_exit_s=cfg.worker.idle_exit_s,
                         load_timeout_s=cfg.worker.load_timeout_s)


def configure_backend(backend: WorkerLink | RemoteBackend, cfg: Config) -> None:
    """New settings for the backend made for the same model.backend."""
    enabled, timeout = cfg.completion.enable, cfg.worker.fill_timeout_s
    if isinstance(backend, RemoteBackend):
        backend.configure(cfg.model, enabled, timeout)
    else:
        backend.configure(worker_spec(cfg), enabled, timeout)


def claims_for(launch: LaunchSettings) -> Claims:
    """What the model in use claims; an API's model claims nothing we can read."""
    return GENERAL if launch.backend == "openai" else read_claims(model_folder(launch.path))


def counter_for(model_path: str | None) -> Callable[[str], int]:
    """Token counts with the model's own tokenizer (no torch needed)."""
    return model_token_counter(model_folder(model_path))


class Session:
    def __init__(self, options: ServeOptions, ui: Reporter, get_document: Callable[[str], Document | None]):
        self.ui = ui
        self.base = Config(model=options.launch,
                           worker=WorkerSettings(socket=options.worker_socket))
        self.claims = claims_for(self.base.model)
        self.cfg = with_claims(self.base, self.claims)
        self._said_demo = False
        self.stats = Stats()
        self.edits = EditLog()  # the workspace's edits: completion's context and next edit's history
        self.backend = backend_for(self.cfg.model, ui, self.cfg.worker.fill_timeout_s, worker=worker_spec(self.cfg))
        self.completer = Completer(self.backend, self.stats, ui.log, self.edits.snippets,
                                   counter_for(self.cfg.model.path))
        self.next_edit = NextEditor(self.backend, self.stats.next_edit, ui.log, self.edits,
                                    self.completer.count_tokens, get_document)
        self.indexer = Indexer(get_document)
        self.texts: dict[str, str] = {}  # per open document, its text before the next change
        self.root: str | None = None  # the workspace folder (initialize's rootUri), where an adapted model is
        self.choice = ModelChoice(self.cfg.model.path, "settings" if self.cfg.model.path else "embedded")
        self._raw = None  # the editor's last settings
        self._said_model = False  # the log has said which model answers

    def configure(self, raw, quiet: bool = False) -> None:
        """Settings from the editor; each bad value is shown once and falls back to its default
        (`quiet`: the same settings again, nothing to show)."""
        self._raw = raw
        cfg, problems = parse_config(raw, self.base)
        for problem in problems if not quiet else ():
            self.ui.show("warning", f"diffusion-lsp settings: {problem}")
        cfg = self._choose_model(cfg)
        self.claims = claims_for(cfg.model)
        cfg = with_claims(cfg, self.claims)
        if self.claims.demo and not self._said_demo and not notice.already_said(notice.DEMO):
            self.ui.show("info", notice.demo_message(self.claims))
            self._said_demo = True  # also when the state cannot be written: once a session at most
            notice.remember(notice.DEMO)
        model_changed = cfg.model.path != self.cfg.model.path
        if cfg.model.backend != self.cfg.model.backend:  # another kind of backend; the old one closes
            old, self.backend = self.backend, backend_for(cfg.model, self.ui, cfg.worker.fill_timeout_s,
                                                            worker=worker_spec(cfg))
            self.completer.backend = self.next_edit.backend = self.backend
            asyncio.ensure_future(old.close())
        self.cfg = cfg
        configure_backend(self.backend, cfg)
        self.completer.configure(cfg, counter_for(cfg.model.path) if model_changed else None)
        self.next_edit.configure(cfg, self.completer.count_tokens)
        self._choose_acceptance()

    def _choose_acceptance(self) -> None:
        """The acceptance model that decides what is shown (workspace_model.acceptance_for), logged when
        the choice changes."""
        folder = None if self.choice.source == "remote" else model_folder(self.cfg.model.path)
        model, line = acceptance_for(self.choice, folder, self.root)
        if not self.cfg.completion.acceptance:
            model, line = None, "acceptance: off (completion.acceptance); shown by the rules: the model's fill, " \
                                "cut at completion.confidenceCut"
        self.completer.acceptance = model
        edits, edit_line = acceptance_for(self.choice, folder, self.root, "edit")
        if not self.cfg.next_edit.acceptance:
            edits, edit_line = None, "acceptance: off (nextEdit.acceptance); " + RULES["edit"]
        self.next_edit.acceptance = edits
        if line != self.stats.acceptance:
            self.ui.log("info", line)
            self.stats.acceptance = line
        if edit_line != self.stats.next_edit.acceptance:
            self.ui.log("info", edit_line)
            self.stats.next_edit.acceptance = edit_line

    def _choose_model(self, cfg: Config) -> Config:
        """`cfg` with the model that answers in this workspace; a new choice is
        logged, an adapted model refused is shown once."""
        choice = choose(cfg.model, self.root)
        if choice != self.choice or not self._said_model:  # the first settings say it too
            if choice.refused and choice.refused != self.choice.refused:
                self.ui.show("warning", f"diffusion-lsp: the adapted model cannot be used ({choice.refused}); "
                                        "using the base model. Run `diffusion-lsp adapt` again to remake it")
            if choice.untrusted:  # said once per folder and files, ever
                key = notice.untrusted_key(choice.untrusted, choice.stamp)
                if not notice.already_said(key):
                    self.ui.show("warning", notice.untrusted_message(choice.untrusted))
                    notice.remember(key)
            self.ui.log("info", f"model: {choice.describe()}")
            self.choice, self._said_model = choice, True
        return cfg if choice.path == cfg.model.path else replace(cfg, model=replace(cfg.model, path=choice.path))

    def opened(self, doc: Document) -> asyncio.Future:
        """A document was opened: it is the session's now (its next change is an edit of it); index
        it and count its tokens in the background, and start the model on demand, before the first
        completion (the future that does it is returned). A workspace model adapted meanwhile
        (`diffusion-lsp adapt`) is taken up here."""
        if changed(self.choice, self.root):
            self.configure(self._raw, quiet=True)
        self.texts[doc.uri] = doc.text
        counts = (memoized(self.completer.count_tokens), model_folder(self.cfg.model.path))
        self.indexer.schedule(doc.uri, counts=counts, now=True)
        return asyncio.ensure_future(self.backend.start())

    def changed(self, uri: str, text: str, path: str, span: tuple[int, int, int] | None) -> None:
        """`uri` changed to `text`; span: (first line, last line before, last line after) of one
        range change, None when not known (several changes, or the whole text replaced)."""
        before = self.texts.get(uri)
        self.texts[uri] = text
        line, end, new_end = span if span is not None else _changed_lines(before or "", text)
        if before is not None:  # one note, both views (completion's snippets, next edit's diffs)
            self.edits.note(uri, path, before, text, line, end, new_end)
        self.indexer.schedule(uri)

    def closed(self, uri: str) -> None:
        self.texts.pop(uri, None)
        self.next_edit.last.pop(uri, None)
        self.next_edit.following.pop(uri, None)

    def report(self) -> dict:
        c = self.cfg
        model = {"claims": self.claims.to_dict(), "languages": c.completion.languages,
                 "next_edits": c.next_edit.enable, "path": c.model.path, "source": self.choice.source,
                 "answers": self.choice.describe(), "adapted": self.choice.adapted,
                 "refused": self.choice.refused, "untrusted": self.choice.untrusted}
        report = self.stats.report(worker=self.backend.describe(), model=model)
        report["counts"].update(self.backend.counts)  # worker_crashes, fill_timeouts
        return report

    async def close(self) -> None:
        self.indexer.close()
        self.completer.close()
        self.next_edit.close()
        await self.backend.close()


CHUNK = 4096  # characters compared at a time: slices compare in C, a character loop would not


def _common_prefix(a: str, b: str) -> int:
    n, i = min(len(a), len(b)), 0
    while i < n and a[i:i + CHUNK] == b[i:i + CHUNK]:
        i += CHUNK
    i = min(i, n)
    while i < n and a[i] == b[i]:  # within the first chunk that differs
        i += 1
    return i


def _common_suffix(a: str, b: str, limit: int) -> int:
    """Length of the common end of a and b, at most `limit`."""
    i = 0
    while i < limit:
        j = min(i + CHUNK, limit)
        if a[len(a) - j:len(a) - i] != b[len(b) - j:len(b) - i]:
            break
        i = j
    while i < limit and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _changed_lines(before: str, after: str) -> tuple[int, int, int]:
    """(first line, last line in before, last line in after) of what differs: lines before `first`
    and after the last ones are the same in both texts. Found from the texts' common start and end,
    cut back to whole lines: a whole-document change (full sync) costs under a millisecond on a
    5,000-line file, against 10 ms for comparing line lists."""
    p = _common_prefix(before, after)
    p = before.rfind("\n", 0, p) + 1  # back to a line start
    q = _common_suffix(before, after, min(len(before), len(after)) - p)
    # the common end must start a line in both texts (at p, or after a line break in each)
    aligned = q > 0 and all(t[len(t) - q - 1] == "\n" for t in (before, after) if len(t) - q > p)
    if q and not aligned:  # keep it from its first whole line on
        nl = before.find("\n", len(before) - q)
        q, aligned = (len(before) - nl - 1, True) if nl >= 0 else (0, False)
    first = before.count("\n", 0, p)

    def last(text: str) -> int:  # aligned: the line before the common end is the last one changed
        return text.count("\n", 0, len(text) - q) - (1 if aligned else 0)
    last_before, last_after = last(before), last(after)
    grow = max(0, first - last_before, first - last_after)  # lines only added or only removed: take
    return first, last_before + grow, last_after + grow  # in the next common line on both sides
