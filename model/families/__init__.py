"""Checkpoint families: what a folder on disk is and how it is loaded. Our own format (`checkpoint.py`,
`quick_check.py`, what it claims in `claims.py`, LoRA adapters in `lora.py`); Hugging Face folders
(`pretrained.py`, the family table `table.py` and its readers `family_configs.py`, `hf_tokenizer.py`,
and `reference.py`, transformers' forward that `model check` compares with); the decodings particular
to a family (DreamOn's variable length, `dreamon.py`; models transformers runs, `native.py`, loaded by
`native_load.py`).

Imports: network/, chat/ and decoding/ of model/ (not structured/, beside it), protocol/."""
