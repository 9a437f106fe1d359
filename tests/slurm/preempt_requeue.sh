#!/usr/bin/env bash
# preempt_requeue.sh STATE SOURCE_DIR TRIDENT: the preemption path of jobs/ddp_2nodes.slurm. Slurm
# signals the batch shell (what --signal=B:USR1@N does before a time limit; here sent at a known
# moment with `scancel --signal=USR1 --batch`), the trap passes it to the ranks, trident
# checkpoints and exits 3, the job requeues itself, and the second start resumes (submitted with
# --resume never, it is given --resume auto) and ends with the same final loss and final
# checkpoint (every tensor) as an uninterrupted run.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" preempt_requeue
export TRIDENT=$trident
steps=4000
# Two ranks, one per node, both runs the same but for the output folder.
# shellcheck disable=SC2046
ref=$(sbatch --parsable --ntasks-per-node=1 --output="$work/ref-%j.out" "$src/jobs/ddp_2nodes.slurm" \
        $(tiny_args $steps) --set run.output_dir="$work/ref")
expect_completed "$ref" 120 "the uninterrupted run"
echo "uninterrupted run done after $(elapsed)"

# shellcheck disable=SC2046
# Submitted with --resume never: the requeued start must go on with its checkpoint (the job
# script passes --resume auto on a requeue), not start from scratch again.
id=$(sbatch --parsable --ntasks-per-node=1 --output="$work/pre-%j.out" "$src/jobs/ddp_2nodes.slurm" \
       $(tiny_args $steps) --set run.output_dir="$work/pre" --resume never)
out=$work/pre-$id.out
wait_for_line "$out" "step 20/$steps" 60
scancel --signal=USR1 --batch "$id"
echo "SIGUSR1 sent to the batch shell of job $id after $(elapsed)"
# The job script's decision comes a moment after "trident exited with" (it asks scontrol first):
# wait for that line, not the one before it.
wait_for_line "$out" "trident exited with" 60
grep -q "trident exited with 3" "$out" || { show_job "$id"; fail "trident did not exit 3 after SIGUSR1 (finished before the signal?)"; }
wait_for_line "$out" "trident job: (stopped by a signal|cancelled)" 30
grep -q "requeueing (restart 1 of at most 3)" "$out" || { show_job "$id"; fail "the job did not requeue itself"; }
expect_completed "$id" 120 "the requeued job"
[ "$(field "$id" Restarts)" = 1 ] || fail "Restarts=$(field "$id" Restarts), expected 1"
grep -q "resuming from $work/pre/checkpoints/step_" "$out" || { show_job "$id"; fail "the second start did not resume"; }
grep -q "^  .*trident train .* --resume auto$" "$out" || { show_job "$id"; fail "the requeued start was not given --resume auto"; }
grep -E "SIGUSR1 received|stopped by a signal|exited with|requeueing|restart 1\)|resuming from" "$out" | sed 's/^/    /'

a=$(final_loss "$work/ref/metrics.jsonl" $steps) b=$(final_loss "$work/pre/metrics.jsonl" $steps)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "final loss $b after preemption and requeue, $a uninterrupted"
echo "final loss $a both ways, after $(elapsed)"
# And every tensor of the final checkpoints (parameters, AdamW's moments, buffers), bit for bit.
last=checkpoints/step_$(printf %07d $steps).h5
"$trident" compare "$work/ref/$last" "$work/pre/$last" >"$work/compare.txt" 2>&1 ||
  fail "the final checkpoints differ after preemption and requeue: $(tail -5 "$work/compare.txt")"

# Goodput of the chain: the stopped lifetime (exit 3 at the step it saved) and the requeued one
# (the same job id, +1), which resumed at that step and lost nothing.
stop=$(stopped_at_step <"$out")
check_goodput "$work/pre" "len(recs) == 2 and [r['exit_code'] for r in recs] == [3, 0] and recs[0]['job'] == '$id' \
  and recs[1]['job'] == '$id+1' and recs[0]['last_step'] == $stop and recs[1]['resumed_from_step'] == $stop \
  and recs[1]['work_lost_steps'] == 0 and recs[1]['last_step'] == $steps"
echo PASS
