#!/usr/bin/env bash
# The tests, from a fresh Debian 12 machine: install, build with warnings as errors, run CTest
# (unit, MPI at np 1/2/4, CLI, a real SLURM cluster, 60 s of deck fuzzing); then the CUDA flavour
# (LibTorch 2.11 + CUDA 13 from PyPI's torch wheel, every target compiled and linked with
# -Werror, its unit tests and its MPI tests at np 1/2 run on this machine's CPU: LibTorch 2.x's
# paths; np 4, oversubscribed on 2 cores, is the CPU build's; TRIDENT_SKIP_CUDA=1 skips it); then
# the unit and MPI tests again under ASan + UBSan (scripts/sanitize.sh; TRIDENT_SKIP_SANITIZERS=1
# skips that). GPU tests skip where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
# phase NAME COMMAND...: runs it and says how long it took, and the whole so far (CI's budget is
# an hour on 2 cores: these lines show which part grew).
phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "scripts/test.sh: $name took $((SECONDS - start)) s ($((SECONDS / 60)) min so far)"
}
phase "install + build" env PRESET=ci bash scripts/build.sh
phase "tests" ctest --preset ci -j "$(nproc)" "$@"
if [ "${TRIDENT_SKIP_CUDA:-0}" != 1 ]; then
  phase "CUDA flavour: build" env PRESET=cuda bash scripts/build.sh
  phase "CUDA flavour: unit tests" ctest --preset cuda -j "$(nproc)" -L '^(unit|gpu)$' "$@"
  phase "CUDA flavour: MPI tests" ctest --preset cuda -j "$(nproc)" -R '^(mpi_[A-Za-z]+_np[12]|cli_installed_binary_runs)$' "$@"
fi
[ "${TRIDENT_SKIP_SANITIZERS:-0}" = 1 ] || phase "ASan + UBSan: build and tests" bash scripts/sanitize.sh
