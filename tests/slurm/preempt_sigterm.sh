#!/usr/bin/env bash
# preempt_sigterm.sh STATE SOURCE_DIR TRIDENT: what jobs/ddp_2nodes.slurm does when Slurm ends
# its job with SIGTERM, which is what a preemption and scancel both send (the time limit's
# SIGUSR1 is preempt_requeue.sh's). On the test cluster (cluster.sh) a job of partition `high`
# preempts the jobs of the default partition (PreemptMode=CANCEL), of `requeue`
# (PreemptMode=REQUEUE), and of `grace` and `grace_requeue` (the same two with GraceTime=15).
#  * preempted, PreemptMode=CANCEL: trident saves and exits 3, the script requeues the job, and
#    its second start resumes from that checkpoint;
#  * that job cancelled then (scancel): it saves and ends CANCELLED, not requeued again;
#  * preempted, PreemptMode=REQUEUE: Slurm requeues the job itself; the script says so and does
#    not requeue it a second time, and the second start resumes;
#  * preempted with a GraceTime, in either mode: Slurm signals the ranks only, not the script,
#    and requeues nothing until the grace ends; the script requeues the job, which resumes and
#    is not ended when that grace time runs out;
#  * that requeue counts toward TRIDENT_MAX_REQUEUE: with a cap of 1, the job preempted a
#    second time saves and ends, not requeued, with the checkpoint of the step it stopped at.
# The grace cases run jobs/hybrid.slurm with 2 pipeline stages (dp 1 x pp 2), the others
# jobs/ddp_2nodes.slurm: both scripts' requeue decisions, under a real preemption, and a
# pipeline's two stages saving one checkpoint on a signal that reaches them from Slurm.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" preempt_sigterm
export TRIDENT=$trident

long_run() {  # PARTITION NAME: a run far longer than the test, alone on both nodes
  local script=ddp_2nodes.slurm layout=()
  case $1 in grace*) script=hybrid.slurm layout=(--set parallel.pp=2) ;; esac
  # shellcheck disable=SC2046
  sbatch --parsable --partition="$1" --nodes=2 --ntasks-per-node=1 --exclusive --output="$work/$2-%j.out" \
    "$src/jobs/$script" $(tiny_args 10000000) ${layout[@]+"${layout[@]}"} --set run.output_dir="$work/$2"
}
preempt() {  # a job of partition `high` on both nodes: it preempts what runs there
  sbatch --parsable --partition=high --nodes=2 --exclusive --output=/dev/null --wrap "sleep 1" >/dev/null
}
# preempted_and_resumed PARTITION NAME LINE: a long run in PARTITION, preempted at step 20; its
# job log says LINE, then the job starts again, resumes and trains. Sets id and out.
preempted_and_resumed() {
  id=$(long_run "$1" "$2")
  out=$work/$2-$id.out
  wait_for_line "$out" "step 20/" 60
  preempt
  preempted_at=$SECONDS
  wait_for_line "$out" "$3" 90
  wait_for_line "$out" "resuming from $work/$2/checkpoints/step_" 120
  local deadline=$((SECONDS + 120))
  until sed -n '/(restart 1)/,$p' "$out" | grep -qE "step [0-9]+/10000000"; do
    [ $SECONDS -lt $deadline ] || fail "no progress line in $out since the restart"
    sleep 0.2
  done
}

preempted_and_resumed debug cancel_mode "trident job: stopped by a signal; requeueing \(restart 1 of at most 3\)"
echo "PreemptMode=CANCEL: saved, requeued by the script, resumed ($(elapsed))"
scancel "$id"
expect_cancelled "$id" 1
echo "then scancel: saved, CANCELLED, not requeued again ($(elapsed))"

preempted_and_resumed requeue requeue_mode "trident job: stopped by a signal; Slurm requeues the job itself \(a preemption\)"
grep -q "requeueing (restart" "$out" && { show_job "$id"; fail "the script requeued a job Slurm had requeued"; }
[ "$(field "$id" Restarts)" = 1 ] || { show_job "$id"; fail "Restarts=$(field "$id" Restarts), expected 1"; }
echo "PreemptMode=REQUEUE: saved, requeued by Slurm alone, resumed ($(elapsed))"
scancel "$id"
expect_cancelled "$id" 1

for partition in grace grace_requeue; do
  cap=3
  [ $partition = grace ] && cap=1  # and preempted a second time below
  TRIDENT_MAX_REQUEUE=$cap preempted_and_resumed $partition $partition \
    "trident job: stopped by a signal; requeueing \(restart 1 of at most $cap\)"
  grep -q "layout: world 2 = dp 1 x pp 2" "$out" || { show_tail 40 "$out"; fail "$partition: the job did not run 2 pipeline stages"; }
  # The grace (15 s) ends after the requeue: Slurm must leave the restarted job running.
  sleep $((preempted_at + 20 - SECONDS > 0 ? preempted_at + 20 - SECONDS : 0))
  [ "$(field "$id" JobState)" = RUNNING ] && [ "$(field "$id" Restarts)" = 1 ] \
    || { show_job "$id"; fail "$partition: the requeued job is not running with 1 restart once the grace time has passed"; }
  lines=$(grep -cE "step [0-9]+/10000000" "$out")
  deadline=$((SECONDS + 30))
  until [ "$(grep -cE "step [0-9]+/10000000" "$out")" -gt "$lines" ]; do
    [ $SECONDS -lt $deadline ] || fail "$partition: no progress line in $out after the grace time"
    sleep 0.2
  done
  echo "$partition (GraceTime=15): saved, requeued by the script, resumed, still running after the grace ($(elapsed))"
  if [ $cap = 3 ]; then
    scancel "$id"
    expect_cancelled "$id" 1
    continue
  fi
  # The second preemption: that first requeue was the one TRIDENT_MAX_REQUEUE=1 allows.
  preempt
  wait_for_line "$out" "trident job: stopped by a signal; not requeued \(restart 1, cap 1\); resubmit to continue" 90
  s=$(wait_job "$id" 60) || { show_job "$id"; fail "$partition: the job at its requeue cap did not end within 60 s: $s"; }
  # Exit code 3 (stopped by a signal), so that jobs queued with afterok do not start.
  [ "$(field "$id" Restarts)" = 1 ] && [ "$(field "$id" ExitCode)" = 3:0 ] \
    || { show_job "$id"; fail "$partition: Restarts=$(field "$id" Restarts) ExitCode=$(field "$id" ExitCode) at the cap, expected 1 and 3:0"; }
  stop=$(sed -n '/(restart 1)/,$p' "$out" | stopped_at_step)
  [ -n "$stop" ] && [ -f "$work/$partition/checkpoints/step_$(printf %07d "$stop").h5" ] \
    || { show_job "$id"; fail "$partition: no checkpoint of the step the job at its cap stopped at (${stop:-none})"; }
  echo "$partition, TRIDENT_MAX_REQUEUE=1: preempted again, saved at step $stop, not requeued, $s ($(elapsed))"
done
echo PASS
