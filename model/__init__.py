"""diffusion_lsp.model: the denoiser, its sampler and checkpoint loaders. Kept import-light (the
command line's --help must not import torch): `load_pretrained` is imported on first use."""


def __getattr__(name):
    if name == "load_pretrained":
        from .families.pretrained import load_pretrained

        return load_pretrained
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
