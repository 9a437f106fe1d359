#!/usr/bin/env bash
# CNN data-parallel scaling on CPU ranks, trident against PyTorch DDP over gloo
# (benchmarks/cnn_ddp_reference.py) in the same call: weak scaling (64 samples per rank per step,
# the global batch grows with the ranks) and strong scaling (a global batch of 256 split over the
# ranks), at 1, 2, 4, ... ranks, one thread per rank. samples/s is the median of the timed
# windows after a warm-up window (trident: its metrics.jsonl records). Efficiency: weak, the
# per-rank rate against one rank's; strong, the speed-up over one rank divided by the ranks.
# Run it on a machine with at least as many cores as the largest rank count (MPICH spins while it
# waits: more ranks than cores measures the oversubscription).
#   benchmarks/cnn_scaling.sh [BUILD_DIR]
#   env: RANKS ("1 2 4 8 16", capped at the cores) STEPS (80) WINDOWS (4) STRONG_BATCH (256)
#        PYTHON (python3; empty: trident only) MPIEXEC (mpiexec)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
steps=${STEPS:-80} windows=${WINDOWS:-4} strong_batch=${STRONG_BATCH:-256}
python=${PYTHON-python3} mpiexec=${MPIEXEC:-mpiexec}
ranks=()
for n in ${RANKS:-1 2 4 8 16}; do [ "$n" -le "$(nproc)" ] && ranks+=("$n"); done
window=$((steps / windows))
"$trident" prepare-data synthetic --out syn.h5 --train 65536 --test 512 --classes 10 --shape 1x28x28 >/dev/null

# trident_rate NAME NP MICRO: samples/s, the median of the windows after the first.
trident_rate() {
  "$mpiexec" -n "$2" "$trident" train /dev/null --set run.name="$1" --set data.path=syn.h5 --set model.kind=cnn \
    --set run.max_steps=$((steps + window)) --set run.log_every="$window" --set run.threads=1 \
    --set optim.micro_batch="$3" --set optim.max_micro_batch="$3" --set optim.global_batch=$(($3 * $2)) \
    --set checkpoint.keep_last=1 >"$1.log" 2>&1 || { tail -5 "$1.log" >&2; echo 0; return; }
  python3 -c '
import json, sys
rates = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1])][1:]
print(sorted(rates)[len(rates) // 2])' "runs/$1/metrics.jsonl"
}
reference_rate() {
  [ -n "$python" ] || { echo 0; return; }
  "$python" "$here/cnn_ddp_reference.py" --ranks "$2" --micro-batch "$3" --steps "$steps" --windows "$windows" \
    --port $((29500 + RANDOM % 500)) 2>"$1.ref.log" | python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["samples_per_s"])' \
    || echo 0
}

rows=""
for mode in weak strong; do
  for n in "${ranks[@]}"; do
    if [ $mode = weak ]; then micro=64; else micro=$((strong_batch / n)); fi
    t=$(trident_rate "${mode}_np$n" "$n" "$micro")
    r=$(reference_rate "${mode}_np$n" "$n" "$micro")
    rows+="$mode $n $micro $t $r"$'\n'
    echo "measured: $mode, $n ranks, micro-batch $micro: trident $t, DDP $r samples/s"  # kept if a time limit cuts the study
  done
done
printf '%s' "$rows" | python3 -c '
import json, sys
rows = [l.split() for l in sys.stdin if l.strip()]
out = []
print("\nCNN data-parallel scaling on CPU ranks (1 thread each), median samples/s of timed windows")
print("| scaling | ranks | micro-batch | trident samples/s | efficiency | PyTorch DDP gloo samples/s | efficiency | trident / DDP |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
base = {}
for mode, n, micro, t, r in rows:
    n, micro, t, r = int(n), int(micro), float(t), float(r)
    if n == 1: base[mode] = (t, r)
    bt, br = base.get(mode, (t, r))
    eff = (lambda x, b: x / (n * b) if b else 0)
    print("| %s | %d | %d | %.0f | %.0f%% | %.0f | %.0f%% | %s |" % (mode, n, micro, t, 100 * eff(t, bt), r,
          100 * eff(r, br), "%.2fx" % (t / r) if r else "-"))
    out.append({"scaling": mode, "ranks": n, "micro_batch": micro, "trident_samples_per_s": t,
                "trident_efficiency": eff(t, bt), "ddp_samples_per_s": r, "ddp_efficiency": eff(r, br)})
json.dump({"machine": "%s cores" % sys.argv[2], "results": out}, open(sys.argv[1], "w"), indent=2)
' "$out/cnn_scaling.json" "$(nproc)"
echo "(JSON: $out/cnn_scaling.json)"
