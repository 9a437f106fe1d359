#!/usr/bin/env bash
# A GPT whose fp32 AdamW model states do not fit a per-rank memory cap without sharding, trained
# under that cap with ZeRO-3 at dp 8 (CPU ranks). Each rank runs in its own memory cgroup whose
# limit is the cap, as SLURM's cgroup plugin confines a task: going over it is an OOM kill. The
# script runs zero 0 and zero 3 under the same cap and prints, per run, the expected model-state
# bytes (trident plan), the exit code, OOM kills, each rank's peak usage, the losses and the end of
# the log: zero 0 is refused at start-up (exit 2, the memory check reads the cgroup's limit) and
# zero 3 trains. Needs root and a cgroup memory controller (v1 or v2).
#   benchmarks/zero_memory_cap.sh [BUILD_DIR]   DP=8 CAP_MB=640 LAYERS=4 D_MODEL=1024 STEPS=3
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
dp=${DP:-8}
cap_mb=${CAP_MB:-640}
steps=${STEPS:-3}
if [ -w /sys/fs/cgroup/memory ]; then
  cgroup_root=/sys/fs/cgroup/memory limit_file=memory.limit_in_bytes peak_file=memory.max_usage_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null && [ -w /sys/fs/cgroup ]; then
  cgroup_root=/sys/fs/cgroup limit_file=memory.max peak_file=memory.peak
  grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory >/sys/fs/cgroup/cgroup.subtree_control
else
  echo "zero_memory_cap.sh: needs root and a writable cgroup memory controller" >&2
  exit 2
fi

"$trident" prepare-data synthetic --out tokens.h5 --tokens 100000 --test-tokens 1040 --vocab 256 >/dev/null
args=(--set data.path=tokens.h5 --set model.kind=gpt --set model.layers=${LAYERS:-4}
      --set model.d_model=${D_MODEL:-1024} --set model.heads=8 --set model.seq_len=64
      --set optim.global_batch=$dp --set optim.micro_batch=1 --set run.max_steps=$steps --set run.log_every=1
      --set run.threads=1 --set checkpoint.every_steps=0)
# Each rank moves itself into cgroup <prefix>_<rank> (limit = the cap), then becomes trident.
confine='d=$1/$2_${PMI_RANK:-0}; mkdir -p "$d"; echo "$3" >"$d/$4"; echo $$ >"$d/cgroup.procs"; shift 4; exec "$@"'
json_runs=""
for zero in 0 3; do
  prefix=trident_cap_z${zero}_$$
  expected=$("$trident" plan /dev/null --world "$dp" "${args[@]}" --set parallel.zero=$zero |
             sed -n 's/.*model state per rank.* \([0-9.]*\) MiB.*/\1/p' | head -1)
  set +e
  mpiexec -n "$dp" bash -c "$confine" _ "$cgroup_root" "$prefix" $((cap_mb * 1048576)) "$limit_file" \
    "$trident" train /dev/null --set run.name=z$zero --set parallel.zero=$zero "${args[@]}" >z$zero.log 2>&1
  code=$?
  set -e
  peaks="" kills=0
  for r in $(seq 0 $((dp - 1))); do
    d=$cgroup_root/${prefix}_$r
    peaks+="${peaks:+ }$(( $(cat "$d/$peak_file" 2>/dev/null || echo 0) / 1048576 ))"
    k=$(cat "$d/memory.oom_control" "$d/memory.events" 2>/dev/null | sed -n 's/^oom_kill \([0-9]*\)/\1/p' | head -1 || true)
    kills=$((kills + ${k:-0}))
    rmdir "$d" 2>/dev/null || true
  done
  losses=$(grep -o 'step [0-9]*/[0-9]* | loss [0-9.]*' z$zero.log | awk '{print $NF}' | paste -sd, - || true)
  printf '\nzero %s, dp %s, cap %s MiB per rank: expected model state %s MiB per rank (trident plan)\n' \
    "$zero" "$dp" "$cap_mb" "${expected:-?}"
  printf '  exit code %s, OOM kills %s, peak MiB per rank: %s\n  losses: %s\n' "$code" "$kills" "$peaks" "${losses:-none}"
  grep -v '^\s*$' z$zero.log | tail -3 | fold -s -w 110 | sed 's/^/  | /'
  json_runs+="${json_runs:+, }{\"zero\": $zero, \"expected_model_state_mib\": ${expected:-null}, \"exit_code\": $code, \"oom_kills\": $kills, \"peak_mib_per_rank\": [${peaks// /, }], \"losses\": [${losses}]}"
done
printf '{ "dp": %s, "cap_mib_per_rank": %s, "model": "gpt layers %s d_model %s", "runs": [%s] }\n' \
  "$dp" "$cap_mb" "${LAYERS:-4}" "${D_MODEL:-1024}" "$json_runs" >"$out/zero_memory_cap.json"
echo "wrote $out/zero_memory_cap.json"
