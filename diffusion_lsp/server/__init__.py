"""The language server (`diffusion-lsp serve`): a thin pygls layer (server.py) over pure modules
(positions, config, cache, stats, guards, completion) and a model worker process (worker.py) that
one or more editor sessions reach over a local Unix socket (client.py)."""
