"""The network and its weights: the model's configuration (`config.py`: one dataclass, its bounds, and the
guarded reads of a checkpoint's small files), the bidirectional transformer (`transformer.py`), int8
weights for the CPU (`quantize.py`), and the tokenizer the network reads and writes (`tokenizer.py`,
`text.py`).

Imports: nothing else of model/; of the package only its bottom layers (input_files.py)."""
