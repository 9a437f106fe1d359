#!/usr/bin/env bash
# What a session with a GPU machine does first, in as few device calls as possible: build every
# target there (-j of its cores), run the gpu-labelled tests and the MPI tests, then the GPT
# benchmark (benchmarks/gpt_gpu.sh). Logs and results go to $OUT (the device tool brings them back).
#   benchmarks/gpu_session.sh [build] [test] [mpi] [bench] [pipeline] [scaling] [exitcrash]   (default: build test bench)
# exitcrash: the gpu_training test binary at np 1 under variants (no test run, one test, UCX's
# memory hooks off, the app's malloc thresholds, H5dont_atexit made a no-op, gdb), each variant's
# exit code and segfault line in $out/exitcrash.log: on the H100 (2026-11-27) the binary
# segfaulted on its way out after every test passed, at np 1 and 2 (found with this step: the
# scratch folder's std::filesystem::remove_all at exit; tests/remove_tree.hpp).
# pipeline and scaling: the studies that need the machine's 16 cores but no GPU (hidden from
# them): the pipeline bubble at pp 2 and 4, and the cnn's weak and strong scaling against PyTorch
# DDP over gloo. Each takes most of a 10-minute device call (2026-11-24 on the H100 machine: pp 2
# ~8 s a run, pp 4 ~16 s a run, 24 runs each; the scaling study 270 s at STEPS=32). The device
# tool hands a machine back 30 s after a call and the next call gets a bare one, so every call
# builds first; give each study its own call:
#   benchmarks/gpu_session.sh build scaling
#   PIPELINE_PP=2 benchmarks/gpu_session.sh build pipeline
#   BUILD_S=170 PIPELINE_PP=4 PIPELINE_S=420 benchmarks/gpu_session.sh build pipeline   (within 600 s)
# TARGETS: only these targets (e.g. the app and tests/gpu's programs for `test bench`, when every
# target was built earlier in the session), 150 s for all of them on the H100 machine (2026-11-27).
# Each step has its own time limit (BUILD_S, TEST_S, MPI_S, BENCH_S, PIPELINE_S for each pp,
# SCALING_S seconds), so that one that hangs still leaves the device call time for the next. -Werror is off here (WERROR=ON to turn it
# on): the GPU machine's newer compiler may warn where CI's does not, and a warning must not cost
# a device session its build; the build log's warnings are counted instead.
# CMake arguments for the machine's libraries come from TRIDENT_GPU_CMAKE_ARGS (a GPU machine
# without the project's Debian packages sets it up first; see the developers' notes); the build
# goes to BUILD (default /tmp/build, on the machine's own disk).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-/tmp/build} out=${OUT:-/tmp/out}
mkdir -p "$out"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build test bench)
limited() { local seconds=$1; shift; timeout -k 10 "$seconds" "$@"; }
for step in "${steps[@]}"; do
  case $step in build | test | mpi | bench | pipeline | scaling | exitcrash) ;;
    *) echo "unknown step '$step' (build | test | mpi | bench | pipeline | scaling | exitcrash)" >&2; exit 2 ;;
  esac
done
rc=0
for step in "${steps[@]}"; do
  start=$SECONDS
  if [ "$step" != build ] && [ ! -x "$build/app/trident" ]; then
    echo "gpu_session: $step: no build in $build (a bare machine: put build first in the same call)" >&2
    rc=1
    continue
  fi
  case $step in
    build)
      # shellcheck disable=SC2086  # the arguments are words
      { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=ON -DTRIDENT_WERROR="${WERROR:-OFF}" \
          ${TRIDENT_GPU_CMAKE_ARGS:-} && limited "${BUILD_S:-300}" cmake --build "$build" -j "$(nproc)" ${TARGETS:+--target $TARGETS}; } >"$out/build.log" 2>&1 || rc=1
      grep -E "trident:|error" "$out/build.log" | head -20
      echo "build warnings: $(grep -c 'warning:' "$out/build.log")"
      ;;
    test)
      # The gpu tests (np 1 and 2: two ranks share the one GPU over the MPI backend). Their GPT
      # cases read the fortunes text, which the GPU machine lacks: carry its packages in .gpu/debs
      # ((cd .gpu/debs && apt-get download fortunes fortunes-min), which .gpu/env.sh unpacks).
      [ -d /usr/share/games/fortunes ] ||
        echo "gpu_session: no /usr/share/games/fortunes: the GPT gpu tests will fail (see the test step's comment)"
      (cd "$build" && limited "${TEST_S:-240}" ctest -L gpu --output-on-failure -j 2) >"$out/test.log" 2>&1 || rc=1
      grep -E "tests passed|Failed|\*\*\*|Skipped|FAILED|Expected|Which is|actual|segfault during" "$out/test.log" | head -40
      ;;
    mpi)
      # The MPI tests on CPU tensors with this LibTorch (2.x), on the machine's cores. The GPU is
      # hidden: their decks leave run.device = auto, which would put every rank on its one GPU.
      (cd "$build" && CUDA_VISIBLE_DEVICES=-1 limited "${MPI_S:-300}" ctest -R '^mpi_' -j "$(nproc)" --output-on-failure) >"$out/mpi.log" 2>&1 || rc=1
      grep -E "tests passed|Failed|\*\*\*|FAILED" "$out/mpi.log" | head -40
      ;;
    bench)
      # With a trace of two steps of each implementation, summarised here and brought back gzipped.
      # The GPU's power, temperature, clocks and load each second meanwhile (gpu_dmon.log): on the
      # H200 (2026-11-28) trident's and compile's first timed window was 3-4% faster than the later
      # two, eager's not, and nothing was sampled to say why.
      dmon_pid=
      if command -v nvidia-smi >/dev/null; then
        nvidia-smi dmon -s pcu -d 1 >"$out/gpu_dmon.log" 2>&1 &
        dmon_pid=$!
      fi
      MPIEXEC=${MPIEXEC:-$(command -v mpiexec.mpich || echo mpiexec)} PROFILE=/tmp/profiles \
        limited "${BENCH_S:-240}" benchmarks/gpt_gpu.sh "$build" >"$out/bench.log" 2>&1 || rc=1
      [ -n "$dmon_pid" ] && kill "$dmon_pid" 2>/dev/null
      cp benchmarks/results/gpt_gpu.json "$out/" 2>/dev/null
      python3 benchmarks/profile_summary.py --steps 2 --top 30 /tmp/profiles/*.json >"$out/profile.log" 2>&1
      [ -n "${KEEP_TRACES-1}" ] && tar -czf "$out/profiles.tgz" -C /tmp profiles 2>/dev/null
      grep -E "^== |^per step" "$out/profile.log"
      tail -12 "$out/bench.log"
      ;;
    pipeline)
      export MPIEXEC=${MPIEXEC:-$(command -v mpiexec.mpich || echo mpiexec)}
      for pp in ${PIPELINE_PP:-2 4}; do
        rm -f "benchmarks/results/pipeline_pp$pp.json"  # the committed one must not pass for this run's
        PP=$pp CUDA_VISIBLE_DEVICES=-1 limited "${PIPELINE_S:-280}" benchmarks/pipeline.sh "$build" || rc=1
        cp "benchmarks/results/pipeline_pp$pp.json" "$out/" 2>/dev/null
      done >"$out/pipeline.log" 2>&1
      grep -E "^(mlp|cnn) |Pipeline bubble" "$out/pipeline.log"
      ;;
    scaling)
      export MPIEXEC=${MPIEXEC:-$(command -v mpiexec.mpich || echo mpiexec)}
      STEPS=${STEPS:-32} CUDA_VISIBLE_DEVICES=-1 limited "${SCALING_S:-330}" benchmarks/cnn_scaling.sh "$build" \
        >"$out/scaling.log" 2>&1 || rc=1
      cp benchmarks/results/cnn_scaling.json "$out/" 2>/dev/null
      grep -E "^\||^measured" "$out/scaling.log"
      ;;
    exitcrash)
      # Which part of the process's end crashes, and under what. A variant: NAME, the gtest filter
      # ("-*" runs no test), the environment. The test's main reports the exit phase and the caller
      # (UCX_HANDLE_ERRORS=none, as ctest sets it: UCX's handler would take the signal otherwise).
      bin=$build/tests/gpu/trident_gpu_training_test
      mpiexec=${MPIEXEC:-$(command -v mpiexec.mpich || echo mpiexec)}
      ucx_off="UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no"
      app_malloc="MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456"
      one=Gpu.OneStepOnCudaMatchesTheCpu
      # The test data's preparation calls H5dont_atexit in-process (lib/data/prepare.cpp): a variant
      # where that call does nothing.
      no_dont_atexit=/tmp/h5dont_atexit_does_nothing.so
      echo 'int H5dont_atexit(void) { return 0; }' | cc -shared -fPIC -x c - -o "$no_dont_atexit" ||
        echo "gpu_session: exitcrash: no C compiler for $no_dont_atexit"
      {
        command -v ucx_info >/dev/null && ucx_info -v
        ldd "$bin" | grep -E "ucx|ucs|ucp|uct|ucm|mpich|hdf5|cudnn" | sed 's/ (0x.*//'
        for variant in "no_test|-*|" "no_test_ucx_hooks_off|-*|$ucx_off" "one_test|$one|" \
                       "one_test_ucx_hooks_off|$one|$ucx_off" "one_test_app_malloc|$one|$app_malloc" \
                       "one_test_h5dont_atexit_does_nothing|$one|LD_PRELOAD=$no_dont_atexit" \
                       "every_test_ucx_hooks_off|*|$ucx_off"; do
          IFS='|' read -r name filter env_words <<<"$variant"
          # shellcheck disable=SC2086  # the environment's words
          env UCX_HANDLE_ERRORS=none $env_words timeout -k 5 "${EXITCRASH_S:-100}" "$mpiexec" -n 1 "$bin" --gtest_filter="$filter" \
            >"$out/exitcrash_$name.log" 2>&1
          echo "$name: exit $? | $(grep -E 'segfault during|tests? ran|PASSED|FAILED' "$out/exitcrash_$name.log" | tr '\n' ' ')"
        done
        if command -v gdb >/dev/null; then  # every thread's frames at the fault
          timeout -k 5 "${EXITCRASH_S:-100}" gdb -q -batch -ex run -ex "thread apply all bt 12" \
            --args "$bin" --gtest_filter="$one" >"$out/exitcrash_gdb.log" 2>&1
          echo "gdb: $(grep -cE '^#' "$out/exitcrash_gdb.log") frames in exitcrash_gdb.log"
        fi
      } >"$out/exitcrash.log" 2>&1
      cat "$out/exitcrash.log"
      ;;
    *) echo "unknown step '$step' (build | test | mpi | bench | pipeline | scaling | exitcrash)" >&2; exit 2 ;;
  esac
  echo "gpu_session: $step took $((SECONDS - start)) s"
done
exit $rc
