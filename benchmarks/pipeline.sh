#!/usr/bin/env bash
# Pipeline bubble per schedule: measured (1 - compute / step time, mean over ranks, report.json)
# against the schedule's figure for equal op times (report.json's expected_bubble_fraction,
# simulated from its op lists) and its closed form, for m = 2, 4, 8, 16 micro-batches, on MPI
# ranks; samples/s; each stage's peak activation memory (micro-batches alive x activation bytes).
#  1. Schedules: an mlp of eight equal 1024 x 1024 layers and a small head (input 1x32x32), cut by
#     measured time (parallel.balance = time): gpipe, 1f1b, zb-h1, interleaved (2 chunks per rank).
#  2. The cut: the cnn (block1, block2, head), whose two convolution blocks hold 40% of the
#     parameters and nearly all the compute, under 1f1b cut by parameters (blocks | head) and by
#     measured time (block1 | block2 + head).
#   benchmarks/pipeline.sh [BUILD_DIR]         PP=2 (default) or PP=4 (needs >= 4 cores); MPIEXEC (mpiexec)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
pp=${PP:-2}
steps=${STEPS:-20}
"$trident" prepare-data synthetic --out syn.h5 --train 8192 --test 256 --classes 10 --shape 1x32x32 >/dev/null
# The largest peak_activation_bytes over the stages.
peak_activations() { sed -n 's/.*"peak_activation_bytes": \([0-9]*\).*/\1/p' "$1" | sort -n | tail -1; }
# Closed forms (parallel/pipeline_schedule.hpp).
formula() {
  case $1 in
    zb-h1) awk -v p="$pp" -v m="$2" 'BEGIN{printf "%.3f", (p-1)/(3*m+p-1)}' ;;
    interleaved) awk -v p="$pp" -v m="$2" 'BEGIN{printf "%.3f", (p-1)/(2*m+p-1)}' ;;
    *) awk -v p="$pp" -v m="$2" 'BEGIN{printf "%.3f", (p-1)/(m+p-1)}' ;;
  esac
}

mlp="--set model.kind=mlp --set model.hidden=1024,1024,1024,1024,1024,1024,1024,1024"
cnn="--set model.kind=cnn"
printf '\nPipeline bubble, pp %s on %s MPI ranks (micro_batch 32, input 1x32x32), %s steps\n' "$pp" "$pp" "$steps"
printf '%-5s %-11s %-7s %4s %9s %9s %8s %9s %12s %22s\n' model schedule cut m measured expected formula "rel. err" samples/s \
  "peak activation bytes"
json=""
for runs in "mlp gpipe time" "mlp 1f1b time" "mlp interleaved time" "mlp zb-h1 time" "cnn 1f1b params" "cnn 1f1b time"; do
  for m in 2 4 8 16; do
    set -- $runs
    model=$1 schedule=$2 balance=$3 name=${1}_${2}_${3}_m$m
    [ "$model" = mlp ] && model_flags=$mlp || model_flags=$cnn
    [ "$schedule" = interleaved ] && model_flags+=" --set parallel.virtual_stages=2"
    "${MPIEXEC:-mpiexec}" -n "$pp" "$trident" train /dev/null --set run.name=$name --set data.path=syn.h5 $model_flags \
      --set parallel.pp="$pp" --set parallel.schedule=$schedule --set parallel.balance=$balance \
      --set run.max_steps="$steps" --set run.log_every=1000 --set run.threads=1 --set data.prefetch=2 \
      --set optim.micro_batch=32 --set optim.global_batch=$((32 * m)) >$name.log 2>&1
    r=runs/$name/report.json
    measured=$(field "$r" bubble_fraction) expected=$(field "$r" expected_bubble_fraction) peak=$(peak_activations "$r")
    rate=$(field "$r" samples_per_s) closed=$(formula "$schedule" "$m")
    err=$(awk -v a="$measured" -v b="$expected" 'BEGIN{printf "%.1f%%", 100*(a-b)/b}')
    printf '%-5s %-11s %-7s %4s %9.3f %9.3f %8s %9s %12.0f %22s\n' "$model" "$schedule" "$balance" "$m" "$measured" \
      "$expected" "$closed" "$err" "$rate" "$peak"
    json+="${json:+, }{\"model\": \"$model\", \"schedule\": \"$schedule\", \"balance\": \"$balance\", \"m\": $m, \"bubble\": $measured, \"expected\": $expected, \"formula\": $closed, \"samples_per_s\": $rate, \"peak_activation_bytes\": $peak}"
  done
done
printf '{ "pp": %s, "machine": "%s cores", "results": [%s] }\n' "$pp" "$(nproc)" "$json" >"$out/pipeline_pp$pp.json"
echo "wrote $out/pipeline_pp$pp.json"
