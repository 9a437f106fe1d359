#!/usr/bin/env bash
# Cost of the fail-fast watchdog (comm/watchdog.hpp) in the steady state: the cnn at np 2 with
# run.fail_timeout_s = 0 (off: no thread, no heartbeats), 30 (the default: a heartbeat per peer
# per second) and 2 (ten a second), interleaved rounds, median samples/s of each. The target
# is <= 1% at the default. The wall-clock comparison cannot resolve 1% on a VM whose speed drifts
# by 10% between runs, so the table also gives the heartbeat thread's own CPU time as a share of
# the run's wall time (report.json "watchdog"): what the thread takes from the rank's cores.
# Prints a table, writes benchmarks/results/watchdog.json.
#   benchmarks/watchdog.sh [BUILD_DIR]      (ROUNDS=5 STEPS=200 by default)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
"$trident" prepare-data synthetic --out syn.h5 --train 16384 --test 512 --classes 10 --shape 1x28x28 >/dev/null
steps=${STEPS:-200} rounds=${ROUNDS:-5}
settings=(0 30 2)
declare -A rates cpu
declare -A ratios
for round in $(seq "$rounds"); do
  # Odd rounds run the settings in order, even rounds in reverse: drift within a round then
  # favours neither side, and each round gives one paired ratio per setting.
  order=("${settings[@]}")
  [ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${settings[@]}" | tac))
  declare -A this
  for t in "${order[@]}"; do
    name=wd_${t}_$round
    mpiexec -n 2 "$trident" train /dev/null --set run.name=$name --set data.path=syn.h5 --set model.kind=cnn \
      --set run.max_steps="$steps" --set run.log_every=1000 --set run.threads=1 --set "run.fail_timeout_s=$t" \
      --set optim.global_batch=128 --set optim.micro_batch=64 >$name.log 2>&1
    this[$t]=$(field runs/$name/report.json samples_per_s)
    rates[$t]+="${this[$t]} "
    cpu[$t]+="$(field runs/$name/report.json cpu_share) "
  done
  for t in "${settings[@]}"; do ratios[$t]+="$(awk -v a="${this[$t]}" -v b="${this[0]}" 'BEGIN{print a/b}') "; done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '\nWatchdog cost at np 2 (cnn, micro_batch 64 per rank, %s steps, median of %s interleaved rounds)\n' "$steps" "$rounds"
printf '%16s %12s %12s %16s %22s   %s\n' fail_timeout_s samples/s "vs off" "paired vs off" "heartbeat thread CPU" \
  "all rounds (samples/s)"
off=$(echo "${rates[0]}" | median)
json=""
for t in "${settings[@]}"; do
  m=$(echo "${rates[$t]}" | median)
  c=$(echo "${cpu[$t]}" | median)
  p=$(echo "${ratios[$t]}" | median)  # median over rounds of (this setting / off in the same round)
  printf '%16s %12.0f %11.2f%% %15.2f%% %21.4f%%   %s\n' "$t" "$m" "$(awk -v a="$m" -v b="$off" 'BEGIN{print 100*(a/b-1)}')" \
    "$(awk -v r="$p" 'BEGIN{print 100*(r-1)}')" "$(awk -v c="$c" 'BEGIN{print 100*c}')" "${rates[$t]}"
  json+="${json:+, }{\"fail_timeout_s\": $t, \"median_samples_per_s\": $m, \"median_paired_ratio_vs_off\": $p, \"median_thread_cpu_share\": $c, \"rounds\": [$(echo "${rates[$t]}" | xargs | tr ' ' ',')]}"
done
printf '{ "machine": "%s cores", "steps": %s, "runs": [%s] }\n' "$(nproc)" "$steps" "$json" >"$out/watchdog.json"
echo "wrote $out/watchdog.json"
