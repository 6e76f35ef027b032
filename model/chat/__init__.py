"""How a model is asked: a fill put to a prefix-only model as a prompt (`prompting.py`, its text in
`prompts/`), a conversation in a checkpoint's chat template (`conversation.py`), rendered in a bounded
sandbox (`sandbox.py`, its budgets in `template_bounds.py`).

Imports: network/ of model/ only, and the package's bottom layers."""
