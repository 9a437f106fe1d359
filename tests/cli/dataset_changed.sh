#!/usr/bin/env bash
# dataset_changed.sh TRIDENT MPIEXEC: the dataset truncated in place while a run reads it (a node's
# copy staged again with cp). HDF5 reads zeros past a file's end without an error, so the run
# trained on them (loss to chance level, exit 0 at the end) and pruned its good checkpoints. Now
# the next read faults naming the file, and the checkpoints written before stay good. A touch
# before (same size) is warned about once and training goes on.
source "$(dirname "$0")/common.sh" "$1" "$2" 4096
cp syn.h5 live.h5
"$mpiexec" -n 2 "$trident" train /dev/null --set data.path=live.h5 --set model.kind=mlp --set run.threads=1 \
  --set optim.global_batch=64 --set run.max_steps=1000000 --set run.log_every=10 --set checkpoint.every_steps=20 \
  --set checkpoint.async=false >run.log 2>&1 &
pid=$!
checkpoints() { ls runs/trident/checkpoints 2>/dev/null | grep -c '^step_.*\.h5$'; }
for _ in $(seq 600); do  # until a first checkpoint is committed (60 s at most)
  [ "$(checkpoints)" -ge 1 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
touch live.h5  # a touch (against a scratch purge) changes no content: the run goes on, warned
# Truncate only once the touch was seen: in a fast run a second checkpoint can be there before the
# touch, and a read then met the size change first (the warning never came).
touch_warning="data.path live.h5: its modification time changed while this run reads it (its size did not)"
for _ in $(seq 600); do  # until rank 0 warned of the touch (60 s at most)
  grep -q "$touch_warning" run.log && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
grep -q "$touch_warning" run.log ||
  { kill -9 $pid; pkill -9 -f "data.path=live.h5" || true; fail "no warning within 60 s of the touch: $(tail -3 run.log)"; }
truncate -s 200000 live.h5
for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then
  kill -9 $pid; pkill -9 -f "data.path=live.h5" || true  # mpiexec and its ranks
  fail "still training 60 s after its dataset was truncated"
fi
set +e
wait $pid
rc=$?
set -e
tail -5 run.log
[ "$rc" != 0 ] || fail "exit code 0 after training on a truncated dataset"
[ "$(grep -c "$touch_warning" run.log)" = 1 ] || fail "the touch was warned about more than once"
grep -q "data.path live.h5 changed size while this run reads it (4[0-9]* bytes when opened, 200000 now)" run.log ||
  fail "no message naming the changed file and both sizes"
latest=runs/trident/checkpoints/$(cat runs/trident/checkpoints/latest)
"$trident" inspect "$latest" | grep -q "every block verified" || fail "$latest does not verify"
echo PASS
