#!/usr/bin/env bash
# threads_affinity.sh TRIDENT MPIEXEC: run.threads = 0 gives a rank the CPUs it may run on, each
# shared among the node's ranks that may run on it, not the node's core count:
#   one rank limited (taskset) to one CPU -> 1 thread; unrestricted -> as many as it may use;
#   two ranks on one shared CPU -> 1 each; two ranks unrestricted -> half each (at least 1).
# Needs at least 2 CPUs to tell the cases apart (else skipped, exit 77).
source "$(dirname "$0")/common.sh" "$1" "$2" 256
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
[ "$cpus" -ge 2 ] || { echo "SKIP: one CPU: every case gives 1 thread"; exit 77; }
first=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*\([0-9]*\).*/\1/p' /proc/self/status)
threads() {  # LOG -> each rank's "N thread(s)/rank" (rank 0 prints the layout line)
  grep -o '[0-9]* thread(s)/rank' "$1" | sed 's/ .*//'
}
run() {  # NAME COMMAND...: trains 1 step, log in NAME.log
  local name=$1; shift
  "$@" "$trident" train /dev/null --set data.path=syn.h5 --set model.kind=mlp --set run.max_steps=1 \
    --set optim.global_batch=32 --set run.output_dir="runs/$name" --resume never >"$name.log" 2>&1 \
    || { cat "$name.log"; fail "$name: exit code $?"; }
}
expect() {  # NAME EXPECTED
  local got
  got=$(threads "$1.log")
  echo "$1: $got thread(s)/rank, expected $2"
  [ "$got" = "$2" ] || { cat "$1.log"; fail "$1: $got thread(s) per rank, expected $2"; }
}
run one_cpu taskset -c "$first"
expect one_cpu 1
run unrestricted env
expect unrestricted "$cpus"
run two_ranks_one_cpu taskset -c "$first" "$mpiexec" -n 2
expect two_ranks_one_cpu 1
run two_ranks "$mpiexec" -n 2
expect two_ranks $((cpus / 2))
echo PASS
