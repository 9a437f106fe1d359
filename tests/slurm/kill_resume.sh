#!/usr/bin/env bash
# kill_resume.sh STATE SOURCE_DIR TRIDENT: a job chain whose first job dies without a word (its
# ranks SIGKILLed after a checkpoint: an OOM kill, a lost node) and a second job that resumes
# from that checkpoint. goodput.jsonl then holds both lifetimes: the killed one closed by the
# second as it last wrote it (no exit code), and the steps it trained past the checkpoint counted
# as work lost. Checked against what the job logs show and against sums by hand (common.sh).
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" kill_resume
export TRIDENT=$trident
steps=4000
# The tiny run trains 4000 steps in about a second: to kill it at a known step, rank 0 stops
# there for good (TRIDENT_TEST_STALL, trainer.cpp; the other rank waits for it), then the ranks
# are SIGKILLed. Step 1100 comes after the checkpoint at 1000, the epoch end at 1088 (64 steps an
# epoch) and the log line at 1080, before that step's own log line.
# shellcheck disable=SC2046
id=$(sbatch --parsable --ntasks-per-node=1 --output="$work/kill-%j.out" --export=ALL,TRIDENT_TEST_STALL=0:1100 \
       "$src/jobs/ddp_2nodes.slurm" $(tiny_args $steps) --set checkpoint.every_steps=500 --set run.output_dir="$work/run")
out=$work/kill-$id.out
wait_for_line "$out" "rank 0 stalls after step 1100" 90
scancel --signal=KILL "$id"  # the job step's tasks, not the batch shell: no checkpoint, no exit 3
echo "SIGKILL sent to the ranks of job $id after $(elapsed)"
s=$(wait_job "$id" 60)
grep -q "done: $steps steps" "$out" && fail "job $id finished before the SIGKILL came"
grep -q "trident exited with 3" "$out" && fail "job $id stopped cleanly (exit 3): the ranks were signalled, not killed"
echo "job $id ended $s"
# The last step the killed job logged (metrics.jsonl, which rank 0 writes before each update of
# its record), and the checkpoint the next job must resume from.
logged=$(tail -n 1 "$work/run/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
saved=$(grep -o "step_[0-9]*.h5 written" "$out" | tail -1 | sed 's/step_0*\([0-9]*\).h5.*/\1/')
echo "killed job: last logged step $logged, last checkpoint step $saved"
[ -f "$work/run/goodput.open.json" ] || fail "the killed lifetime left no open record (goodput.open.json)"

# shellcheck disable=SC2046
next=$(sbatch --parsable --ntasks-per-node=1 --output="$work/next-%j.out" "$src/jobs/ddp_2nodes.slurm" \
         $(tiny_args $steps) --set checkpoint.every_steps=500 --set run.output_dir="$work/run")
expect_completed "$next" 120 "the resuming job"
grep -q "resuming from $work/run/checkpoints/step_$(printf %07d "$saved").h5" "$work/next-$next.out" \
  || { show_job "$next"; fail "the second job did not resume from step $saved"; }
[ ! -e "$work/run/goodput.open.json" ] || fail "goodput.open.json left after a clean exit"
# Each lifetime's launch is its job's StartTime (whole seconds, as the job script passed it) to
# the process's start: the job script and srun, a few seconds here.
starts=$(for j in "$id" "$next"; do date -d "$(field "$j" StartTime)" +%s; done | paste -sd,)
# The killed record ends at its last update (log lines every 20 steps, saves, epoch ends): at or
# after the last logged step, before the next one.
check_goodput "$work/run" "len(recs) == 2 and recs[0]['exit_code'] is None and recs[1]['exit_code'] == 0 \\
  and recs[0]['job'] == '$id' and recs[1]['job'] == '$next' and $logged <= recs[0]['last_step'] < $logged + 20 \
  and recs[0]['last_step'] == 1088 and $saved == 1000 \\
  and recs[1]['resumed_from_step'] == $saved and recs[1]['work_lost_steps'] == recs[0]['last_step'] - $saved > 0 \\
  and abs(recs[1]['work_lost_s'] - recs[1]['work_lost_steps'] * (recs[0]['step_s'] - recs[0]['data_wait_s']) / recs[0]['steps_trained']) < 1e-9 \\
  and recs[1]['last_step'] == $steps \\
  and all(0 < r['launch_s'] < 30 and abs(r['start'] - r['launch_s'] - s) < 1e-3 for r, s in zip(recs, [$starts]))"
echo PASS
