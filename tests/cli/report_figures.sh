#!/usr/bin/env bash
# report_figures.sh TRIDENT MPIEXEC: deck keys whose effect is a figure in metrics.jsonl or
# report.json, checked against the README's formulas computed here (they had no test):
#   optim.lr_schedule = cosine, optim.warmup_steps, optim.min_lr: the lr of every step, logged
#     each step: lr x (s + 1) / W for step s < W (from 0), then min_lr + (lr - min_lr) x
#     (1 + cos(pi x (s - W) / (T - W - 1))) / 2, ending at min_lr.
#   run.peak_tflops: a GPT's report.json tflops = tokens/s x (6 N + 12 L T d) / 1e12 / ranks, N its
#     parameters but the token and position tables, and mfu = tflops / peak_tflops.
#   checkpoint.every_minutes: a run longer than the period saves before its end.
source "$(dirname "$0")/common.sh" "$1" "$2" 512
"$mpiexec" -n 2 "$trident" train /dev/null --set data.path=syn.h5 --set model.kind=mlp --set model.hidden=16 \
  --set run.threads=1 --set optim.global_batch=32 --set run.max_steps=12 --set run.log_every=1 \
  --set optim.lr_schedule=cosine --set optim.warmup_steps=3 --set optim.lr=0.01 --set optim.min_lr=0.001 \
  --set run.output_dir=runs/cosine >cosine.log 2>&1 || fail "cosine: $(tail -3 cosine.log)"
python3 - runs/cosine/metrics.jsonl <<'PY' || fail "cosine: the logged learning rates are not the schedule's"
import json, math, sys
records = [json.loads(line) for line in open(sys.argv[1])]
lr, min_lr, warmup, steps = 0.01, 0.001, 3, 12
assert [r["step"] for r in records] == list(range(1, steps + 1)), records
for r in records:
    s = r["step"] - 1  # the step's index from 0; record "step" counts steps done
    if s < warmup:
        want = lr * (s + 1) / warmup
    else:
        want = min_lr + (lr - min_lr) * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup - 1))) / 2
    assert abs(r["lr"] - want) <= 1e-9 * lr, (r, want)
assert abs(records[-1]["lr"] - min_lr) <= 1e-12, records[-1]
PY

"$trident" prepare-data synthetic --tokens 20000 --test-tokens 2000 --vocab 64 --out tokens.h5 >/dev/null
"$mpiexec" -n 2 "$trident" train /dev/null --set data.path=tokens.h5 --set model.kind=gpt --set model.layers=2 \
  --set model.heads=2 --set model.d_model=32 --set model.seq_len=16 --set run.threads=1 --set optim.global_batch=8 \
  --set run.max_steps=6 --set run.peak_tflops=0.5 --set run.output_dir=runs/gpt >gpt.log 2>&1 ||
  fail "gpt: $(tail -3 gpt.log)"
python3 - runs/gpt/report.json <<'PY' || fail "gpt: tflops or mfu in report.json are not the README's formula"
import json, sys
r = json.load(open(sys.argv[1]))
m, t = r["deck"]["model"], r["throughput"]
vocab = 64  # model.vocab = 0: the dataset's
L, T, d = m["layers"], m["seq_len"], m["d_model"]
n = r["parameters"] - (vocab + T) * d
tokens_per_s = t["samples_per_s"] * T
assert abs(t["tokens_per_s"] - tokens_per_s) <= 1e-9 * tokens_per_s, (t, tokens_per_s)
tflops = tokens_per_s * (6 * n + 12 * L * T * d) / 1e12 / r["layout"]["world"]
assert abs(t["tflops"] - tflops) <= 1e-9 * tflops, (t, tflops)
assert t["peak_tflops"] == 0.5 and abs(t["mfu"] - tflops / 0.5) <= 1e-9 * tflops, t
PY

# 0.0005 minutes = 30 ms; 400 steps of this mlp took 0.66 s here (about 20 periods), so a machine
# 5 times faster still has saves before the last step.
"$mpiexec" -n 2 "$trident" train /dev/null --set data.path=syn.h5 --set model.kind=mlp --set model.hidden=16 \
  --set run.threads=1 --set optim.global_batch=32 --set run.max_steps=400 --set checkpoint.every_minutes=0.0005 \
  --set checkpoint.keep_last=1000 --set run.output_dir=runs/minutes >minutes.log 2>&1 || fail "minutes: $(tail -3 minutes.log)"
saves=$(ls runs/minutes/checkpoints | grep -c '^step_.*\.h5$')
[ "$saves" -ge 2 ] || fail "minutes: $saves checkpoint(s), expected saves before the last: $(ls runs/minutes/checkpoints)"
echo "every_minutes: $saves checkpoints in 400 steps"
echo PASS
