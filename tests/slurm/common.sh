# shellcheck shell=bash
# Sourced by the slurm tests:  source common.sh STATE_DIR SOURCE_DIR TRIDENT NAME
# Connects to the cluster that cluster.sh started in STATE_DIR (the CTest fixture), makes a
# scratch folder WORK (kept when the test fails, for its job logs), a tiny synthetic dataset
# syn.h5 in it, and the helpers below. Jobs are polled with scontrol (not `sbatch --wait`, whose
# polls come 2, 10, 42 s after submit).
set -euo pipefail
# shellcheck disable=SC2034  # src is for the scripts that source this
state=$1 src=$2 trident=$3 name=$4
[ -s "$state/env.sh" ] || { echo "FAIL: no SLURM cluster in $state (the slurm_cluster_start fixture failed?)"; exit 1; }
# shellcheck disable=SC1091
source "$state/env.sh"
# shellcheck source=tests/eta_text.sh
source "$src/tests/eta_text.sh"  # seconds_of
timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP' \
  || { echo "FAIL: slurmctld of $state does not answer ($SLURM_CONF)"; exit 1; }
work=$state/../work/$name
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
cd "$work"
t_start=$SECONDS

finish() {
  local rc=$?
  if [ $rc = 0 ]; then
    rm -rf "$work"
  else
    echo "(job logs and runs kept in $work; cluster logs in $state/log)"
  fi
}
trap finish EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
elapsed() { echo "$((SECONDS - t_start)) s"; }

# A small synthetic dataset: 4 classes of 1x16x16 images.
"$trident" prepare-data synthetic --out syn.h5 --train 4096 --test 256 --classes 4 --shape 1x16x16 >/dev/null

# A tiny training run (the mlp), as --set overrides of the empty deck /dev/null.
tiny_args() {  # max_steps
  echo /dev/null --set model.kind=mlp --set model.hidden=64 --set "data.path=$work/syn.h5" \
    --set "run.max_steps=$1" --set run.log_every=20 --set run.threads=1 --set data.prefetch=0 \
    --set optim.global_batch=64 --set optim.micro_batch=16
}

field() {  # job field: the value of FIELD= in `scontrol show job -o`
  { timeout 10 scontrol show job -o "$1" 2>/dev/null || true; } | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

show_tail() {  # LINES FILE: what a failing test prints of a log
  echo "--- $2 (last $1 lines)"
  tail -n "$1" "$2" 2>&1 | sed 's/^/    /'
}

show_job() {  # what a failing test prints about a job
  echo "--- scontrol show job $1"
  timeout 10 scontrol show job "$1" 2>&1 | sed 's/^/    /'
  local out; out=$(field "$1" StdOut)
  if [ -n "$out" ] && [ -f "$out" ]; then
    show_tail 30 "$out"
  fi
}

# wait_job ID SECONDS: until the job has ended; prints its final state. Fails on a timeout or a
# dependency that can never be satisfied.
wait_job() {
  local id=$1 limit=$2 s reason deadline=$((SECONDS + $2))
  while :; do
    s=$(field "$id" JobState)
    case $s in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE)
        echo "$s"
        return 0
        ;;
    esac
    reason=$(field "$id" Reason)
    if [ "$reason" = DependencyNeverSatisfied ]; then
      show_job "$id" >&2
      fail "job $id can never start (DependencyNeverSatisfied)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      show_job "$id" >&2
      fail "job $id still '$s' after $limit s"
    fi
    sleep 0.5
  done
}

expect_completed() {  # ID SECONDS [what]
  local s
  s=$(wait_job "$1" "$2")
  if [ "$s" != COMPLETED ] || [ "$(field "$1" ExitCode)" != 0:0 ]; then
    show_job "$1"
    fail "${3:-job $1} ended $s with exit code $(field "$1" ExitCode)"
  fi
}

expect_cancelled() {  # ID RESTARTS: a job scancel stopped saved and ended CANCELLED after RESTARTS
  # restarts, not requeued (wait_job: the final state comes once its ranks, which write to the
  # run's folder as they stop, have ended)
  local s out restarts
  s=$(wait_job "$1" 60) || { show_job "$1"; fail "job $1 did not end within 60 s of scancel (requeued?): $s"; }
  out=$(field "$1" StdOut) restarts=$(field "$1" Restarts)
  grep -q "trident job: cancelled (scancel); not requeued" "$out" \
    || { show_job "$1"; fail "the cancelled job $1 does not say it was cancelled and not requeued"; }
  if [ "$s" != CANCELLED ] || [ "$restarts" != "$2" ]; then
    show_job "$1"
    fail "the cancelled job $1 is $s after $restarts restarts, not CANCELLED after $2"
  fi
}

wait_for_line() {  # FILE REGEX SECONDS: until FILE has a line matching REGEX
  local deadline=$((SECONDS + $3))
  until grep -qE "$2" "$1" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      # What the job said instead, and where its jobs are: CI keeps only this test's output.
      show_tail 30 "$1"
      echo "--- squeue"
      timeout 10 squeue -o "%i %P %T %r %M %N" 2>&1 | sed 's/^/    /'
      local log
      for log in "$state"/log/slurmctld.log "$state"/log/slurmd-*.log; do show_tail 15 "$log"; done
      fail "no line '$2' in $1 after $3 s"
    fi
    sleep 0.1
  done
}

json_int() {  # FILE KEY: the first integer value of "KEY" in a JSON file (report.json is indented)
  grep -o "\"$2\": *-\?[0-9]*" "$1" | head -1 | sed 's/.*: *//'
}

stopped_at_step() {  # the step of trident's "stopped by a signal after step N" read on stdin
  grep -o "stopped by a signal after step [0-9]*" | grep -o "[0-9]*$"
}

final_loss() {  # metrics.jsonl STEP: the full-precision loss logged at STEP
  grep "\"step\":$2[,}]" "$1" | tail -1 | grep -o '"loss":[0-9.e+-]*' | sed 's/"loss"://'
}

# check_goodput RUN_DIR EXPECTATIONS: `trident report --goodput RUN_DIR` run as a user would; its
# goodput % and wall time are checked against the records of goodput.jsonl summed here, and
# EXPECTATIONS (a Python expression over `recs`, the records in order, that must hold) against
# what the test saw happen. Prints the records and the report's summary line.
check_goodput() {
  local run=$1 expect=$2 out
  out=$work/goodput-$(basename "$1")
  "$trident" report --goodput "$run" --out "$out" >"$out.txt" 2>&1 || { cat "$out.txt"; fail "trident report --goodput $run failed"; }
  if [ ! -s "$out/goodput.md" ] || ! grep -q "</svg>" "$out/goodput.svg"; then
    fail "report --goodput wrote no goodput.md / goodput.svg in $out"
  fi
  python3 - "$run/goodput.jsonl" "$out.txt" "$expect" <<'PY' || fail "goodput of $run does not add up (records above)"
import json, re, sys
recs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
for r in recs:
    print("    " + json.dumps({k: r[k] for k in ("job", "exit_code", "launch_s", "first_step", "last_step", "resumed_from_step",
                                                  "work_lost_steps", "work_lost_s", "step_s", "data_wait_s")}))
wall = sum(r["launch_s"] + r["end"] - r["start"] for r in recs)  # the job's launch is wall time too
productive = sum(r["step_s"] - r["data_wait_s"] for r in recs) - sum(r["work_lost_s"] for r in recs)
text = open(sys.argv[2]).read()
m = re.search(r"\*\*([0-9.]+)%\*\* of ([0-9.]+) s wall time over (\d+) process", text)
print("    report: " + (m.group(0) if m else "no summary line"))
assert m, "no summary line in the report"
assert abs(float(m.group(1)) - 100 * productive / wall) <= 0.051, f"goodput {m.group(1)}% vs {100 * productive / wall:.3f}% by hand"
assert abs(float(m.group(2)) - wall) <= 0.051, f"wall {m.group(2)} vs {wall:.3f} by hand"
assert int(m.group(3)) == len(recs)
assert 0 < productive < wall
assert eval(sys.argv[3]), "expected: " + sys.argv[3]
PY
}
