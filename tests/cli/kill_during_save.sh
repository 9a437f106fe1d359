#!/usr/bin/env bash
# kill_during_save.sh TRIDENT MPIEXEC: every rank is SIGKILLed while a checkpoint is being saved
# (after its temporary file is written, before it is committed). The previous checkpoint and
# `latest` stay intact, the restart removes the unfinished file and resumes from that previous
# checkpoint, and the final
# parameters equal those of a run that was never killed.
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
# Every parameter and optimizer state, bit for bit: same layout, so the same blocks, whose stored
# CRC-32s `trident inspect` lists (after verifying them against the data).
tensors() { "$trident" inspect "$1" | sed -n '/^\/\(params\|optim\)\//,+1p'; }
[ -n "$(tensors runs/straight/checkpoints/step_0000040.h5)" ] || fail "inspect lists no tensors"
diff <(tensors runs/straight/checkpoints/step_0000040.h5) <(tensors runs/killed/checkpoints/step_0000040.h5) \
  || fail "final parameters differ from the uninterrupted run's"
# metrics.jsonl holds each step once, as the uninterrupted run logged it (the killed run's record
# of step 20, after the checkpoint it resumed from, was logged a second time).
records() { sed 's/"samples_per_s":[^,}]*//' "$1"; }
diff <(records runs/straight/metrics.jsonl) <(records runs/killed/metrics.jsonl) \
  || fail "metrics.jsonl differs from the uninterrupted run's"
echo PASS
