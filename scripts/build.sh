#!/usr/bin/env bash
# Installs the dependencies (skipping what is present) and builds trident into build/.
# PRESET=ci turns warnings into errors (what CI and scripts/test.sh use).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset "${PRESET:-default}" >/dev/null
cmake --build --preset "${PRESET:-default}"
