"""The background indexer: debounced, built in a child process, never on the request path."""

from __future__ import annotations

import asyncio

from diffusion_lsp.context.index import INDEXES, indexed
from diffusion_lsp.context.types import Document
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
