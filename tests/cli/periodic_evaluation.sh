#!/usr/bin/env bash
# periodic_evaluation.sh TRIDENT MPIEXEC: run.eval_every_steps evaluates the test split within the
# epochs too, each evaluation a record of evaluations.jsonl (the epochs' as well), and changes
# nothing the training uses: every final checkpoint equals, bit for bit (trident compare), that of
# the same run without it, at dp 2, under ZeRO-3, at pp 2 and with run.eval_samples (which cuts
# the evaluations within the epochs to the split's first samples). An evaluation at step 12 gives
# the test figures of a run that ends at step 12 (report.json). A resume from an earlier
# checkpoint keeps the records up to it and logs the same ones after it; a stop signal during an
# evaluation within an epoch saves that step (or commits that step's background save in flight)
# and exits 3, and the resumed run ends as the uninterrupted one.
source "$(dirname "$0")/common.sh" "$1" "$2" 64
# 1024 samples, 64 a step: 16 steps an epoch; 40 steps end in the third epoch. Noisy enough that
# the test figures go on changing (syn.h5's test accuracy is 100% by step 10).
"$trident" prepare-data synthetic --out noisy.h5 --train 1024 --test 256 --classes 10 --shape 1x16x16 --noise 3 >/dev/null
args=(--set data.path=noisy.h5 --set run.max_steps=40 --set run.log_every=4 --set run.threads=1
      --set optim.global_batch=64 --set optim.micro_batch=16)
train() {  # NAME ARGS...: a 2-rank run into runs/NAME
  local name=$1
  shift
  "$mpiexec" -n 2 "$trident" train /dev/null --set run.name="$name" "${args[@]}" "$@" >"$name.log" 2>&1 \
    || fail "$name: $(tail -3 "$name.log")"
}
same_checkpoint() {  # A B: runs/A's and runs/B's checkpoints of step 40, every tensor and the training state
  "$trident" compare "runs/$1/checkpoints/step_0000040.h5" "runs/$2/checkpoints/step_0000040.h5" >"compare_$1_$2.log" \
    || { cat "compare_$1_$2.log"; fail "$1 and $2 trained differently"; }
}
# records FILE: "step end_of_epoch test_loss test_accuracy" a line, at full precision
records() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["step"], r["end_of_epoch"], repr(r["test_loss"]), repr(r["test_accuracy"]))
PY
}

train plain
train every --set run.eval_every_steps=6
same_checkpoint plain every
steps=$(records runs/every/evaluations.jsonl | awk '{printf "%s%s", sep, $1; sep=","}')
[ "$steps" = 6,12,16,18,24,30,32,36,40 ] || fail "evaluations at steps $steps, expected 6,12,16,18,24,30,32,36,40"
[ "$(records runs/every/evaluations.jsonl | awk '$2 == "True" {printf "%s%s", sep, $1; sep=","}')" = 16,32,40 ] \
  || fail "the epochs' evaluations are not the ones marked end_of_epoch"
[ "$(records runs/plain/evaluations.jsonl)" = "$(records runs/every/evaluations.jsonl | grep True)" ] \
  || fail "the epochs' evaluations differ from those of the run without run.eval_every_steps"
grep -q "epoch 1/3 | step 6/40 | test loss [0-9.]* | test accuracy [0-9.]*% | 256 samples evaluated in" every.log \
  || fail "no progress line for the evaluation at step 6"
[ "$(grep -c '"loss"' runs/every/metrics.jsonl)" = 10 ] || fail "metrics.jsonl has not its 10 records"
# The final figures of report.json are the last epoch's evaluation.
python3 - runs/every/report.json runs/every/evaluations.jsonl <<'PY' || fail "report.json's final figures are not the last evaluation's"
import json, sys
final = json.load(open(sys.argv[1]))["final"]
last = [json.loads(l) for l in open(sys.argv[2])][-1]
assert (final["test_loss"], final["test_accuracy"]) == (last["test_loss"], last["test_accuracy"]), (final, last)
PY
# The model evaluated at step 12 is the one a 12-step run ends with.
train twelve --set run.max_steps=12
python3 - runs/twelve/report.json runs/every/evaluations.jsonl <<'PY' || fail "the evaluation at step 12 is not a 12-step run's"
import json, sys
final = json.load(open(sys.argv[1]))["final"]
at12 = [r for r in map(json.loads, open(sys.argv[2])) if r["step"] == 12][0]
assert (final["test_loss"], final["test_accuracy"]) == (at12["test_loss"], at12["test_accuracy"]), (final, at12)
print("step 12: test loss", at12["test_loss"], "test accuracy", at12["test_accuracy"], "as a 12-step run's")
PY
# run.eval_samples: the evaluations within the epochs take the test split's first 100 samples (of
# 256), the epochs' all of them; the training is the same again.
train sampled --set run.eval_every_steps=6 --set run.eval_samples=100
same_checkpoint plain sampled
python3 - runs/sampled/evaluations.jsonl runs/every/evaluations.jsonl <<'PY' || fail "run.eval_samples: evaluations.jsonl"
import json, sys
sampled, whole = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
assert [r["samples"] for r in sampled] == [256 if r["end_of_epoch"] else 100 for r in sampled], sampled
assert [r["samples"] for r in whole] == [256] * len(whole), whole
for a, b in zip(sampled, whole):
    assert a["step"] == b["step"]
    same = (a["test_loss"], a["test_accuracy"]) == (b["test_loss"], b["test_accuracy"])
    assert same == a["end_of_epoch"], (a, b)  # 100 samples give other figures than 256
PY
grep -q "step 6/40 | test loss [0-9.]* | test accuracy [0-9.]*% | 100 of 256 samples evaluated in" sampled.log \
  || fail "run.eval_samples: the progress line does not say 100 of 256 samples: $(grep 'step 6/40' sampled.log)"
# Other layouts: the evaluations within the epochs gather ZeRO-3's layers and drain the pipeline.
train zero3 --set parallel.zero=3
train zero3_every --set parallel.zero=3 --set run.eval_every_steps=5
same_checkpoint zero3 zero3_every
train pp2 --set parallel.pp=2
train pp2_every --set parallel.pp=2 --set run.eval_every_steps=5
same_checkpoint pp2 pp2_every
echo "final checkpoints the same with and without run.eval_every_steps at dp 2, ZeRO-3 and pp 2"

# A resume from step 24 in the run's own folder: the records after 24 are dropped and logged again,
# the same.
cp runs/every/evaluations.jsonl first_life.jsonl
train kept --set run.eval_every_steps=6 --set checkpoint.every_steps=12 --set checkpoint.keep_last=4
cp runs/kept/evaluations.jsonl kept_first.jsonl
"$mpiexec" -n 2 "$trident" train /dev/null --set run.name=kept "${args[@]}" --set run.eval_every_steps=6 \
  --set checkpoint.every_steps=12 --set checkpoint.keep_last=4 --resume runs/kept/checkpoints/step_0000024.h5 \
  >kept_resumed.log 2>&1 || fail "resume from step 24: $(tail -3 kept_resumed.log)"
grep -q "evaluations.jsonl: 4 record(s) of steps after 24 dropped" kept_resumed.log \
  || fail "no word of evaluations.jsonl's records after step 24 dropped: $(grep jsonl kept_resumed.log)"
[ "$(records runs/kept/evaluations.jsonl)" = "$(records kept_first.jsonl)" ] \
  || fail "the resumed run's evaluations differ: $(diff <(records kept_first.jsonl) <(records runs/kept/evaluations.jsonl))"
[ "$(records runs/kept/evaluations.jsonl)" = "$(records first_life.jsonl)" ] || fail "saving changed the evaluations"

# A stop signal during the evaluation at step 6 (its chunks slowed): step 6 saved, exit 3; the
# resumed run goes on from step 7 and ends as the uninterrupted one, without that evaluation.
stop_during_evaluation() {  # NAME [VAR=VALUE...] -- [ARGS...]: a run into runs/NAME signalled in its first evaluation
  local name=$1 marker=evaluating_$1_$$ envs=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env TRIDENT_TEST_SLOW_EVALUATION_MS=2000 "${envs[@]}" "$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" \
    --set run.eval_every_steps=6 --set "run.name=$marker" --set "run.output_dir=runs/$name" "$@" >"$name.log" 2>&1 &
  local launcher=$! rc
  for _ in $(seq 600); do grep -q "an evaluation chunk slowed" "$name.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "an evaluation chunk slowed" "$name.log" || fail "$name: no evaluation started within 60 s: $(tail -3 "$name.log")"
  pkill -USR1 -f "^$trident train .*run.name=$marker" || fail "$name: no rank to signal: $(tail -3 "$name.log")"
  set +e
  wait "$launcher"
  rc=$?
  set -e
  [ "$rc" = 3 ] || fail "$name: exit code $rc after a signal during an evaluation, expected 3: $(tail -3 "$name.log")"
  grep -q "step 6/40: its evaluation of the test split is left unfinished for a stop signal" "$name.log" \
    || fail "$name: no word of the evaluation left unfinished: $(tail -3 "$name.log")"
  [ "$(cat "runs/$name/checkpoints/latest")" = step_0000006.h5 ] || fail "$name: latest does not name step 6"
  [ ! -s "runs/$name/evaluations.jsonl" ] || fail "$name: the unfinished evaluation left a record"
  "$mpiexec" -n 2 "$trident" train /dev/null --set run.name="$name" "${args[@]}" --set run.eval_every_steps=6 \
    --set "run.output_dir=runs/$name" "$@" --resume auto >"${name}_resumed.log" 2>&1 \
    || fail "$name resumed: $(tail -3 "${name}_resumed.log")"
  same_checkpoint every "$name"
  [ "$(records "runs/$name/evaluations.jsonl")" = "$(records runs/every/evaluations.jsonl | tail -n +2)" ] \
    || fail "$name: the resumed run's evaluations are not the uninterrupted run's after step 6"
}
stop_during_evaluation stopped --
echo "a stop during the evaluation at step 6: exit 3, step 6 saved; the resumed run ends as the uninterrupted one"
# The same with step 6's background save in flight (checkpoint.every_steps = 6, checkpoint.async),
# its writer slowed so that its copies of the model are taken during the evaluation: the stop
# commits that save instead of writing another, and the resumed run still ends as the
# uninterrupted one (the evaluation changed nothing the copies took).
stop_during_evaluation in_flight TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS=1500 -- --set checkpoint.every_steps=6
grep -q "checkpoint runs/in_flight/checkpoints/step_0000006.h5 written in the background" in_flight.log \
  || fail "in_flight: step 6's background save was not the one committed: $(grep checkpoint in_flight.log)"
[ "$(grep -c 'step_0000006.h5 written' in_flight.log)" = 1 ] || fail "in_flight: step 6 saved twice: $(grep written in_flight.log)"
echo "the same with step 6's background save in flight: that save committed, the resumed run the same"
echo PASS
