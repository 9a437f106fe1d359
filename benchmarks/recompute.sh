#!/usr/bin/env bash
# model.recompute (full activation recomputation) against stored activations, back to back: a GPT
# on synthetic byte tokens, one rank, fp32 and bf16, its peak resident set (report.json's
# memory.peak_bytes: the activations are the run's largest memory) and its speed (median
# samples/s of the timed windows after the first, metrics.jsonl). On a GPU the same comparison is
# report.json's memory.peak_device_bytes.
#   benchmarks/recompute.sh [BUILD_DIR]    env: STEPS (12) LAYERS (8) D_MODEL (256) SEQ (512)
#                                                MICRO (8) THREADS (0: every CPU) PRECISIONS ("fp32 bf16")
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
steps=${STEPS:-12} layers=${LAYERS:-8} d_model=${D_MODEL:-256} seq=${SEQ:-512} micro=${MICRO:-8}
"$trident" prepare-data synthetic --out tokens.h5 --tokens 2000000 --test-tokens 65536 --vocab 256 >/dev/null

measure() {  # NAME PRECISION RECOMPUTE: "samples/s peak_bytes"
  local name=$1
  mpiexec -n 1 "$trident" train /dev/null --set run.name="$name" --set data.path=tokens.h5 --set model.kind=gpt \
    --set model.layers="$layers" --set model.heads=4 --set model.d_model="$d_model" --set model.seq_len="$seq" \
    --set optim.precision="$2" --set model.recompute="$3" --set run.max_steps="$steps" \
    --set run.log_every=$((steps / 4)) --set run.threads="${THREADS:-0}" --set optim.global_batch="$micro" \
    --set optim.micro_batch="$micro" --set checkpoint.every_steps=0 >"$name.log" 2>&1 ||
    { tail -5 "$name.log"; exit 1; }
  python3 -c '
import json, sys
rates = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1])][1:]
print(sorted(rates)[len(rates) // 2], json.load(open(sys.argv[2]))["memory"]["peak_bytes"])' \
    "runs/$name/metrics.jsonl" "runs/$name/report.json"
}

rows=""
for precision in ${PRECISIONS:-fp32 bf16}; do
  stored=$(measure "stored_$precision" "$precision" false)
  recomputed=$(measure "recomputed_$precision" "$precision" true)
  rows+="$precision $stored $recomputed"$'\n'
  echo "measured: $precision: stored $stored, recomputed $recomputed (samples/s, peak bytes)"
done
printf '%s' "$rows" | python3 -c '
import json, sys
rows = [l.split() for l in sys.stdin if l.strip()]
layers, d, seq, micro = sys.argv[3:7]
print("\nGPT (%s blocks, d_model %s, seq %s, micro-batch %s, one rank) with model.recompute against without" %
      (layers, d, seq, micro))
print("| precision | stored samples/s | peak RSS | recomputed samples/s | peak RSS | speed | peak RSS saved |")
print("|---|---:|---:|---:|---:|---:|---:|")
out = []
for precision, s, sp, r, rp in rows:
    s, sp, r, rp = float(s), int(sp), float(r), int(rp)
    print("| %s | %.1f | %.0f MiB | %.1f | %.0f MiB | %.2fx | %.0f MiB |" %
          (precision, s, sp / 2**20, r, rp / 2**20, r / s, (sp - rp) / 2**20))
    out.append({"precision": precision, "stored_samples_per_s": s, "stored_peak_bytes": sp,
                "recomputed_samples_per_s": r, "recomputed_peak_bytes": rp})
json.dump({"machine": "%s cores" % sys.argv[2], "layers": int(layers), "d_model": int(d), "seq_len": int(seq),
           "micro_batch": int(micro), "results": out}, open(sys.argv[1], "w"), indent=2)
' "$out/recompute.json" "$(nproc)" "$layers" "$d_model" "$seq" "$micro"
echo "(JSON: $out/recompute.json)"
