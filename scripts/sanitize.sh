#!/usr/bin/env bash
# The unit and MPI tests (np 1, 2) built with AddressSanitizer + UndefinedBehaviorSanitizer
# (CMake preset "asan", folder build-asan). Leaks inside LibTorch/MPICH/HDF5 singletons are
# suppressed by tests/sanitizers.supp (documented there); anything else fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset asan >/dev/null
cmake --build --preset asan --target trident_unit_tests trident_mpi_tests
ctest --preset asan -j "$(nproc)" -L unit "$@"
# np 1 and 2 (np 4 runs in the plain and CUDA builds; under ASan on 2 cores it costs 1.5 minutes).
ctest --preset asan -j "$(nproc)" -R '^mpi_[A-Za-z]+_np[12]$' "$@"
