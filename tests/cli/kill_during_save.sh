#!/usr/bin/env bash
# kill_during_save.sh TRIDENT MPIEXEC: every rank is SIGKILLed while a checkpoint is being saved
# (after its temporary file is written, before it is committed). The previous checkpoint and
# `latest` stay intact, the restart removes the unfinished file and resumes from that previous
# checkpoint, and the final
# checkpoint equals that of a run that was never killed, every tensor of it. trident compare tells
# two checkpoints apart; ranks given different files under one checkpoint path are refused.
source "$(dirname "$0")/common.sh" "$1" "$2" 2048
args=(--set data.path=syn.h5 --set run.max_steps=40 --set run.log_every=10 --set run.threads=1
      --set optim.global_batch=64 --set optim.micro_batch=16 --set checkpoint.every_steps=10 --set model.kind=mlp)
"$mpiexec" -n 2 "$trident" train /dev/null --set run.name=straight "${args[@]}" >straight.log 2>&1 \
  || fail "uninterrupted run failed: $(tail -3 straight.log)"

set +e
TRIDENT_TEST_KILL_DURING_SAVE=20 "$mpiexec" -n 2 "$trident" train /dev/null --set run.name=killed "${args[@]}" \
  >killed.log 2>&1
rc=$?
set -e
[ "$rc" != 0 ] || fail "the killed run exited 0"
ls runs/killed/checkpoints
[ "$(cat runs/killed/checkpoints/latest)" = step_0000010.h5 ] || fail "latest does not name the step-10 checkpoint"
"$trident" inspect runs/killed/checkpoints/step_0000010.h5 | grep -q "every block verified" || fail "step 10 damaged"
[ ! -e runs/killed/checkpoints/step_0000020.h5 ] || fail "an uncommitted checkpoint carries the real name"
[ -e runs/killed/checkpoints/step_0000020.h5.tmp ] || fail "the save killed midway left no step_0000020.h5.tmp"

"$mpiexec" -n 2 "$trident" train /dev/null --set run.name=killed "${args[@]}" >resumed.log 2>&1 \
  || fail "restart failed: $(tail -3 resumed.log)"
grep -q "resuming from runs/killed/checkpoints/step_0000010.h5" resumed.log || fail "did not resume from step 10"
# The killed save's file is removed when the next run starts, not left to fill the disk (a save
# of another step would never overwrite it).
grep -q "removed the unfinished saves an earlier run of this folder left in runs/killed/checkpoints: step_0000020.h5.tmp (" \
  resumed.log || fail "the restart did not remove the unfinished step_0000020.h5.tmp"
[ -z "$(find runs/killed/checkpoints -name '*.tmp')" ] || fail "temporary files left: $(ls runs/killed/checkpoints)"
# Every tensor of the final checkpoint (parameters, optimizer state, buffers, RNG states) and its
# training state, bit for bit (trident compare: exit 0 equal, 1 different).
"$trident" compare runs/straight/checkpoints/step_0000040.h5 runs/killed/checkpoints/step_0000040.h5 >compare.log \
  || { cat compare.log; fail "the final checkpoint differs from the uninterrupted run's"; }
tail -1 compare.log
grep -q "^equal: [0-9]* tensors bit for bit and the training state" compare.log || fail "compare did not say equal"
# Two different checkpoints (steps 30 and 40 of one run): exit 1, the training state and the
# tensors that differ named.
set +e
"$trident" compare runs/straight/checkpoints/step_0000030.h5 runs/straight/checkpoints/step_0000040.h5 >different.log
rc=$?
set -e
[ "$rc" = 1 ] || { cat different.log; fail "compare of steps 30 and 40: exit $rc, expected 1"; }
grep -q "^    step: 30 in A, 40 in B" different.log && grep -q "^    /params/head.linear.weight float32 \[4 x 128\]: largest difference" \
  different.log && grep -q "^DIFFERENT: " different.log || { cat different.log; fail "compare did not name what differs"; }
# Ranks that read different files under one checkpoint path (a node's stale copy: an MPMD launch
# with its own working folder per rank) are refused before training, naming the rank and both
# files' steps; a copy missing on one node names that rank. Nothing is written.
mkdir -p node0 node1
cp runs/straight/checkpoints/step_0000040.h5 node0/ck.h5
cp runs/straight/checkpoints/step_0000030.h5 node1/ck.h5
mixed=(train /dev/null "${args[@]}" --set "data.path=$PWD/syn.h5" --set "run.output_dir=$PWD/runs/mixed" --resume ck.h5)
for case in stale missing; do
  [ "$case" = missing ] && rm node1/ck.h5
  set +e
  "$mpiexec" -n 1 -wdir "$PWD/node0" "$trident" "${mixed[@]}" : -n 1 -wdir "$PWD/node1" "$trident" "${mixed[@]}" >"$case.log" 2>&1
  rc=$?
  set -e
  refused "a $case checkpoint copy on rank 1" "$case.log" "$rc"
  [ ! -e runs/mixed ] || fail "a $case checkpoint copy: the run wrote runs/mixed"
done
grep -q "checkpoint ck.h5: rank 1 on .* reads a different file than rank 0 (rank 0: step 40, .*; here: step 30, " stale.log \
  || fail "the stale copy is not named"
grep -q "checkpoint ck.h5: no such file (met by rank 1 on " missing.log || fail "the rank missing the file is not named"

# metrics.jsonl holds each step once, as the uninterrupted run logged it (the killed run's record
# of step 20, after the checkpoint it resumed from, was logged a second time).
records() { sed 's/"samples_per_s":[^,}]*//' "$1"; }
diff <(records runs/straight/metrics.jsonl) <(records runs/killed/metrics.jsonl) \
  || fail "metrics.jsonl differs from the uninterrupted run's"
echo PASS
