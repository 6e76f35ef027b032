"""The language server (`diffusion-lsp serve`). One request, top to bottom:

    server.py      pygls handlers: LSP types in and out, nothing else
    completion.py  Completer: (document, position) -> answer (text, replace range)
      context/     gather (prefix, suffix, span kind, cross-file) and postprocess, in a thread
      link.py      WorkerLink: the worker's life cycle, a deadline on every fill
      client.py    WorkerClient: the socket to the worker (wire.py: FillOrder in, Fill out)
    worker.py      the worker process: batches fills for the engine (listener.py: its socket side)

Around it: session.py (settings, statistics, the parts above), config.py (editor settings),
indexer.py (other documents indexed in the background), history.py (recent edits), cache.py,
stats.py, positions.py (LSP positions <-> offsets), command.py (`serve`)."""
