#!/usr/bin/env bash
# Pipeline bubble: measured (1 - compute / step time, mean over ranks, report.json) against
# (p - 1) / (m + p - 1) for m = 1, 2, 4, 8, 16 micro-batches, both schedules, on MPI ranks;
# and each stage's peak activation memory (micro-batches alive x activation bytes) for gpipe
# against 1f1b. Model: an mlp of four equal 1024 x 1024 layers (input 1x32x32) and a small head, cut into equal stages.
#   benchmarks/pipeline.sh [BUILD_DIR]         PP=2 (default) or PP=4 (needs >= 4 cores); MPIEXEC (mpiexec)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
pp=${PP:-2}
steps=${STEPS:-30}
"$trident" prepare-data synthetic --out syn.h5 --train 8192 --test 256 --classes 10 --shape 1x32x32 >/dev/null
# The largest peak_activation_bytes over the stages.
peak_activations() { sed -n 's/.*"peak_activation_bytes": \([0-9]*\).*/\1/p' "$1" | sort -n | tail -1; }

printf '\nPipeline bubble, pp %s on %s MPI ranks, mlp 4 x 1024x1024 (micro_batch 32), %s steps\n' "$pp" "$pp" "$steps"
printf '%-6s %4s %10s %10s %10s %22s\n' schedule m measured expected "rel. err" "peak activation bytes"
json=""
for schedule in gpipe 1f1b; do
  for m in 1 2 4 8 16; do
    name=${schedule}_m$m
    "${MPIEXEC:-mpiexec}" -n "$pp" "$trident" train /dev/null --set run.name=$name --set data.path=syn.h5 --set model.kind=mlp \
      --set model.hidden=1024,1024,1024,1024 --set parallel.pp="$pp" --set parallel.schedule=$schedule \
      --set run.max_steps="$steps" --set run.log_every=1000 --set run.threads=1 --set data.prefetch=2 \
      --set optim.micro_batch=32 --set optim.global_batch=$((32 * m)) >$name.log 2>&1
    r=runs/$name/report.json
    measured=$(field "$r" bubble_fraction) expected=$(field "$r" expected_bubble_fraction) peak=$(peak_activations "$r")
    err=$(awk -v a="$measured" -v b="$expected" 'BEGIN{printf "%.1f%%", 100*(a-b)/b}')
    printf '%-6s %4s %10.3f %10.3f %10s %22s\n' "$schedule" "$m" "$measured" "$expected" "$err" "$peak"
    json+="${json:+, }{\"schedule\": \"$schedule\", \"m\": $m, \"bubble\": $measured, \"expected\": $expected, \"peak_activation_bytes\": $peak}"
  done
done
printf '{ "pp": %s, "machine": "%s cores", "results": [%s] }\n' "$pp" "$(nproc)" "$json" >"$out/pipeline_pp$pp.json"
echo "wrote $out/pipeline_pp$pp.json"
