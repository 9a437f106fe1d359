#!/usr/bin/env bash
# run_length.sh TRIDENT MPIEXEC: how long a run is, at the edges.
#   max_steps / epochs  a run of more samples (steps x optim.global_batch) than 64 bits count is
#                       refused naming the key and its limit (exit 2, nothing written). max_steps
#                       2^63-1 faulted reading samples at no index (exit 1); epochs 2^63-1 wrapped
#                       to -16 steps and exited 0 having trained nothing.
#   warmup_steps        longer than the run (a deck's warmup kept while max_steps was cut): the log
#                       says where the learning rate ends, checked against metrics.jsonl's last lr.
source "$(dirname "$0")/common.sh" "$1" "$2" 512
args=(--set data.path=syn.h5 --set model.kind=mlp --set model.hidden=16 --set run.threads=1 --set optim.global_batch=32)
expect_refused() {  # NAME REGEX ARGS...
  train_refused "$1" "$2" "${args[@]}" "${@:3}"
  [ ! -e runs ] || fail "$1: the refused run wrote $(ls runs)"
}
# 512 samples / 32 = 16 steps per epoch; (2^63-1) / 32 = 288230376151711743 steps.
expect_refused max_steps "run.max_steps: 9223372036854775807 is out of range \(at most 288230376151711743 steps of optim.global_batch = 32 samples\)" \
  --set run.max_steps=9223372036854775807
expect_refused epochs "run.epochs: 9223372036854775807 is out of range \(at most 18014398509481983 epochs of 16 steps" \
  --set run.epochs=9223372036854775807

# At the limit it trains: with optim.global_batch = 1 the limit is 2^63-1 steps itself, where the
# epoch count's rounding (steps + steps per epoch - 1) overflowed and faulted. Stopped by SIGINT
# to mpiexec once it has logged step 10 (the rank checkpoints and stops; Hydra's own exit code
# after a Ctrl-C is 0, so the log is judged).
"$mpiexec" -n 1 "$trident" train /dev/null "${args[@]}" --set optim.global_batch=1 --set optim.micro_batch=1 \
  --set run.max_steps=9223372036854775807 --set run.log_every=10 --set run.output_dir=runs_at_limit >limit.log 2>&1 &
launcher=$!
for _ in $(seq 300); do grep -q "step 10/" limit.log && break; sleep 0.1; done
kill -INT "$launcher"
wait "$launcher" || true
grep -q "step 10/9223372036854775807 " limit.log || fail "at the limit: no step 10 of 2^63-1: $(tail -3 limit.log)"
grep -q "trident: stopped by a signal after step [0-9]*; checkpoint committed" limit.log ||
  fail "at the limit: not stopped with its checkpoint: $(tail -3 limit.log)"
rm -rf runs_at_limit

"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=4 --set run.log_every=1 \
  --set optim.warmup_steps=100 --set optim.lr_schedule=cosine --set optim.lr=0.01 >warmup.log 2>&1 ||
  fail "warmup: $(tail -3 warmup.log)"
# Linear warmup: step s (from 0) has lr x (s + 1) / warmup_steps, so step 3 has 0.01 x 4 / 100.
grep -q "note: optim.warmup_steps = 100 is longer than this run's 4 steps: the learning rate ends at 4.000e-04, below optim.lr = 1.000e-02, and its cosine decay never starts" warmup.log ||
  fail "warmup: no note: $(grep note warmup.log)"
python3 - runs/trident/metrics.jsonl <<'PY' || fail "warmup: metrics.jsonl's last lr is not 4e-4"
import json, sys
last = [json.loads(line) for line in open(sys.argv[1])][-1]
assert last["step"] == 4 and abs(last["lr"] - 4e-4) < 1e-12, last
PY
[ "$(grep -c 'note: optim.warmup_steps' warmup.log)" = 1 ] || fail "warmup: the note is printed more than once"
echo PASS
