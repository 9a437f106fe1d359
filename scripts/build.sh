#!/usr/bin/env bash
# Installs the dependencies (skipping what is present) and builds trident into build/.
# PRESET=ci turns warnings into errors (what CI, scripts/test.sh and scripts/main-job.sh use, so
# they share one build); TARGET=trident builds only the executable.
# PRESET=cuda builds the CUDA flavour into build-cuda/: LibTorch 2.11 with CUDA from PyPI's torch
# wheel (scripts/fetch-cuda-libtorch.sh, cached outside the repository), the CUDA toolkit and
# NCCL in /usr/local/cuda, every target, warnings as errors. It compiles and links on a machine
# without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if [ "${PRESET:-default}" = cuda ] && [ -z "${TRIDENT_TORCH_PREFIX:-}" ]; then
  TRIDENT_TORCH_PREFIX=$(bash scripts/fetch-cuda-libtorch.sh)
  export TRIDENT_TORCH_PREFIX
fi
cmake --preset "${PRESET:-default}" >/dev/null
cmake --build --preset "${PRESET:-default}" ${TARGET:+--target "$TARGET"}
