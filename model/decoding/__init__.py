"""Decoding: the canvas of mask tokens denoised step by step. What every decoding is and the loop that
drives one (`drive.py`); our models' batched sampler (`sampler.py`: rows from `canvas.py`, the batch
in `batch.py`, one step in `denoise.py` choosing positions by `policies.py`, read back in `readout.py` and
`results.py`); context reuse across fills (`reuse.py`); drafts verified (`verify.py`) by probing tokens
(`probe.py`); an order's stop flag (`stop.py`).

Imports: network/ and chat/ of model/, kernels/, protocol/."""
