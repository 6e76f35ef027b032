"""The GPU tier: what must hold on CUDA, against CPU fp32 references. Skipped without CUDA, which is
every ordinary run: conftest.py hides the GPU from the rest of the suite, so this tier is its own run,
`DIFFUSION_LSP_TEST_GPU=1 python -m pytest -q tests/test_gpu.py` (the kernels then compile instead
of running in Triton's interpreter).

- the kernels, compiled, against their references (the shapes and tolerances of test_kernels.py);
- fills on CUDA: fp32 the same as on the CPU, bf16 within rounding of the CPU's fp32 pass;
- the context cache on CUDA: a cached step equals the full pass when nothing changed;
- the worker process on `--device cuda`, end to end over its socket."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
import torch

from diffusion_lsp.kernels import vocab_stats
from diffusion_lsp.kernels.vocab_stats import Constraint
from test_kernels import SHAPES, _clear_top, _inputs, compare_linear_ce

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (the GPU tier: DIFFUSION_LSP_TEST_GPU=1 pytest tests/test_gpu.py)")

REQUESTS = [("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", 12, False),
            ("import os\nimport sys\n\n\ndef main(argv):\n    path = os.path.join(", ")\n    return path\n", 16, False),
            ("for i in range(10):\n    total = ", "\nprint(total)\n", 8, True)]


def _cuda(c: Constraint) -> Constraint:
    return Constraint(c.banned, c.filler_id, c.no_filler.cuda(), c.allow.cuda(), c.allow_row.cuda())


# and the 7B head itself, and Qwen2.5-0.5B's (151,936 rows at dim 896) with a one-line step's positions
@pytest.mark.parametrize("M,V,D", SHAPES + [(512, 152064, 3584), (16, 151936, 896)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_stats_kernel_on_cuda(M, V, D, dtype):
    h, w, c, target = _inputs(M, V, D, dtype)
    exact = vocab_stats.reference(h.float(), w.float(), c, True, target)  # CPU, fp32 sums of the same values
    got = vocab_stats.launch(h.cuda(), w.cuda(), _cuda(c), True, target.cuda())
    tol = 1e-5 if dtype == torch.float32 else 1e-4
    torch.testing.assert_close(got.conf.cpu(), exact.conf, atol=tol, rtol=tol)
    torch.testing.assert_close(got.target_prob.cpu(), exact.target_prob, atol=tol, rtol=tol)
    torch.testing.assert_close(got.entropy.cpu(), exact.entropy, atol=10 * tol, rtol=tol)
    clear = _clear_top(h, w, c)
    assert torch.equal(got.pred.cpu()[clear], exact.pred[clear])


@pytest.mark.parametrize("M,V,D,dtype,tol", [(300, 1001, 64, torch.float32, 1e-4), (4096, 152064, 3584, torch.bfloat16, 3e-2)])
def test_fused_linear_cross_entropy_on_cuda(M, V, D, dtype, tol):
    compare_linear_ce(M, V, D, dtype, tol, device="cuda", weight_scale=0.02)


def _engine(device: str, precision: str):
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.protocol.settings import LaunchSettings

    return load_engine(LaunchSettings(device=device, precision=precision))


def _requests():
    from diffusion_lsp.model.decoding.canvas import CanvasRequest

    return [CanvasRequest(p, s, n, id=i, one_line=one) for i, (p, s, n, one) in enumerate(REQUESTS)]


def test_fp32_fills_on_cuda_are_the_cpus_and_bf16_stays_close():
    from diffusion_lsp.protocol.settings import SamplerConfig

    cpu, cuda32, cuda16 = _engine("cpu", "fp32"), _engine("cuda", "fp32"), _engine("cuda", "bf16")
    assert next(cuda16.model.parameters()).dtype == torch.bfloat16
    for cfg in (SamplerConfig(), SamplerConfig(policy="one")):
        want = [(r.text, r.forwards) for r in cpu.fill(_requests(), cfg)]
        assert [(r.text, r.forwards) for r in cuda32.fill(_requests(), cfg)] == want
        assert all(r.text for r in cuda16.fill(_requests(), cfg))
    # bf16 against the CPU's fp32, one full pass: hidden states within bf16 rounding, greedy ids mostly the same
    ids = torch.tensor([cpu.tokenizer.encode(REQUESTS[1][0] + REQUESTS[1][1])])
    with torch.inference_mode():
        h_cpu, _ = cpu.model.hidden(ids, torch.arange(ids.shape[1])[None], torch.ones_like(ids, dtype=torch.bool))
        h_16, _ = cuda16.model.hidden(ids.cuda(), torch.arange(ids.shape[1], device="cuda")[None],
                                      torch.ones_like(ids, dtype=torch.bool, device="cuda"))
        rel = (h_16.float().cpu() - h_cpu).norm() / h_cpu.norm()
        same = (cpu.model.logits(h_cpu).argmax(-1) == cuda16.model.logits(h_16).float().argmax(-1).cpu()).float().mean()
    assert rel < 3e-2 and same > 0.9, (rel, same)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
@torch.inference_mode()
def test_a_cached_step_equals_the_full_pass_on_cuda(tokenizer, dtype, tol):
    from diffusion_lsp.model.decoding.canvas import build_row
    from diffusion_lsp.model.network.config import ModelConfig
    from diffusion_lsp.model.decoding.batch import Batch
    from diffusion_lsp.protocol.settings import SamplerConfig
    from diffusion_lsp.model.network.transformer import DiffusionTransformer
    from test_sampler_cache import REQUESTS as CACHE_REQUESTS, step

    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, shift_logits=True))
    model = model.to("cuda", dtype).eval()
    rows = [build_row(r, tokenizer, 512, heal=False) for r in CACHE_REQUESTS]
    batch = Batch.build(rows, [False, False], tokenizer, model.config.vocab_size, 1, "cuda")
    cfg = SamplerConfig(block_size=4)
    _, _, full = step(model, batch, cfg, 0)
    _, _, cached = step(model, batch, cfg, 1)
    torch.testing.assert_close(cached.float(), full.float(), atol=tol, rtol=tol)


@pytest.mark.slow
def test_the_worker_fills_on_cuda_over_its_socket(tmp_path):
    from diffusion_lsp.protocol.requests import FillRequest
    from diffusion_lsp.protocol.settings import LaunchSettings
    from diffusion_lsp.worker.client import WorkerClient
    from diffusion_lsp.worker.spec import WorkerSpec

    spec = WorkerSpec(socket=tmp_path / "w.sock", model=LaunchSettings(device="cuda"))
    log = open(tmp_path / "worker.log", "wb")
    proc = subprocess.Popen(spec.command(), stdout=subprocess.PIPE, stderr=log,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")})
    try:
        assert proc.stdout.readline().decode().startswith("ready")

        async def go():
            client = WorkerClient(spec)
            await client.start()
            await asyncio.wait_for(client.settled(), 120)
            assert client.state == "ready"
            orders = [FillRequest(p, s, n, one_line=one) for p, s, n, one in REQUESTS]
            return [await client.ask(f"doc{i}.py", o) for i, o in enumerate(orders)]  # one at a time

        answers = asyncio.run(go())
        from diffusion_lsp.protocol.settings import SamplerConfig

        here = _engine("cuda", "auto")  # what the worker loaded (bf16 for our own format on a bf16 GPU)
        want = [here.fill([r], SamplerConfig())[0] for r in _requests()]
        assert [(a.text, a.forwards) for a in answers] == [(w.text, w.forwards) for w in want]
    finally:
        proc.kill()
        proc.wait()
        log.close()
