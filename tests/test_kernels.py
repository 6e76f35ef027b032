"""Each Triton kernel against its PyTorch reference, on irregular shapes (odd vocabulary and width,
one position, thousands), in fp32 and bf16. Here the kernels run on CPU tensors in Triton's
interpreter (conftest.py sets TRITON_INTERPRET=1); tests/test_gpu.py runs the same comparisons
compiled on CUDA. Tolerances, per dtype:
- fp32: the kernel and the reference do the same sums in another order: 1e-5 on probabilities.
- bf16: the kernel accumulates h @ W^T in fp32 where F.linear rounds each logit to bf16, so it is
  compared with the reference on the same bf16 values in fp32 (1e-4), and with the bf16 reference
  within the rounding of a logit (a relative 2e-2 on probabilities).
The greedy id must match wherever the reference's best two logits are further apart than 1e-3."""

from __future__ import annotations

import pytest
import torch

from diffusion_lsp.kernels import dispatch, linear_ce, vocab_stats
from diffusion_lsp.kernels.vocab_stats import Constraint
from diffusion_lsp.model.network.config import ModelConfig

pytestmark = pytest.mark.skipif(not dispatch.triton_importable(), reason="triton is not installed (pip install triton)")

SHAPES = [(1, 257, 40), (37, 1001, 64), (2000, 130, 24)]  # (positions, vocabulary, width)


def _inputs(M, V, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(M, D, generator=g).to(dtype)
    w = (torch.randn(V, D, generator=g) * 0.5).to(dtype)
    allow = torch.rand(3, V, generator=g) < 0.2
    allow[:, 7] = True  # every table allows something
    c = Constraint(banned=(0, 3, V - 1), filler_id=5, no_filler=torch.rand(M, generator=g) < 0.5,
                   allow=allow, allow_row=torch.randint(-1, 3, (M,), generator=g))
    return h, w, c, torch.randint(0, V, (M,), generator=g)


def _clear_top(h, w, c):
    """Positions whose best two allowed logits (fp32) are further apart than 1e-3."""
    logits = vocab_stats.constrain(torch.nn.functional.linear(h.float(), w.float()), c)
    top2 = logits.topk(2, -1).values
    return (top2[:, 0] - top2[:, 1]) > 1e-3


@pytest.mark.parametrize("M,V,D", SHAPES)
@pytest.mark.parametrize("entropy", [False, True])
def test_head_stats_kernel_matches_the_reference_in_fp32(M, V, D, entropy):
    h, w, c, target = _inputs(M, V, D, torch.float32)
    want = vocab_stats.reference(h, w, c, entropy, target)
    got = vocab_stats.launch(h, w, c, entropy, target)
    clear = _clear_top(h, w, c)
    assert clear.float().mean() > 0.9  # the comparison below is not vacuous
    assert torch.equal(got.pred[clear], want.pred[clear])
    torch.testing.assert_close(got.conf, want.conf, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.target_prob, want.target_prob, atol=1e-5, rtol=1e-5)
    if entropy:
        torch.testing.assert_close(got.entropy, want.entropy, atol=1e-4, rtol=1e-5)
    else:
        assert got.entropy is None and want.entropy is None


@pytest.mark.parametrize("M,V,D", SHAPES[:2])
def test_head_stats_kernel_in_bf16(M, V, D):
    h, w, c, target = _inputs(M, V, D, torch.bfloat16)
    got = vocab_stats.launch(h, w, c, True, target)
    exact = vocab_stats.reference(h.float(), w.float(), c, True, target)  # the same bf16 values, fp32 sums
    torch.testing.assert_close(got.conf, exact.conf, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.entropy, exact.entropy, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(got.target_prob, exact.target_prob, atol=1e-4, rtol=1e-4)
    clear = _clear_top(h, w, c)
    assert torch.equal(got.pred[clear], exact.pred[clear])
    rounded = vocab_stats.reference(h, w, c, True, target)  # logits rounded to bf16 by F.linear
    torch.testing.assert_close(got.conf, rounded.conf, atol=2e-2, rtol=2e-2)


@pytest.mark.slow  # about 25 s: the interpreter walks 1,187 vocabulary tiles per dtype
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_stats_kernel_at_the_real_qwen_vocabulary(dtype):
    """The whole 151,936-row head of the Qwen2 tokenizer (preset qwen2.5-0.5b), a small width and three
    positions: each vocabulary slice's partials are combined across the width real checkpoints have,
    with the tolerances above (bf16: against the reference on the same bf16 values in fp32)."""
    V = ModelConfig.preset("qwen2.5-0.5b").vocab_size
    assert V == 151936
    h, w, c, target = _inputs(3, V, 16, dtype)
    got = vocab_stats.launch(h, w, c, True, target)
    want = vocab_stats.reference(h.float(), w.float(), c, True, target)
    tol, entropy_tol = (1e-5, 1e-4) if dtype == torch.float32 else (1e-4, 1e-3)
    torch.testing.assert_close(got.conf, want.conf, atol=tol, rtol=tol)
    torch.testing.assert_close(got.target_prob, want.target_prob, atol=tol, rtol=tol)
    torch.testing.assert_close(got.entropy, want.entropy, atol=entropy_tol, rtol=tol)
    clear = _clear_top(h, w, c)
    assert clear.all() and torch.equal(got.pred, want.pred)
    assert (want.pred >= V // 3).all()  # each winner is past the first of the interpreter's 3 slices
    if dtype == torch.bfloat16:
        rounded = vocab_stats.reference(h, w, c, True, target)  # logits rounded to bf16 by F.linear
        torch.testing.assert_close(got.conf, rounded.conf, atol=2e-2, rtol=2e-2)


def test_head_stats_without_a_constraint_and_without_positions():
    h, w, _, _ = _inputs(20, 300, 16, torch.float32)
    want, got = vocab_stats.reference(h, w, Constraint()), vocab_stats.launch(h, w, Constraint())
    assert torch.equal(got.pred, want.pred) and got.target_prob is None
    torch.testing.assert_close(got.conf, want.conf, atol=1e-5, rtol=1e-5)
    empty = vocab_stats.launch(h[:0], w, Constraint())
    assert empty.pred.shape == (0,) and empty.conf.shape == (0,)


def test_head_stats_refuses_inputs_that_do_not_multiply():
    h, w, _, _ = _inputs(4, 50, 16, torch.float32)
    with pytest.raises(ValueError, match="do not multiply"):
        vocab_stats.launch(h[:, :8], w, Constraint())
    with pytest.raises(ValueError, match="bfloat16"):
        vocab_stats.launch(h.bfloat16(), w, Constraint())


def compare_linear_ce(M, V, D, dtype, tol, device="cpu", weight_scale=0.3):
    """The fused loss against the reference, forward and backward (an incoming gradient of 3, not 1),
    on `device`: the loss within tol, each gradient within tol of its largest entry."""
    g = torch.Generator().manual_seed(1)
    h0, w0 = torch.randn(M, D, generator=g).to(dtype), (torch.randn(V, D, generator=g) * weight_scale).to(dtype)
    targets, weights = torch.randint(0, V, (M,), generator=g), 1 / torch.rand(M, generator=g).clamp(min=0.05)
    runs = []
    for fn in (linear_ce.reference, linear_ce.launch):
        h, w = h0.to(device).clone().requires_grad_(), w0.to(device).clone().requires_grad_()
        loss = fn(h, w, targets.to(device), weights.to(device), M + 5)
        (loss * 3.0).backward()
        runs.append((loss.detach().float(), h.grad.float(), w.grad.float()))
    (want_loss, want_h, want_w), (loss, grad_h, grad_w) = runs
    torch.testing.assert_close(loss, want_loss, atol=tol, rtol=tol)
    for got, want in ((grad_h, want_h), (grad_w, want_w)):
        assert (got - want).abs().max() <= tol * want.abs().max()


@pytest.mark.parametrize("M,V,D,dtype,tol", [(1, 257, 40, torch.float32, 1e-5), (300, 1001, 64, torch.float32, 1e-5),
                                             (77, 3001, 24, torch.bfloat16, 2e-2)])
def test_fused_linear_cross_entropy_matches_the_reference_forward_and_backward(M, V, D, dtype, tol, monkeypatch):
    monkeypatch.setattr(linear_ce, "CHUNK_ELEMS", 40_000)  # several chunks, and a last one shorter
    compare_linear_ce(M, V, D, dtype, tol)


def test_fused_cross_entropy_with_the_weight_frozen():
    g = torch.Generator().manual_seed(2)
    h, w = torch.randn(9, 16, generator=g, requires_grad=True), torch.randn(70, 16, generator=g)
    targets, weights = torch.randint(0, 70, (9,), generator=g), torch.ones(9)
    linear_ce.launch(h, w, targets, weights, 9).backward()
    got = h.grad.clone()
    h.grad = None
    linear_ce.reference(h, w, targets, weights, 9).backward()
    torch.testing.assert_close(got, h.grad, atol=1e-6, rtol=1e-5)


def test_dispatch_runs_the_reference_on_cpu_unless_told(monkeypatch):
    t = torch.zeros(1)
    assert dispatch.choice(t) == "torch"  # auto: Triton only for CUDA tensors
    with dispatch.override("triton"):
        assert dispatch.choice(t) == "triton"  # under the interpreter
        with dispatch.override("torch"):
            assert dispatch.choice(t) == "torch"
    monkeypatch.setenv("DIFFUSION_LSP_KERNELS", "triton")
    assert dispatch.choice(t) == "triton"
    monkeypatch.setenv("DIFFUSION_LSP_KERNELS", "fast")
    with pytest.raises(ValueError, match="DIFFUSION_LSP_KERNELS='fast'"):
        dispatch.choice(t)
    monkeypatch.delenv("DIFFUSION_LSP_KERNELS")
    monkeypatch.delenv("TRITON_INTERPRET")
    with dispatch.override("triton"), pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        dispatch.choice(t)


@pytest.mark.slow  # the embedded model under the interpreter: about 40 s
def test_fills_probes_and_a_training_loss_are_the_same_through_the_kernels():
    """The sampler, the probe and the trainer call the dispatch points: forcing the kernels changes
    no fill of the embedded model, and the probe's and the loss's numbers only within fp32 rounding.
    (The embedded model, not a random one: a random model's predictions are near ties everywhere,
    and which of two ties wins is fp32 rounding, even between two runs of the reference with other
    thread counts.)"""
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.model.decoding.canvas import CanvasRequest
    from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig
    from diffusion_lsp.train.loop import MaskedDiffusionLoss

    engine = load_engine(LaunchSettings(precision="fp32"))
    reqs = [CanvasRequest("def add(a, b):\n    ", "\n\nprint(add(1, 2))\n", 12, id=0),
            CanvasRequest("import os\nx = ", "\n", 8, id=1, one_line=True)]
    cfgs = [SamplerConfig(), SamplerConfig(policy="eb", block_size=4)]
    runs = {}
    for name in ("torch", "triton"):
        with dispatch.override(name):
            fills = [[(r.text, r.forwards) for r in engine.fill(reqs, cfg)] for cfg in cfgs]
            probe = engine.probe("def f(x):\n    return ", "x + 1", "\n", stride=2)
            torch.manual_seed(0)
            loss_fn = MaskedDiffusionLoss(engine.model)
            inputs = torch.randint(0, engine.model.config.vocab_size, (2, 40))
            masked = torch.rand(2, 40) < 0.4
            loss = loss_fn(inputs, inputs, torch.ones(2, 40, dtype=torch.bool), masked, torch.full((2,), 0.4),
                           int(masked.sum()))
            runs[name] = fills, probe, loss.item()
    (fills, probe, loss), (k_fills, k_probe, k_loss) = runs["torch"], runs["triton"]
    assert k_fills == fills
    torch.testing.assert_close(torch.tensor(k_probe.prob), torch.tensor(probe.prob), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.tensor(k_probe.best), torch.tensor(probe.best), atol=1e-5, rtol=1e-5)
    assert k_loss == pytest.approx(loss, rel=1e-5)
