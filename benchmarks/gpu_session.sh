#!/usr/bin/env bash
# What a session with a GPU machine does first, in as few device calls as possible: build every
# target there (-j of its cores), run the gpu-labelled tests and the MPI tests, then the GPT
# benchmark (benchmarks/gpt_gpu.sh). Logs and results go to $OUT (the device tool brings them back).
#   benchmarks/gpu_session.sh [build] [test] [bench]        (default: all three)
# CMake arguments for the machine's libraries come from TRIDENT_GPU_CMAKE_ARGS (a GPU machine
# without the project's Debian packages sets it up first; see the developers' notes); the build
# goes to BUILD (default /tmp/build, on the machine's own disk).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-/tmp/build} out=${OUT:-/tmp/out}
mkdir -p "$out"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build test bench)
rc=0
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    build)
      # shellcheck disable=SC2086  # the arguments are words
      { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=ON -DTRIDENT_WERROR=ON \
          ${TRIDENT_GPU_CMAKE_ARGS:-} && cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1 || rc=1
      grep -E "trident:|error" "$out/build.log" | head -20
      ;;
    test)
      # The gpu tests (np 1 and 2: two ranks share the one GPU over the MPI backend), then the MPI
      # tests on CPU tensors with this LibTorch.
      (cd "$build" && ctest -L gpu --output-on-failure -j 2 && ctest -R '^mpi_' -j "$(nproc)" --output-on-failure) \
        >"$out/test.log" 2>&1 || rc=1
      grep -E "tests passed|Failed|\*\*\*|Skipped" "$out/test.log" | head -40
      ;;
    bench)
      MPIEXEC=${MPIEXEC:-$(command -v mpiexec.mpich || echo mpiexec)} benchmarks/gpt_gpu.sh "$build" >"$out/bench.log" 2>&1 || rc=1
      cp benchmarks/results/gpt_gpu.json "$out/" 2>/dev/null
      tail -12 "$out/bench.log"
      ;;
    *) echo "unknown step '$step' (build | test | bench)" >&2; exit 2 ;;
  esac
  echo "gpu_session: $step took $((SECONDS - start)) s"
done
exit $rc
