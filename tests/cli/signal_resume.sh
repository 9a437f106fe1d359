#!/usr/bin/env bash
# signal_resume.sh TRIDENT MPIEXEC: a SIGUSR1 delivered to the ranks of a 2-rank run
# mid-training (as srun or `scancel --signal=USR1` deliver it to every task) commits a
# checkpoint and exits 3; `--resume auto` continues from it and ends with the same final loss and
# final checkpoint (trident compare: every tensor, bit for bit) as a run that was never stopped.
# (The signal goes to the ranks, not to mpiexec: Hydra forwards a
# signal it receives, but then reports some ranks' exit codes as 0.) The stopped run also saves
# every 10 steps in the background, its writer slowed (TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS), so
# that the signal finds a save in flight: the stop commits that one, then saves its own step. A
# signal before MPI_Init (TRIDENT_TEST_SIGNAL_AT_LAUNCH), or a SIGTERM while LibTorch loads, stops
# the run after its first step.
# Ctrl-C (SIGINT to mpiexec and the ranks) stops a run the same way; a second one a second later
# ends a rank at once. A signal during an evaluation of the test split stops it early. A kill
# during the last evaluation keeps the final checkpoint, and its requeue completes report.json; goodput counts waits for a save's copies once.
source "$(dirname "$0")/common.sh" "$1" "$2" 4096
args=(--set data.path=syn.h5 --set run.max_steps=300 --set run.log_every=10 --set run.threads=1
      --set optim.global_batch=64 --set optim.micro_batch=16 --set data.prefetch=0)
"$mpiexec" -n 2 "$trident" train /dev/null --set run.name=straight "${args[@]}" >straight.log 2>&1 \
  || fail "uninterrupted run failed: $(tail -3 straight.log)"

marker=stopped_$$  # in the ranks' command line, so only this test's ranks get the signal
TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS=300 "$mpiexec" -n 2 "$trident" train /dev/null --set run.name=stopped \
  --set run.output_dir=runs/stopped --set run.seed=1234 --set checkpoint.keep_last=2 --set checkpoint.every_steps=10 \
  "${args[@]}" --set "run.name=$marker" >stopped.log 2>&1 &
launcher=$!
for _ in $(seq 300); do grep -q "step 20/300" stopped.log 2>/dev/null && break; sleep 0.1; done
pkill -USR1 -f "^$trident train .*run.name=$marker" || fail "no rank to signal: $(tail -3 stopped.log)"  # the ranks, not mpiexec
set +e
wait "$launcher"
rc=$?
set -e
cat stopped.log | tail -5
[ "$rc" = 3 ] || fail "exit code $rc after SIGUSR1, expected 3"
grep -q "stopped by a signal after step" stopped.log || fail "no stop message"
[ -f runs/stopped/checkpoints/latest ] || fail "no checkpoint committed"
stop=$(grep -o "stopped by a signal after step [0-9]*" stopped.log | grep -o "[0-9]*$")
[ "$(cat runs/stopped/checkpoints/latest)" = "step_$(printf %07d "$stop").h5" ] || fail "latest does not name the stop step $stop"
# The save in flight when the signal came was committed first, then the stop's own save.
grep -E "written in the background|written in [0-9.]* s$" stopped.log | tail -2 | sed 's/^/    /'
inflight=$(grep -o "step_[0-9]*.h5 written in the background" stopped.log | tail -1 | grep -o "[0-9][0-9]*" | head -1)
[ -n "$inflight" ] && [ $((10#$inflight)) -lt "$stop" ] || fail "no background save committed before the stop's save"
grep -A1 "step_$inflight.h5 written in the background" stopped.log | tail -1 | grep -q "step_$(printf %07d "$stop").h5 written in" \
  || fail "the stop's save did not come right after committing the save in flight"
for f in "step_$inflight.h5" "step_$(printf %07d "$stop").h5"; do
  "$trident" inspect "runs/stopped/checkpoints/$f" | grep -q "every block verified" || fail "$f does not verify"
done

"$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/stopped "${args[@]}" --resume auto >resumed.log 2>&1 \
  || fail "resumed run failed: $(tail -3 resumed.log)"
grep -q "resuming from" resumed.log || fail "the second run did not resume"
last() { grep '"step":300[,}]' "$1" | grep -o '"loss":[0-9.e+-]*' | sed 's/"loss"://'; }
a=$(last runs/straight/metrics.jsonl) b=$(last runs/stopped/metrics.jsonl)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "final loss $b after stop and resume, $a uninterrupted"
echo "final loss $a both ways"
same_final_checkpoint() {  # RUN: its step-300 checkpoint is the uninterrupted run's, every tensor and the training state
  "$trident" compare runs/straight/checkpoints/step_0000300.h5 "runs/$1/checkpoints/step_0000300.h5" >"compare_$1.log" \
    || { cat "compare_$1.log"; fail "$1: the final checkpoint differs from the uninterrupted run's"; }
}
same_final_checkpoint stopped

# A signal during an evaluation of the test split (its 8 chunks slowed to 1.5 s each: 12 s) stops
# it at its next check for a signal: the epoch's last step is saved and the run exits 3 without
# the evaluation, seconds later rather than after it and the next step. The resumed run ends as the
# uninterrupted one.
marker=evaluating_$$
TRIDENT_TEST_SLOW_EVALUATION_MS=3000 "$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/evaluating \
  "${args[@]}" --set "run.name=$marker" >evaluating.log 2>&1 &
launcher=$!
# Signalled once the first epoch's evaluation (8 chunks of 3 s or more) is under way.
for _ in $(seq 600); do grep -q "an evaluation chunk slowed" evaluating.log 2>/dev/null && break; sleep 0.1; done
grep -q "an evaluation chunk slowed" evaluating.log || fail "no evaluation started within 60 s: $(tail -3 evaluating.log)"
signalled=$(date +%s)
pkill -USR1 -f "^$trident train .*run.name=$marker" || fail "no rank to signal: $(tail -3 evaluating.log)"
set +e
wait "$launcher"
rc=$?
set -e
took=$(( $(date +%s) - signalled ))
tail -3 evaluating.log
[ "$rc" = 3 ] || fail "exit code $rc after a signal during an evaluation, expected 3"
grep -q "epoch 1/5: its evaluation of the test split is left unfinished for a stop signal" evaluating.log \
  || fail "no word of the evaluation left unfinished"
! grep -q "epoch 1/5 done" evaluating.log || fail "the evaluation was finished before the stop"
grep -q "stopped by a signal after step 64;" evaluating.log || fail "the stop was not at the epoch's last step, 64"
[ "$took" -le 12 ] || fail "the stop took $took s after the signal: the 24 s evaluation was waited for"
[ "$(cat runs/evaluating/checkpoints/latest)" = step_0000064.h5 ] || fail "latest does not name step 64"
"$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/evaluating "${args[@]}" --resume auto \
  >evaluating_resumed.log 2>&1 || fail "resumed run failed: $(tail -3 evaluating_resumed.log)"
c=$(last runs/evaluating/metrics.jsonl)
[ "$c" = "$a" ] || fail "final loss $c after a stop during an evaluation and a resume, $a uninterrupted"
same_final_checkpoint evaluating
echo "a signal during an evaluation: exit 3 after $took s, step 64 saved, final loss $c after the resume"

# A signal that comes before MPI_Init (a requeued job preempted again while it starts) is held
# until the first step boundary: that step is checkpointed and the run exits 3, which the job
# scripts requeue, instead of dying of the signal (exit 138, not requeued). TRIDENT_TEST_SIGNAL_AT_LAUNCH:
# `trident` raises SIGUSR1 before it becomes trident-torch, which takes it once its handlers are in.
set +e
TRIDENT_TEST_SIGNAL_AT_LAUNCH=1 "$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/early "${args[@]}" \
  >early.log 2>&1
rc=$?
set -e
[ "$rc" = 3 ] || fail "exit code $rc for a signal before MPI_Init, expected 3 ($(tail -3 early.log))"
grep -q "stopped by a signal after step 1;" early.log || fail "no stop after the first step ($(tail -3 early.log))"
[ "$(cat runs/early/checkpoints/latest)" = step_0000001.h5 ] || fail "latest does not name step 1"
echo "signal before MPI_Init: exit 3, step 1 checkpointed"
# The same for a SIGTERM sent from outside as soon as the process is trident-torch, while it loads
# LibTorch (before its main: the process ended of it, exit 143, when one executable did both).
set +e
"$trident" train /dev/null --set run.output_dir=runs/loading "${args[@]}" >loading.log 2>&1 &
pid=$!
for _ in $(seq 20000); do case $(readlink "/proc/$pid/exe" 2>/dev/null) in *trident-torch) break ;; esac; done
blocked=$(sed -n 's/^SigBlk:\s*//p' "/proc/$pid/status")  # the signals blocked when it was sent
kill -TERM "$pid"
wait "$pid"
rc=$?
set -e
echo "SIGTERM to trident-torch at start (its blocked signals then: $blocked): exit code $rc"
# SigBlk 0x4202: SIGINT, SIGUSR1 and SIGTERM blocked when it was sent, so before its handlers were
# in (trident-torch unblocks them there): the signal came while LibTorch loaded.
[ $((0x${blocked:-0} & 0x4202)) = $((0x4202)) ] ||
  fail "the SIGTERM was sent with the stop signals unblocked (SigBlk $blocked): not while LibTorch loaded"
[ "$rc" = 3 ] || fail "exit code $rc for a SIGTERM while LibTorch loads, expected 3 ($(tail -3 loading.log))"
grep -q "stopped by a signal after step 1;" loading.log || fail "no stop after the first step ($(tail -3 loading.log))"

# Ctrl-C in a terminal: SIGINT to the whole process group, mpiexec and the ranks (which then get
# it a second time from mpiexec, at once). The run stops as for SIGUSR1: checkpoint, ranks exit 3
# (Hydra's mpiexec itself then exits 0 after a Ctrl-C it passed on; srun passes the 3 on).
setsid "$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/interrupted "${args[@]}" \
  --set run.max_steps=100000 >interrupted.log 2>&1 &
launcher=$!
for _ in $(seq 300); do grep -q "step 20/100000" interrupted.log 2>/dev/null && break; sleep 0.1; done
kill -INT -- "-$(ps -o pgid= "$launcher" | tr -d ' ')"
set +e
wait "$launcher"
rc=$?
set -e
tail -3 interrupted.log
[ "$rc" = 0 ] || [ "$rc" = 3 ] || fail "exit code $rc after Ctrl-C"
grep -q "stopped by a signal after step" interrupted.log || fail "no stop message after Ctrl-C"
stop=$(grep -o "stopped by a signal after step [0-9]*" interrupted.log | grep -o "[0-9]*$")
[ "$(cat runs/interrupted/checkpoints/latest)" = "step_$(printf %07d "$stop").h5" ] || fail "Ctrl-C: latest is not step $stop"
"$trident" inspect "runs/interrupted/checkpoints/step_$(printf %07d "$stop").h5" | grep -q "every block verified" \
  || fail "Ctrl-C: the stop's checkpoint does not verify"
echo "Ctrl-C: stopped after step $stop, checkpoint committed"

# A second Ctrl-C a second or more after the first does not wait for the save: the rank (here
# held in its start-up for 20 s) ends at once, as by SIGINT's default.
TRIDENT_TEST_STARTUP=0:busy=20 "$trident" train /dev/null --set run.output_dir=runs/twice "${args[@]}" >twice.log 2>&1 &
rank=$!
for _ in $(seq 300); do grep -q "busy for" twice.log 2>/dev/null && break; sleep 0.1; done
start=$(date +%s)
kill -INT "$rank"
sleep 1.5
kill -0 "$rank" 2>/dev/null || fail "the first Ctrl-C ended the rank at once: $(tail -3 twice.log)"
kill -INT "$rank"
set +e
wait "$rank"
rc=$?
set -e
[ "$rc" = 130 ] || fail "exit code $rc after a second Ctrl-C, expected 130 (SIGINT): $(tail -3 twice.log)"
[ $(( $(date +%s) - start )) -lt 10 ] || fail "the second Ctrl-C did not end the rank at once"
echo "a second Ctrl-C: ended at once (exit 130)"

# The last evaluation (the run's result; a stop signal lets it finish) comes after the final save:
# a job killed during it (SIGKILL after Slurm's KillWait) keeps its training. 40 steps: the one
# epoch's evaluation is the last; its 8 chunks of 3 s or more leave time to kill it.
marker=last_evaluation_$$
TRIDENT_TEST_SLOW_EVALUATION_MS=3000 "$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/last_evaluation \
  "${args[@]}" --set run.max_steps=40 --set "run.name=$marker" >last_evaluation.log 2>&1 &
launcher=$!
for _ in $(seq 600); do grep -q "an evaluation chunk slowed" last_evaluation.log 2>/dev/null && break; sleep 0.1; done
grep -q "an evaluation chunk slowed" last_evaluation.log || fail "no evaluation started: $(tail -3 last_evaluation.log)"
pkill -KILL -f "^$trident train .*run.name=$marker" || fail "no rank to kill: $(tail -3 last_evaluation.log)"
wait "$launcher" || true
[ "$(cat runs/last_evaluation/checkpoints/latest)" = step_0000040.h5 ] \
  || fail "killed during the last evaluation: latest is $(cat runs/last_evaluation/checkpoints/latest 2>&1), not step 40"
"$trident" inspect runs/last_evaluation/checkpoints/step_0000040.h5 | grep -q "every block verified" \
  || fail "the final checkpoint does not verify"
[ -f runs/last_evaluation/report.pending.json ] && [ ! -e runs/last_evaluation/report.json ] \
  || fail "killed during the last evaluation: expected report.pending.json and no report.json: $(ls runs/last_evaluation)"
[ ! -s runs/last_evaluation/evaluations.jsonl ] || fail "the killed evaluation left a record in evaluations.jsonl"
# Its requeue finds the run trained: it evaluates the saved model and completes report.json, whose
# figures are those of a run that was never killed (the training's, as the pending report has
# them; the test figures, as an uninterrupted run's last evaluation gives them), bit for bit.
# (Its evaluation slowed to 0.8 s or more: goodput.jsonl below tells it from start-up.)
TRIDENT_TEST_SLOW_EVALUATION_MS=100 "$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/last_evaluation \
  "${args[@]}" --set run.max_steps=40 --resume auto >last_evaluation_requeued.log 2>&1 || fail "the requeue failed: $(tail -3 last_evaluation_requeued.log)"
grep -q "nothing to train: .* the run ended during its last evaluation: runs/last_evaluation/report.json written from report.pending.json" \
  last_evaluation_requeued.log || fail "no line saying report.json was completed: $(grep 'nothing to train' last_evaluation_requeued.log)"
[ ! -e runs/last_evaluation/report.pending.json ] || fail "report.pending.json left after it was completed"
"$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/last_evaluation_straight "${args[@]}" \
  --set run.max_steps=40 >last_evaluation_straight.log 2>&1 || fail "the uninterrupted 40-step run failed"
field() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"r": r}))' "$@"; }
for f in 'r["final"]["train_loss"]' 'r["final"]["test_loss"]' 'r["final"]["test_accuracy"]' 'r["steps"]' 'r["first_step"]'; do
  completed=$(field runs/last_evaluation/report.json "$f") straight=$(field runs/last_evaluation_straight/report.json "$f")
  [ "$completed" = "$straight" ] || fail "report.json completed by the requeue: $f = $completed, uninterrupted $straight"
done
[ "$(field runs/last_evaluation/report.json 'r["final"]["evaluated_by_a_later_job"]')" = True ] &&
  [ "$(field runs/last_evaluation_straight/report.json 'r["final"]["evaluated_by_a_later_job"]')" = False ] ||
  fail "final.evaluated_by_a_later_job is not true in the completed report and false in the uninterrupted one"
# evaluations.jsonl: the requeue writes the last evaluation's record, which the killed job did not,
# as the uninterrupted run has it (but its time).
python3 - runs/last_evaluation/evaluations.jsonl runs/last_evaluation_straight/evaluations.jsonl <<'PY' \
  || fail "evaluations.jsonl completed by the requeue differs from the uninterrupted run's"
import json, sys
completed, straight = ([{k: v for k, v in json.loads(l).items() if k != "seconds"} for l in open(f)] for f in sys.argv[1:])
assert completed == straight and completed[-1]["step"] == 40 and completed[-1]["end_of_epoch"], (completed, straight)
PY
field runs/last_evaluation/report.json 'r["throughput"]["samples_per_s"] > 0 and r["time_s"]["evaluation"] > 0 and "pending" not in r' |
  grep -qx True || fail "the completed report lacks its training's throughput or the evaluation's time"
"$trident" report runs/last_evaluation --out last_evaluation_report >/dev/null && grep -q "40" last_evaluation_report/report.csv \
  || fail "trident report cannot read the completed report.json"
# goodput.jsonl: the killed lifetime's record (its open record, as last written) holds the final
# save's time, and the requeue's evaluation is its evaluation, not start-up (it had 0 and all).
python3 - runs/last_evaluation/goodput.jsonl <<'PY' || fail "goodput.jsonl after the kill during the last evaluation"
import json, sys
killed, requeue = [json.loads(line) for line in open(sys.argv[1])]
assert killed["exit_code"] is None and killed["last_step"] == 40 and killed["checkpoint_s"] > 0, killed
assert requeue["steps_trained"] == 0 and requeue["evaluation_s"] >= 0.5, requeue
assert requeue["startup_s"] <= requeue["end"] - requeue["start"] - requeue["evaluation_s"] + 1e-3, requeue
PY
echo "killed during the last evaluation: step 40 saved; the requeue completed report.json"

# goodput.jsonl: an update's wait for a background save's copies is checkpoint time, not also a
# step's (goodput's "other" went negative: -21% with saves slowed to 1 s).
TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS=500 "$mpiexec" -n 2 "$trident" train /dev/null --set run.output_dir=runs/goodput \
  "${args[@]}" --set run.max_steps=60 --set checkpoint.every_steps=20 >goodput.log 2>&1 || fail "goodput run failed"
"$trident" report --goodput runs/goodput >goodput_report.log 2>&1 || fail "report --goodput failed: $(tail -3 goodput_report.log)"
grep -q "^| other | [0-9]" goodput_report.log || fail "goodput: $(grep '^| other' goodput_report.log)"
grep "^| checkpoint blocking\|^| other" goodput_report.log
echo PASS
