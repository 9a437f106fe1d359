#!/usr/bin/env bash
# glibc malloc as trident sets it (lib/core/malloc_tuning: blocks below 32 MiB kept in the heap,
# trimmed past 256 MiB) against glibc's defaults (GLIBC_TUNABLES=glibc.malloc.check=0: a malloc
# tunable set, so trident leaves malloc alone, with the default's value), back to back: the CNN
# of the main job on synthetic 1x28x28 images, one thread per rank, at 1 and 2 ranks and micro-
# batches 64 and 256. samples/s is the median of the timed windows after the first (metrics.jsonl);
# the kernel's share is the run's system CPU time over its user + system time; peak is report.json's.
#   benchmarks/malloc.sh [BUILD_DIR]        env: STEPS (200) RANKS ("1 2") MICRO ("64 256")
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
steps=${STEPS:-200}
"$trident" prepare-data synthetic --out syn.h5 --train 65536 --test 512 --classes 10 --shape 1x28x28 >/dev/null

measure() {  # NAME NP MICRO [env...]: "samples/s system_share peak_bytes"
  local name=$1 np=$2 micro=$3
  shift 3
  local TIMEFORMAT='%U %S'  # bash's time: the CPU time of every process the command waited for
  { time env "$@" mpiexec -n "$np" "$trident" train /dev/null --set run.name="$name" \
    --set data.path=syn.h5 --set model.kind=cnn --set run.max_steps="$steps" --set run.log_every=$((steps / 5)) \
    --set run.threads=1 --set optim.micro_batch="$micro" --set optim.max_micro_batch="$micro" \
    --set optim.global_batch=$((micro * np)) --set checkpoint.every_steps=0 >"$name.log" 2>&1; } 2>"$name.time"
  python3 -c '
import json, sys
rates = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1])][1:]
user, system = (float(x) for x in open(sys.argv[2]).read().split())
peak = json.load(open(sys.argv[3]))["memory"]["peak_bytes"]
print(sorted(rates)[len(rates) // 2], system / (user + system), peak)' "runs/$name/metrics.jsonl" "$name.time" "runs/$name/report.json"
}

rows=""
for np in ${RANKS:-1 2}; do
  for micro in ${MICRO:-64 256}; do
    tuned=$(measure "tuned_np${np}_mb$micro" "$np" "$micro")
    default=$(measure "default_np${np}_mb$micro" "$np" "$micro" GLIBC_TUNABLES=glibc.malloc.check=0)
    rows+="$np $micro $tuned $default"$'\n'
    echo "measured: $np rank(s), micro-batch $micro: trident's malloc $tuned, glibc defaults $default"
  done
done
printf '%s' "$rows" | python3 -c '
import json, sys
rows = [l.split() for l in sys.stdin if l.strip()]
print("\nCNN on CPU ranks (1 thread each), malloc as trident sets it against glibc defaults; median samples/s")
print("| ranks | micro-batch | trident malloc samples/s | kernel share | peak RSS | glibc defaults samples/s | kernel share | peak RSS | speed-up |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
out = []
for np_, micro, t, ts, tp, d, ds, dp in rows:
    t, ts, tp, d, ds, dp = float(t), float(ts), int(tp), float(d), float(ds), int(dp)
    print("| %s | %s | %.0f | %.0f%% | %.0f MiB | %.0f | %.0f%% | %.0f MiB | %.2fx |" % (np_, micro, t, 100 * ts, tp / 2**20, d,
          100 * ds, dp / 2**20, t / d))
    out.append({"ranks": int(np_), "micro_batch": int(micro), "tuned_samples_per_s": t, "tuned_system_share": ts,
                "tuned_peak_bytes": tp, "default_samples_per_s": d, "default_system_share": ds, "default_peak_bytes": dp})
json.dump({"machine": "%s cores" % sys.argv[2], "results": out}, open(sys.argv[1], "w"), indent=2)
' "$out/malloc.json" "$(nproc)"
echo "(JSON: $out/malloc.json)"
