#!/usr/bin/env bash
# run.sh SECONDS [WORK_DIR]: builds the deck fuzz target with clang (libFuzzer + ASan + UBSan)
# from the three sources it needs, and fuzzes for SECONDS, starting from the decks in inputs/.
# Fails on any crash, leak, sanitizer report or timeout, and keeps the reproducer in WORK_DIR.
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work/corpus"
cxx=${FUZZ_CXX:-clang++-14}
command -v "$cxx" >/dev/null || { echo "FAIL: $cxx not found (scripts/install-deps.sh installs clang-14)"; exit 1; }
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -I"$root/lib" $(pkg-config --cflags mpich hdf5-mpich 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/mpich -I/usr/include/hdf5/mpich))
libs=(-lboost_program_options -lfmt $(pkg-config --libs mpich hdf5-mpich 2>/dev/null || echo -lmpich -lhdf5_mpich))
echo "building the fuzz target with $cxx"
"$cxx" "${flags[@]}" "$root/tests/fuzz/deck_fuzz.cpp" "$root/lib/config/deck.cpp" "$root/lib/core/error.cpp" \
  "$root/lib/core/log.cpp" "$root/lib/core/host.cpp" "${libs[@]}" -o "$work/deck_fuzz"
cp "$root"/inputs/*.ini "$root"/inputs/bad/*.ini "$work/corpus/"
cd "$work"
# detect_leaks stays on; -max_len keeps inputs deck-sized; -timeout catches hangs (regex blow-ups).
./deck_fuzz -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 corpus 2>&1 | tail -15
echo PASS
