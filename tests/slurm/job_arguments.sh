#!/usr/bin/env bash
# job_arguments.sh STATE SOURCE_DIR TRIDENT BUILD_DIR: what jobs/ddp_2nodes.slurm makes of its
# arguments and of the launch's exit code.
#  * `sbatch jobs/ddp_2nodes.slurm --set ...`: options without a deck override the default deck
#    (the installation's), which needs its data file made first;
#  * a trident that cannot start on the nodes (its path missing there: exit 127) fails the job
#    with 127, not a success that would end a restart chain;
#  * TRIDENT_MAX_REQUEUE that is not a number: exit 2 before anything starts;
#  * hybrid.slurm's plan refuses a layout, and ddp_2nodes.slurm's check a bad --set, before the
#    default deck's data file is made;
#  * a run longer than the job's time limit is told so (the job's end passed to trident), and
#    the job cancelled with scancel saves and ends, without requeueing itself.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" job_arguments
build=$4
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install failed"
script=$src/jobs/ddp_2nodes.slurm

# One task per node: 2 ranks on this machine's 2 cores.
id=$(env -u TRIDENT_HOME TRIDENT=$prefix/bin/trident sbatch --parsable --ntasks-per-node=1 --output="$work/default-%j.out" "$script" \
       --set run.max_steps=2 --set run.threads=1)
expect_completed "$id" 240 "ddp_2nodes.slurm --set ... (the default deck)"
grep -q "  $prefix/bin/trident train $prefix/share/trident/inputs/fashion_mnist_ddp.ini --set run.max_steps=2 --set run.threads=1" \
  "$work/default-$id.out" || { show_job "$id"; fail "the job did not train the default deck with the options"; }
grep -q "making data/fashion_mnist.h5" "$work/default-$id.out" || fail "the job did not make the default deck's data file"
steps=$(json_int "$work/runs/fashion_mnist_ddp/report.json" steps)
[ "$steps" = 2 ] || fail "report.json says $steps steps, expected 2 (--set run.max_steps=2)"
echo "default deck with --set: trained $steps steps after $(elapsed)"

# trident's path is missing on the nodes: the shell that runs it exits 127.
mkdir -p gone
printf '#!/bin/sh\nexec %s/not-mounted/bin/trident "$@"\n' "$work" >gone/trident
chmod +x gone/trident
id=$(TRIDENT=$work/gone/trident sbatch --parsable --ntasks-per-node=1 --output="$work/gone-%j.out" "$script" /dev/null)
s=$(wait_job "$id" 60)
[ "$s" = FAILED ] && [ "$(field "$id" ExitCode)" = 127:0 ] || { show_job "$id"; fail "a trident that cannot start: job $s, exit $(field "$id" ExitCode), expected FAILED with 127"; }
grep -q "trident exited with 127" "$work/gone-$id.out" || { show_job "$id"; fail "the log does not say trident exited with 127"; }

id=$(TRIDENT=$prefix/bin/trident TRIDENT_MAX_REQUEUE=three sbatch --parsable --ntasks-per-node=1 \
       --output="$work/requeue-%j.out" "$script" /dev/null)
s=$(wait_job "$id" 60)
[ "$(field "$id" ExitCode)" = 2:0 ] || { show_job "$id"; fail "TRIDENT_MAX_REQUEUE=three: job $s, exit $(field "$id" ExitCode), expected 2"; }
grep -q "TRIDENT_MAX_REQUEUE=three must be a whole number" "$work/requeue-$id.out" || fail "no message naming TRIDENT_MAX_REQUEUE"
! grep -q "trident train" "$work/requeue-$id.out" || fail "training started despite TRIDENT_MAX_REQUEUE=three"

# hybrid.slurm's default deck from a folder without its data, with a layout the allocation cannot
# run (3 pipeline stages on 2 ranks): the plan refuses it (exit 2) before the data file is made.
mkdir -p fresh
id=$(env -u TRIDENT_HOME TRIDENT=$prefix/bin/trident sbatch --parsable --ntasks-per-node=1 --chdir="$work/fresh" \
       --output="$work/fresh-%j.out" "$src/jobs/hybrid.slurm" --set parallel.pp=3)
s=$(wait_job "$id" 60)
[ "$(field "$id" ExitCode)" = 2:0 ] || { show_job "$id"; fail "hybrid.slurm --set parallel.pp=3 on 2 ranks: job $s, exit $(field "$id" ExitCode), expected 2"; }
[ ! -e fresh/data ] || { show_job "$id"; fail "hybrid.slurm made the data for a layout its plan refused"; }
echo "hybrid.slurm, a layout the plan refuses: exit 2, no data made"
# ddp_2nodes.slurm likewise: a bad --set for the default deck stops the job (exit 2, trident's
# message) before the data file is made.
id=$(env -u TRIDENT_HOME TRIDENT=$prefix/bin/trident sbatch --parsable --ntasks-per-node=1 --chdir="$work/fresh" \
       --output="$work/fresh_ddp-%j.out" "$script" --set optim.lr=abc)
s=$(wait_job "$id" 60)
[ "$(field "$id" ExitCode)" = 2:0 ] || { show_job "$id"; fail "ddp_2nodes.slurm --set optim.lr=abc: job $s, exit $(field "$id" ExitCode), expected 2"; }
grep -q "optim.lr is not a finite number" "$work/fresh_ddp-$id.out" || { show_job "$id"; fail "no message naming optim.lr"; }
[ ! -e fresh/data ] || { show_job "$id"; fail "ddp_2nodes.slurm made the data for options trident refuses"; }
echo "ddp_2nodes.slurm, a bad --set: exit 2, no data made"

# A job whose time limit (here 4 minutes, its stop signal 2 before) ends before its run would: the
# script passes the job's end from squeue (TRIDENT_JOB_END_TIME), and trident says, at its second
# progress line, that the run will not finish in this job and where its stop signal will save it;
# then the job is cancelled.
# shellcheck disable=SC2046
id=$(TRIDENT=$prefix/bin/trident sbatch --parsable --ntasks-per-node=1 --time=4 --output="$work/limit-%j.out" "$script" \
       $(tiny_args 10000000) --set run.output_dir="$work/limit")
wait_for_line "$work/limit-$id.out" "will not finish in this job" 120
# The signal comes 240 - 120 s after the job's start less the time to this line: 2m00s on a fast
# start (rounded, the line came within a second), 1m30s or more unless the start took 30 s.
pattern="warning: this run will not finish in this job: .*, which comes in ([0-9]m[0-9]{2}s) \(TRIDENT_JOB_END_TIME less TRIDENT_SIGNAL_LEAD_S 120 s\)"
line=$(grep -E "$pattern" "$work/limit-$id.out") && [[ $line =~ $pattern ]] && comes_in=${BASH_REMATCH[1]} \
  && signal_in=$(seconds_of "$comes_in") && [ "$signal_in" -ge 90 ] && [ "$signal_in" -le 120 ] \
  || { show_job "$id"; fail "the line does not say the signal comes in 90-120 s (it says '${comes_in:-}')"; }
echo "a run longer than its job's time limit: said so (its signal in $comes_in, $(grep -o "at about step [0-9]* of 10000000" "$work/limit-$id.out"))"
# Then the user cancels it: the ranks save (SIGTERM) and the job ends CANCELLED, not requeued
# (a requeue would start the cancelled job again).
scancel "$id"
expect_cancelled "$id" 0
[ -e "$work/limit/checkpoints/latest" ] || { show_job "$id"; fail "the cancelled job left no checkpoint"; }
echo "scancel: saved, ended CANCELLED, not requeued"
echo "after $(elapsed)"
echo PASS
