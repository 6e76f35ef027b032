"""The background indexer: debounced, built in a child process, never on the request path."""

from __future__ import annotations

import pytest
import asyncio

from diffusion_lsp.context.index import INDEXES, indexed
from diffusion_lsp.context.records import Document
from diffusion_lsp.context.cutting import MemoCounter
from diffusion_lsp.server.indexer import Indexer
from diffusion_lsp.engine import model_folder
from diffusion_lsp.server.session import counter_for

SOURCE = "import os\n\n\ndef helper_defined_here(path):\n    return os.path.basename(path)\n"


def test_a_burst_of_edits_is_indexed_once_with_the_latest_text():
    docs, built = {"file:///a.py": Document("file:///a.py", SOURCE, "python", 1)}, []

    async def go():
        indexer = Indexer(docs.get, run=lambda fn, doc: built.append(doc.version), debounce_s=0.05)
        for version in range(2, 6):  # typing: each edit reschedules
            docs["file:///a.py"] = Document("file:///a.py", SOURCE + "#" * version, "python", version)
            indexer.schedule("file:///a.py")
        indexer.schedule("file:///closed.py")  # closed before its turn: nothing to do
        await indexer.idle()
        indexer.close()

    asyncio.run(go())
    assert built == [5]


@pytest.mark.slow
def test_the_index_and_token_counts_are_made_in_a_child_process_and_looked_up_without_parsing():
    doc = Document("file:///child.py", SOURCE, "python", 7)
    memo = MemoCounter(len)  # a different count than the tokenizer's: shows where the counts came from

    async def go():
        indexer = Indexer({doc.uri: doc}.get)
        assert indexed(doc) is None  # the request path never builds one
        indexer.schedule(doc.uri, counts=(memo, model_folder(None)), now=True)
        await indexer.idle()
        child = indexer.run
        indexer.close()
        return child

    child = asyncio.run(go())
    assert child.pool is not None and child.failures == 0  # it ran in the child, which did not die
    assert INDEXES.is_current(doc) and "helper_defined_here" in indexed(doc).defs
    line = "def helper_defined_here(path):\n"
    assert memo.memo[line] == counter_for(None)(line) != len(line) and memo.missing(SOURCE) == []


@pytest.mark.slow
def test_the_indexing_child_and_the_resource_tracker_die_with_a_killed_server():
    """After `kill -9` of the server its indexing child (and with it multiprocessing's resource
    tracker, which waits for both to close its pipe) lived on: pairs from killed sessions were still
    running 30 minutes later."""
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    code = ("import os, sys\n"
            "from diffusion_lsp.server.indexer import ChildProcess\n"
            "run = ChildProcess()\n"
            "print(run(os.getpid), flush=True)\n"
            "sys.stdin.read()\n")
    server = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(server.stdout.readline())
    family = [int(p) for p in subprocess.run(["ps", "-o", "pid=", "--ppid", str(server.pid)], capture_output=True,
                                             text=True).stdout.split()]
    assert child in family and len(family) == 2  # the indexing child and the resource tracker
    ends = {os.pidfd_open(p): p for p in family}  # each readable once its process has ended
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    deadline = time.monotonic() + 10  # the child looks for its parent every 0.5 s
    while ends and (left := deadline - time.monotonic()) > 0:
        for fd in select.select(list(ends), [], [], left)[0]:
            ends.pop(fd)
            os.close(fd)
    assert not [p for p in ends.values() if _alive(p)]
    for fd in ends:
        os.close(fd)


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
