#!/usr/bin/env bash
# Installs the dependencies (skipping what is present) and builds trident into build/.
# PRESET=ci turns warnings into errors (what CI, scripts/test.sh and scripts/main-job.sh use, so
# they share one build); TARGET=trident builds only the executable.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset "${PRESET:-default}" >/dev/null
cmake --build --preset "${PRESET:-default}" ${TARGET:+--target "$TARGET"}
