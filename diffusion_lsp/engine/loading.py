"""Loading a checkpoint into an engine: the device (`pick_device`), the dtype its weights load in
(`_float_dtype`, `_stored_16bit`; int8 on a CPU that has the kernels) and the folder, our own format, a
Hugging Face folder (model/families/pretrained.py) or a family transformers runs (model/families/native.py), with its chat
template and its prompter. torch is imported on first use: the language server imports `model_folder`.
int8 is model/network/quantize.py's; ChatFormat model/chat/conversation.py's, Prompter model/chat/prompting.py's."""

from __future__ import annotations

from pathlib import Path

from ..cpus import default_threads
from ..model.network.config import adapter_base
from ..model.families.table import FAMILIES, NATIVE_INT8, is_native_folder
from ..protocol.settings import FLOAT_DTYPES, LaunchSettings
from .answering import Engine, NativeEngine

DEFAULT_MODEL = Path(__file__).parent.parent / "checkpoints" / "default"


def model_folder(path: str | Path | None) -> Path:
    """The checkpoint folder a `model.path` / `--model` names: the embedded model when none."""
    return Path(path) if path else DEFAULT_MODEL


def pick_device(name: str = "auto") -> str:
    """The device `name` asks for; ValueError when this machine has no such device (a CUDA or MPS
    device asked for where torch has none gave a traceback from deep inside the loader)."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        index = int(name.partition(":")[2] or 0)
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise ValueError(f"device {name}: this machine has {have} CUDA device{'s' * (have != 1)} torch can use")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device mps: torch has no MPS device on this machine")
    return name


def _stored_16bit(folder: Path):
    """bfloat16 or float16 when every tensor of a Hugging Face folder is stored in it, else None."""
    import torch
    from safetensors import safe_open

    from ..model.families.pretrained import is_hf_folder, weight_files

    folder = adapter_base(folder) or folder  # low-rank adapters are merged into their base's weights
    if not is_hf_folder(folder):
        return None
    dtypes = set()
    for path in set(weight_files(folder).values()):  # headers only; raises CheckpointError as loading would
        with safe_open(str(path), framework="pt") as f:
            dtypes |= {f.get_slice(name).get_dtype() for name in f.keys()}
    return {"BF16": torch.bfloat16, "F16": torch.float16}.get(dtypes.pop()) if len(dtypes) == 1 else None


def _float_dtype(precision: str, device: str, folder: Path):
    """The dtype a float `precision` (not int8) loads weights in; None: the loader's own choice
    (float32 for our own format, a Hugging Face folder's torch_dtype off the CPU)."""
    import torch

    from ..model.families.pretrained import is_hf_folder

    if precision != "auto":
        return getattr(torch, FLOAT_DTYPES[precision])
    if not device.startswith("cuda") or is_hf_folder(adapter_base(folder) or folder):
        return None
    # our own format is stored in float32: on a GPU with native bf16 (compute capability 8.0+; older
    # ones only emulate it) bf16 halves the weight bytes each pass reads
    with torch.cuda.device(device):
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else None


def load_engine(launch: LaunchSettings = LaunchSettings()) -> Engine:
    """Load a checkpoint folder (default: the embedded model): our own format or a Hugging Face folder
    of a supported family. Raises CheckpointError when the folder is missing,
    corrupt or unsupported. precision "auto": int8 weights on a CPU that has the kernels
    (quantized after loading), else float32 on CPU; on a CUDA GPU bf16 for our own format (where the GPU has
    it) and the checkpoint's own for a Hugging Face folder (bf16 stays bf16); "fp32", "bf16", "fp16":
    that dtype for every format on every device; "int8" only on CPU."""
    import torch

    from ..model.families.checkpoint import CheckpointError
    from ..model.families.pretrained import load_folder

    path, precision = launch.path, launch.precision
    if precision == "int8" and launch.device not in ("auto", "cpu"):  # said before whether it exists
        raise ValueError(f"int8 weights are for CPU inference, not {launch.device}")
    device = pick_device(launch.device)
    if device == "cpu":
        torch.set_num_threads(launch.threads or default_threads(1))
    folder = model_folder(path)
    if path is None and not (folder / "config.json").exists():
        raise CheckpointError(f"the embedded default model is missing ({folder}); pass --model DIR")
    if precision == "int8" and device != "cpu":
        raise ValueError(f"int8 weights are for CPU inference, not {device}")
    if is_native_folder(folder):  # a family only transformers runs: its own dtypes, no int8
        from ..model.families.native_load import load_native

        if precision == "int8":
            raise ValueError(NATIVE_INT8)
        model, tokenizer, meta, prompter = load_native(
            folder, device, None if precision == "auto" else getattr(torch, FLOAT_DTYPES[precision]))
        return NativeEngine(model, tokenizer, meta, prompter=prompter,
                            chat_format=_chat_format(folder, tokenizer, launch.chat_template))
    from ..model.network.quantize import int8_available, quantize_int8

    int8 = precision == "int8" or (precision == "auto" and device == "cpu" and int8_available())
    # int8 from a bf16/fp16 folder: load it as stored and let quantize_int8 widen one matrix at a time,
    # so no float32 model ever exists. Peak RSS of an int8 load of a Qwen2.5-Coder-0.5B shaped folder
    # (`bench pretrained`): 3553 MB loading float32 then quantizing, 2230 MB this way (1331 MB of it
    # anonymous; the rest is the file's pages, mapped while any bf16 tensor of it lives).
    dtype = _stored_16bit(folder) if int8 else _float_dtype(precision, device, folder)
    model, tokenizer, meta = load_folder(folder, device, dtype)
    if int8:
        quantize_int8(model)
    return Engine(model, tokenizer, meta, prompter=_prompter(folder, meta, tokenizer),
                  chat_format=_chat_format(folder, tokenizer, launch.chat_template))


def _chat_format(folder: Path, tokenizer, given: str | None):
    """The ChatFormat: the template given at launch, else the checkpoint's (an adapter's is its
    base model's); None without either. CheckpointError when a template cannot be read."""
    from ..model.families.checkpoint import CheckpointError
    from ..model.chat.conversation import chat_format

    try:
        return chat_format(tokenizer, folder, given)
    except ValueError as e:
        raise CheckpointError(f"chat template: {e}") from None


def _prompter(folder: Path, meta: dict, tokenizer):
    """A prefix-only family's Prompter (an adapter's is its base model's); None
    for an infill one and for our own format. CheckpointError when the folder lacks what it needs."""
    from ..model.families.checkpoint import CheckpointError
    from ..model.chat.prompting import prompter_for

    try:
        return prompter_for(FAMILIES.get(meta.get("family")), tokenizer, adapter_base(folder) or folder)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
