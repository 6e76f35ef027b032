"""Structured output: a JSON Schema compiled to a layout of nodes (`jsonschema.py`, with JSON Schema's
keywords in `keywords.py` and the nodes, their budget and narrowing in `nodes.py`; all three torch-free)
and decoded on the canvas under each position's allowed tokens (`constrained.py`).

Imports: decoding/ and network/ of model/ (not families/, beside it), the package's bottom layers."""
