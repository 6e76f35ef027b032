"""Training our masked-diffusion code models: objective (objective.py), data (data.py), loop (loop.py)."""
