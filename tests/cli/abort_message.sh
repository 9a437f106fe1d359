#!/usr/bin/env bash
# abort_message.sh TOOL MPIEXEC RUNS: a rank's fault message reaches the job's log before the job
# is aborted. MPICH's mpiexec dropped a rank's last stderr lines in about 4 of 100 aborts that
# followed them at once (a fault said nothing, exit 1); abort_all_ranks gives them time. The tool
# (tests/tools/abort_after_message.cpp) has rank 1 print and abort RUNS times; every log must hold
# the line and every exit be 1.
set -eu
tool=$1 mpiexec=$2 runs=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
lost=0
for i in $(seq "$runs"); do
  set +e
  "$mpiexec" -n 2 "$tool" >"$log" 2>&1
  rc=$?
  set -e
  [ "$rc" = 1 ] || { cat "$log"; echo "FAIL: run $i exited $rc, expected 1"; exit 1; }
  grep -q "the line this rank wrote before the abort" "$log" || lost=$((lost + 1))
done
[ "$lost" = 0 ] || { echo "FAIL: the fault line was lost in $lost of $runs aborts"; exit 1; }
echo "PASS: the fault line reached the log in all $runs aborts"
