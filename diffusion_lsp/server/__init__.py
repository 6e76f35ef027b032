"""The language server (`diffusion-lsp serve`). One request, top to bottom:

    server.py      pygls handlers: LSP types in and out, nothing else
    completion.py  Completer: (document, position) -> answer (text, replace range)
      lifecycle.py the request's ticket: superseded, debounced, raced with what ends it early
      context/     gather (prefix, suffix, span kind, cross-file) and postprocess, in a thread
      backend/     the Backend: FillRequest in, Fill out, BackendError for every failure
        worker/link.py    WorkerLink: the worker's life cycle, a deadline on every order
        worker/client.py  WorkerClient: the socket to the worker (worker/wire.py frames it)
      worker/process.py   the worker process: batches fills for the engine (worker/listener.py: its socket side)
    next_edit.py   NextEditor: the same, for a next edit (nextedit/suggest.py's pipeline)

Around it: session.py (settings, statistics, the parts above), config.py (editor settings),
indexer.py (other documents indexed in the background), cache.py,
stats.py, positions.py (LSP positions <-> offsets), failures.py (a backend failure as a log line),
command.py (`serve`)."""
