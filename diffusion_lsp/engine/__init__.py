"""Loading a checkpoint and running fills: the one entry point the worker process, the in-process
backend (backend/local.py) and the model benchmarks use. loading.py loads an engine (device, dtype,
checkpoint); answering.py's `Engine` answers fills, probes, rewrites and edits from an instruction;
structured.py its structured answers (JSON, tool calls); batch.py a batch of fill orders for the worker.
Import-light: the language server imports `model_folder`, and torch comes with the model."""

from .answering import Engine, NativeEngine
from .batch import FillBatch
from .loading import DEFAULT_MODEL, load_engine, model_folder, pick_device
from .structured import MAX_PARALLEL_CALLS

__all__ = ["DEFAULT_MODEL", "MAX_PARALLEL_CALLS", "Engine", "NativeEngine", "FillBatch", "load_engine",
           "model_folder", "pick_device"]
