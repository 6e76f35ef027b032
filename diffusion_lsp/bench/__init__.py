"""`diffusion-lsp bench`: benchmarks that print figures side by side and assert nothing.

    bench sampler   forward passes and ms per span of the sampler alone (sampler.py)
    bench lsp       inline-completion latency through the real server over stdio (lsp.py)
    bench retype    what a user is shown: lines of a folder retyped through the real server (retype.py)
    bench renames   renames followed by accepting next edits alone, through the real server (renames.py)
    bench edits     next edits on replayed commits typed into the real server, beside eval edits (edits.py)
    bench pretrained  load time, peak RSS, fill time: a 0.5 B checkpoint vs the embedded model, fp32 vs int8
    bench structured  JSON answers with and without constraints: validity, forwards, tokens/s (structured.py)
    bench api       serve-api under load and faults: requests/s, tokens/s, latency, 429s, RSS (api.py)
    bench gpu       a Dream-7B shaped model and the embedded one on a CUDA GPU: fills per policy, continuous vs
                    static batching, the kernels vs their references, memory, goals; --dry-run on CPU (gpu.py)
    python -m diffusion_lsp.bench.context   the server's own context and post-processing work alone (context.py)"""

from __future__ import annotations

from . import api, edits, gpu, lsp, pretrained, renames, retype, sampler, structured


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks that print figures side by side")
    bench = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    sampler.register(bench)
    lsp.register(bench)
    retype.register(bench)
    renames.register(bench)
    edits.register(bench)
    pretrained.register(bench)
    api.register(bench)
    gpu.register(bench)
    structured.register(bench)
