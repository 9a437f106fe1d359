#!/usr/bin/env bash
# The unit and MPI tests (np 1, 2) built with AddressSanitizer + UndefinedBehaviorSanitizer
# (CMake preset "asan", folder build-asan), and asan_leak_canary (a leaked tensor is reported).
# -O1 -g1, as ASan's authors advise: line tables give the reports their file:line, and the build
# takes half as long as with -O2 -g (9 minutes instead of 17.5 on 2 cores, 2026-11-27). File by
# file, not a unity build (CMakePresets.json): CI compiles each file alone here.
# tests/sanitizers.supp suppresses nothing (documented there): any leak fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset asan >/dev/null
cmake --build --preset asan --target trident_unit_tests trident_mpi_tests trident_leak_canary
ctest --preset asan -j "$(nproc)" -L unit "$@"
# np 1 and 2 (np 4 runs in the plain and CUDA builds; under ASan on 2 cores it costs 1.5 minutes).
ctest --preset asan -j "$(nproc)" -R '^mpi_[A-Za-z]+_np[12]$' "$@"
