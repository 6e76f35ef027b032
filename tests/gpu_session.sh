#!/usr/bin/env bash
# The GPU session's prepared script, run on the lent GPU machine (the device tool's `run`, which
# copies the working tree there and sets $OUT). Two parts, each well inside one call's 10 minutes,
# so that the 15 minutes a session is lent leave room for one rerun:
#
#   bash tests/gpu_session.sh check            # ~5 min: the GPU test tier, then `bench gpu`
#   bash tests/gpu_session.sh train [MINUTES]  # MINUTES + ~1 min: `train-recipe` on the token pack
#
# `train` needs the token pack in the tree (gpu-pack/ is git-ignored: name it in the call's `carry`):
#   diffusion-lsp data build --out /tmp/corpus && \
#   diffusion-lsp data pack --corpus /tmp/corpus --out gpu-pack/corpus.tar.xz   # ~5 min here, ~25 MiB
#   then run with carry=["gpu-pack"]
# What comes back ($OUT, at most 8 files of 16 MiB): logs, the figures as JSON, and the trained
# checkpoint in bf16 split into parts (join: cat model.safetensors.part* > model.safetensors).
# The machine has torch, triton, numpy, tokenizers, safetensors, tqdm and httpx (KINDS.md), which is
# all these parts import; the package itself goes in without its dependencies.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-session-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || {
  echo "install failed:"; tail -20 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"

case "${1:-check}" in
  check)
    DIFFUSION_LSP_TEST_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 \
      | tee "$OUT/gpu_tier.log" | tail -25
    timeout 300 python3 -m diffusion_lsp bench gpu --json "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.log"
    ;;
  train)
    minutes=${2:-6}
    if [ ! -f gpu-pack/corpus.tar.xz ]; then
      echo "no gpu-pack/corpus.tar.xz in the tree: build it here first and carry it (see the top of this script)"
      exit 2
    fi
    timeout $(( minutes * 60 + 120 )) python3 -m diffusion_lsp train-recipe --pack gpu-pack/corpus.tar.xz \
      --out /tmp/recipe --minutes "$minutes" --split-mb 15 2>&1 | tr '\r' '\n' | grep -v '^ *$' \
      | tail -200 >"$OUT/recipe.log"
    tail -15 "$OUT/recipe.log"
    cp /tmp/recipe/recipe.json /tmp/recipe/model/config.json /tmp/recipe/model/model.safetensors.part* "$OUT/" 2>/dev/null
    ls -la "$OUT"
    ;;
  *) echo "usage: bash tests/gpu_session.sh check | train [MINUTES]"; exit 2 ;;
esac
