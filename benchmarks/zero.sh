#!/usr/bin/env bash
# ZeRO on CPU ranks (MPI backend), through the real `trident train`:
#  1. model-state bytes per rank (report.json, max over ranks) against the ZeRO paper's formula,
#     zero 0-3 x dp 1, 2, 4, 8, for an mlp of ~1.9 M parameters (fp32 AdamW);
#  2. throughput of each stage against zero 0 at np 2 (the cnn, best of REPEATS runs, interleaved).
# Prints both tables and writes benchmarks/results/zero.json.
#   benchmarks/zero.sh [BUILD_DIR]      (dp 8 on a 2-core machine is slow but only runs 2 steps)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
"$trident" prepare-data synthetic --out syn.h5 --train 16384 --test 512 --classes 10 --shape 1x28x28 >/dev/null

# The sum of memory.model_state_bytes and memory.expected_model_state_bytes of a report.json
# (nlohmann writes keys sorted, one per line).
state_bytes() { sed -n '/"model_state_bytes": {/,/}/p' "$1" | grep -o '[0-9]\+' | awk '{s+=$1} END{print s}'; }
expected_bytes() { sed -n 's/.*"expected_model_state_bytes": \([0-9]*\).*/\1/p' "$1"; }

json_memory=""
printf '\nModel-state bytes per rank, mlp 1024x1024 (fp32 AdamW, K = 8), measured = allocated buffers (report.json)\n'
printf '%4s %5s %12s %14s %14s %9s %15s\n' dp zero parameters measured expected "ratio" "peak RSS MiB"
for dp in 1 2 4 8; do
  for zero in 0 1 2 3; do
    name=mem_dp${dp}_z${zero}
    mpiexec -n "$dp" "$trident" train /dev/null --set run.name=$name --set data.path=syn.h5 --set model.kind=mlp \
      --set model.hidden=1024,1024 --set run.max_steps=2 --set run.threads=1 --set parallel.zero=$zero \
      --set parallel.bucket_mb=1 --set optim.global_batch=64 --set optim.micro_batch=8 >$name.log 2>&1
    r=runs/$name/report.json
    n=$(sed -n 's/.*"parameters": \([0-9]*\).*/\1/p' "$r" | head -1)  # the first: the model's (stages list theirs)
    m=$(state_bytes "$r") e=$(expected_bytes "$r")
    ratio=$(awk -v m="$m" -v e="$e" 'BEGIN{printf "%.4f", m/e}')
    rss=$(sed -n 's/.*"peak_bytes": \([0-9]*\).*/\1/p' "$r")
    printf '%4s %5s %12s %14s %14s %9s %15.1f\n' "$dp" "$zero" "$n" "$m" "$e" "$ratio" "$(awk -v b="$rss" 'BEGIN{print b/1048576}')"
    json_memory+="${json_memory:+, }{\"dp\": $dp, \"zero\": $zero, \"parameters\": $n, \"measured_bytes\": $m, \"expected_bytes\": $e, \"peak_rss_bytes\": $rss}"
  done
done

declare -A best
steps=${STEPS:-150}
for round in $(seq "${REPEATS:-2}"); do
  for zero in 0 1 2 3; do
    name=tp_z${zero}_$round
    mpiexec -n 2 "$trident" train /dev/null --set run.name=$name --set data.path=syn.h5 --set model.kind=cnn \
      --set run.max_steps="$steps" --set run.log_every=1000 --set run.threads=1 --set parallel.zero=$zero \
      --set optim.global_batch=128 --set optim.micro_batch=64 >$name.log 2>&1
    s=$(field runs/$name/report.json samples_per_s)
    if [ -z "${best[$zero]:-}" ] || awk -v a="$s" -v b="${best[$zero]}" 'BEGIN{exit !(a>b)}'; then best[$zero]=$s; fi
  done
done
printf '\nThroughput at np 2 (cnn, micro_batch 64 per rank, %s steps, best of %s, interleaved)\n' "$steps" "${REPEATS:-2}"
printf '%5s %12s %14s\n' zero samples/s "vs zero 0"
json_tp=""
for zero in 0 1 2 3; do
  printf '%5s %12.0f %13.1f%%\n' "$zero" "${best[$zero]}" "$(awk -v a="${best[$zero]}" -v b="${best[0]}" 'BEGIN{print 100*a/b}')"
  json_tp+="${json_tp:+, }{\"zero\": $zero, \"samples_per_s\": ${best[$zero]}}"
done
printf '{ "machine": "%s cores", "memory": [%s],\n  "throughput_np2": [%s] }\n' "$(nproc)" "$json_memory" "$json_tp" >"$out/zero.json"
echo "wrote $out/zero.json"
