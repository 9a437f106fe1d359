#!/usr/bin/env bash
# DP throughput of the cnn at np 1 and np 2 with the per-rank batch fixed (weak scaling:
# micro_batch 64 per rank, no accumulation, 1 thread per rank), through the real `trident
# train`, plus the gradient all-reduce against raw MPI_Allreduce in the same run.
# Prints a table and writes benchmarks/results/dp_scaling.json.
#   benchmarks/dp_scaling.sh [BUILD_DIR]      (after scripts/build.sh)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
steps=${STEPS:-200}
"$trident" prepare-data synthetic --out syn.h5 --train 32768 --test 1024 --classes 10 --shape 1x28x28 >/dev/null

# one NAME NP THREADS BIND -> "samples/s step_time_s comm_exposed_s" of one run
one() {
  local name=$1 np=$2 threads=$3 bind=$4
  mpiexec -n "$np" $bind "$trident" train /dev/null --set run.name="$name" --set data.path=syn.h5 \
    --set model.kind=cnn --set run.max_steps="$steps" --set run.log_every=1000 --set run.threads="$threads" \
    --set optim.micro_batch=64 --set optim.global_batch=$((64 * np)) >"$name.log" 2>&1
  local r=runs/$name/report.json
  echo "$(field "$r" samples_per_s) $(field "$r" step_time_s) $(field "$r" comm_exposed)"
}
# The configurations run interleaved, REPEATS rounds, and each keeps its best round: this VM's
# speed drifts by 20-30% over minutes, and other processes only ever slow a run down.
configs=("np1 1 1" "np2 2 1" "np1_2threads 1 2" "np1_bound 1 1 -bind-to-core" "np2_bound 2 1 -bind-to-core")
declare -A best
for round in $(seq "${REPEATS:-3}"); do
  for c in "${configs[@]}"; do
    read -r name np threads bind <<<"$c"
    line=$(one "$name$round" "$np" "$threads" "${bind/-bind-to-core/-bind-to core}")
    if [ -z "${best[$name]:-}" ] || awk -v a="${line%% *}" -v b="${best[$name]%% *}" 'BEGIN{exit !(a>b)}'; then
      best[$name]=$line
    fi
  done
done
ms() { awk -v t="$1" 'BEGIN{printf "%.2f", t*1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
read -r s1 t1 c1 <<<"${best[np1]}"
read -r s2 t2 c2 <<<"${best[np2]}"
read -r s1t2 t1t2 c1t2 <<<"${best[np1_2threads]}"
read -r b1 bt1 bc1 <<<"${best[np1_bound]}"
read -r b2 bt2 bc2 <<<"${best[np2_bound]}"
speedup=$(ratio "$s2" "$s1")
speedup_bound=$(ratio "$b2" "$b1")

printf '\nDP throughput, cnn, micro_batch 64 per rank, %s steps, best of %s runs (trident train, synthetic 1x28x28)\n' "$steps" "${REPEATS:-3}"
printf '%-40s %6s %11s %13s %15s\n' "run" "ranks" "samples/s" "step time ms" "comm exposed s"
row() { printf '%-40s %6s %11.0f %13s %15.3f\n' "$1" "$2" "$3" "$(ms "$4")" "$5"; }
row "np 1, 1 thread" 1 "$s1" "$t1" "$c1"
row "np 2, 1 thread each" 2 "$s2" "$t2" "$c2"
row "np 1, 2 threads (one-process reference)" 1 "$s1t2" "$t1t2" "$c1t2"
row "np 1, 1 thread, mpiexec -bind-to core" 1 "$b1" "$bt1" "$bc1"
row "np 2, 1 thread each, -bind-to core" 2 "$b2" "$bt2" "$bc2"
printf 'np 2 / np 1 samples/s: %sx unbound, %sx bound to cores (target >= 1.8x)\n\n' "$speedup" "$speedup_bound"

mpiexec -n 2 "$build/benchmarks/trident_bench_allreduce" --json allreduce.json

cat >"$out/dp_scaling.json" <<JSON
{ "machine": "$(nproc) cores, $(hostname)", "steps": $steps,
  "throughput": { "np1_samples_per_s": $s1, "np2_samples_per_s": $s2, "np1_2threads_samples_per_s": $s1t2,
                  "np1_step_time_s": $t1, "np2_step_time_s": $t2, "speedup_np2_over_np1": $speedup,
                  "bound": { "np1_samples_per_s": $b1, "np2_samples_per_s": $b2, "speedup_np2_over_np1": $speedup_bound } },
  "allreduce": $(cat allreduce.json) }
JSON
echo "wrote $out/dp_scaling.json"
