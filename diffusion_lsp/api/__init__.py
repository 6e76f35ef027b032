"""`diffusion-lsp serve-api`: the engine as an OpenAI/Mercury-compatible HTTP API (app.py), the
requests it takes (bodies.py), what it does with them (service.py) and its metrics (metrics.py)."""
