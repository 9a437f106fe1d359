#!/usr/bin/env bash
# Host memory and time at start-up against the layout: a GPT trained 1 step at pp 1, 2 and 4 (one
# rank per stage), and under ZeRO-3 at dp 2 and 4 (pp 1). Each rank makes only its stage's layers
# (each layer's weights are drawn from a seed of its own), so its start-up peak and time follow the
# stage, not the whole model; under ZeRO-3 each layer is cut to the rank's partition as it is made,
# so the peak follows the partition. On GPU nodes this is most of what a run needs of the host: 8
# ranks a node each holding the whole model would need 8 whole fp32 copies at start-up.
#
# Printed per layout: the whole model's fp32 parameters and the largest share of them a rank keeps
# (its stage, or its ZeRO-3 partition: trident plan), the start-up peak (report.json
# memory.startup_peak_bytes: max over ranks, once the stage is built and placed), the run's peak,
# and the reference a rank would need holding the whole model: the libraries' own footprint (the
# start-up peak of a 1-layer, d_model 64 GPT) + the whole model; and the start-up time
# (goodput.jsonl startup_s: from trident's start to its first step).
#   benchmarks/startup_memory.sh [BUILD_DIR]   LAYERS=8 D_MODEL=1024 PPS="1 2 4" ZERO3_DPS="2 4"
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
layers=${LAYERS:-8}
d_model=${D_MODEL:-1024}
"$trident" prepare-data synthetic --out tokens.h5 --tokens 100000 --test-tokens 1040 --vocab 256 >/dev/null
common=(--set data.path=tokens.h5 --set model.kind=gpt --set model.heads=8 --set model.seq_len=64
        --set optim.global_batch=4 --set optim.micro_batch=1 --set run.max_steps=1 --set run.log_every=1
        --set run.threads=1 --set checkpoint.every_steps=0)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

mpiexec -n 1 "$trident" train /dev/null "${common[@]}" --set model.layers=1 --set model.d_model=64 \
  --set run.name=libraries >libraries.log 2>&1 || { tail -5 libraries.log; exit 1; }
libraries=$(field runs/libraries/report.json startup_peak_bytes)

printf 'GPT %s layers, d_model %s, one rank per stage or partition; libraries alone: %s MiB at start-up\n' \
  "$layers" "$d_model" "$(mib "$libraries")"
printf '%10s %12s %12s %16s %12s %24s %12s\n' layout "whole MiB" "kept MiB" "start-up peak" "run peak" \
  "libraries + whole model" "start-up s"
rows=""
row() {  # PP DP ZERO: one run of pp x dp ranks
  local pp=$1 dp=$2 zero=$3 name=pp$1 kept
  [ "$zero" = 0 ] || name=zero${zero}_dp$dp
  local args=("${common[@]}" --set model.layers="$layers" --set model.d_model="$d_model" --set parallel.pp="$pp"
              --set parallel.dp="$dp" --set parallel.zero="$zero")
  local plan=$("$trident" plan /dev/null --world $((pp * dp)) "${args[@]}")
  local whole=$(( $(sed -n 's/^model gpt: \([0-9]*\) parameters.*/\1/p' <<<"$plan") * 4 ))
  if [ "$pp" -gt 1 ]; then
    kept=$(( $(sed -n 's/^  stage [0-9]*: *\([0-9]*\) parameters.*/\1/p' <<<"$plan" | sort -n | tail -1) * 4 ))
  else
    kept=$(( (whole + 4 * dp - 1) / dp / 4 * 4 ))  # a ZeRO-3 rank's partition (dp 1: the whole model)
  fi
  mpiexec -n $((pp * dp)) "$trident" train /dev/null "${args[@]}" --set run.name=$name >$name.log 2>&1 ||
    { tail -5 $name.log; exit 1; }
  local startup=$(field runs/$name/report.json startup_peak_bytes)
  local peak=$(field runs/$name/report.json peak_bytes)
  local startup_s=$(python3 -c 'import json, sys; print("%.2f" % json.loads(open(sys.argv[1]).readline())["startup_s"])' \
    runs/$name/goodput.jsonl)
  printf '%10s %12s %12s %16s %12s %24s %12s\n' "$name" "$(mib "$whole")" "$(mib "$kept")" "$(mib "$startup")" \
    "$(mib "$peak")" "$(mib $((libraries + whole)))" "$startup_s"
  rows+="${rows:+, }{\"layout\": \"$name\", \"pp\": $pp, \"dp\": $dp, \"zero\": $zero, \"whole_model_bytes\": $whole, \"kept_bytes\": $kept, \"startup_peak_bytes\": $startup, \"peak_bytes\": $peak, \"libraries_plus_whole_bytes\": $((libraries + whole)), \"startup_s\": $startup_s}"
}
for pp in ${PPS:-1 2 4}; do row "$pp" 1 0; done
for dp in ${ZERO3_DPS:-2 4}; do row 1 "$dp" 3; done
printf '{ "model": "gpt layers %s d_model %s", "libraries_startup_bytes": %s, "runs": [%s] }\n' \
  "$layers" "$d_model" "$libraries" "$rows" >"$out/startup_memory.json"
echo "wrote $out/startup_memory.json"
