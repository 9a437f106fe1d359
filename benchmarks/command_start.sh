#!/usr/bin/env bash
# How long a command takes that does not train: `trident --help`, `trident inspect` of a dataset
# and of a checkpoint, `trident report` of a study, `trident plan` of a deck, run by `trident`
# (which does not load LibTorch) and by trident-torch (which does: what every one of them cost
# before app/main.cpp handed only train, compare and prepare-data to it). Median wall time of RUNS runs each,
# the two executables alternating. Prints a table, writes benchmarks/results/command_start.json.
#   benchmarks/command_start.sh [BUILD_DIR]      (RUNS=21 by default)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
runs=${RUNS:-21}
torch_binary=$(dirname "$trident")/trident-torch
"$trident" prepare-data synthetic --out syn.h5 --train 256 --test 64 --classes 4 --shape 1x16x16 >/dev/null
mpiexec -n 1 "$trident" train /dev/null --set data.path=syn.h5 --set model.kind=mlp --set run.max_steps=2 \
  --set optim.global_batch=32 --set optim.micro_batch=32 --set run.threads=1 --set run.output_dir=study/run1 \
  >train.log 2>&1 || { tail -3 train.log; exit 1; }
cp "$here/../inputs/fashion_mnist_ddp.ini" deck.ini
commands=("--help" "inspect syn.h5" "inspect study/run1/checkpoints/step_0000002.h5" "report study --out study_report"
  "plan deck.ini --world 4 --set data.path=syn.h5")
# seconds COMMAND...: the wall time of one run, its output dropped (exit 0 required).
seconds() {
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  end=$(date +%s%N)
  echo "$(((end - start) / 1000))"  # microseconds
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '\nA command that does not train: median wall time of %s runs (ms)\n' "$runs"
printf '%-62s %10s %14s %8s\n' command trident trident-torch ratio
json=""
for c in "${commands[@]}"; do
  read -r -a args <<<"$c"
  front="" full=""
  for _ in $(seq "$runs"); do
    front+="$(seconds "$trident" "${args[@]}") "
    full+="$(seconds "$torch_binary" "${args[@]}") "
  done
  f=$(echo "$front" | median) t=$(echo "$full" | median)
  printf '%-62s %10.1f %14.1f %7.1fx\n' "trident $c" "$(awk -v u="$f" 'BEGIN{print u/1000}')" \
    "$(awk -v u="$t" 'BEGIN{print u/1000}')" "$(awk -v a="$t" -v b="$f" 'BEGIN{print a/b}')"
  json+="${json:+, }{\"command\": \"$c\", \"trident_median_ms\": $(awk -v u="$f" 'BEGIN{print u/1000}'),"
  json+=" \"trident_torch_median_ms\": $(awk -v u="$t" 'BEGIN{print u/1000}')}"
done
printf '{ "machine": "%s cores", "runs": %s, "commands": [%s] }\n' "$(nproc)" "$runs" "$json" >"$out/command_start.json"
echo "wrote $out/command_start.json"
