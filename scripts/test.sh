#!/usr/bin/env bash
# The tests, from a fresh Debian 12 machine: install, build with warnings as errors, run CTest
# (unit, MPI at np 1/2/4, CLI). GPU tests skip where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=ci bash scripts/build.sh
ctest --preset ci -j "$(nproc)" "$@"
