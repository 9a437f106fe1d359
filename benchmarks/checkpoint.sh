#!/usr/bin/env bash
# Checkpoint I/O on this disk: trident's write and read bandwidth (report.json: checkpoint bytes
# of parameters + AdamW state / seconds, NP ranks writing one file at places rank 0 laid out) against `dd` of
# the same number of bytes to the same folder (written with conv=fsync, read back after dropping
# it from the page cache where permitted), in the same run; and the time a save blocks training.
# Both sides write the same number of files of the same size back to back.
# Then (PART=async) what checkpoint.async saves: the training time a save blocks, synchronous
# against asynchronous, and the step time while a background save is written.
#   benchmarks/checkpoint.sh [BUILD_DIR]        NP=2, HIDDEN=4096,4096 (~20 M parameters, 240 MB)
#   PART=io | async | all (default)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
np=${NP:-2}
hidden=${HIDDEN:-4096,4096}
part=${PART:-all}
"$trident" prepare-data synthetic --out syn.h5 --train 4096 --test 256 --classes 10 --shape 1x28x28 >/dev/null
# The I/O part measures the writer itself: synchronous saves (the whole save blocks training).
args=(--set data.path=syn.h5 --set model.kind=mlp --set model.hidden=$hidden --set run.threads=1
      --set optim.global_batch=64 --set optim.micro_batch=32 --set run.log_every=1000 --set checkpoint.every_steps=2
      --set checkpoint.keep_last=2 --set checkpoint.async=false)
# This VM takes a burst of writes (a few hundred MB) at ~5 GB/s and then often slows to ~0.45
# GB/s; page-cache pages it has not touched lately are slow to get (seen with strace on trident's
# pwrites, and with dd and Python alike), and it drifts from minute to minute. So both sides get
# the same conditions: a dropped page cache and the same pause before each, the same files with
# the same gaps, in ROUNDS interleaved rounds; the table gives the medians.
pause=${PAUSE:-10}
rounds=${ROUNDS:-3}
settle() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; sleep "$pause"; }
rate() { awk '{for(i=1;i<=NF;i++) if ($i ~ /^[GMk]B\/s$/) {v=$(i-1); u=$i}} END {if (u=="MB/s") v/=1000; if (u=="kB/s") v/=1e6; print v}' <<<"$1"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
r=runs/ck/report.json
# dd_writes [FLAG]: GB/s of dd writing $saves files of $mb MB as described below.
dd_writes() {
  local seconds=0 start end i
  rm -f dd*.bin
  settle
  for i in $(seq 1 "$saves"); do
    [ "$i" -gt 1 ] && sleep "$(awk -v s="$step_s" 'BEGIN{print 2 * s}')"
    start=$(date +%s.%N)
    dd if=/dev/zero of=dd$i.bin bs=1M count=$mb conv=fsync $1 2>/dev/null
    end=$(date +%s.%N)
    seconds=$(awk -v a="$seconds" -v s="$start" -v e="$end" 'BEGIN{print a + e - s}')
    [ "$i" -gt 2 ] && rm -f dd$((i - 2)).bin
  done
  awk -v n="$saves" -v b="$mb" -v t="$seconds" 'BEGIN{print n * b * 1048576 / t / 1e9}'
}
[ "$part" = async ] || {
: >tw; : >tr; : >dw; : >dwn; : >dr; : >blocked; : >ratio; : >ration
for round in $(seq 1 "$rounds"); do
  rm -rf runs dd*.bin
  settle
  mpiexec -n "$np" "$trident" train /dev/null --set run.name=ck --set run.max_steps=6 "${args[@]}" >write.log 2>&1
  field "$r" write_gb_per_s >>tw
  field "$r" blocked_s >>blocked
  saves=$(field "$r" saves) step_s=$(field "$r" step_time_s)
  bytes=$(stat -c %s "$(ls runs/ck/checkpoints/step_*.h5 | tail -1)")
  # Read: resume the same run (loads the last checkpoint; nothing left to train).
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  mpiexec -n "$np" "$trident" train /dev/null --set run.name=ck --set run.max_steps=8 "${args[@]}" >read.log 2>&1
  field "$r" read_gb_per_s >>tr
  rm -rf runs
  # dd writes what trident wrote the way trident wrote it: $saves files of $bytes, each fsynced,
  # two training steps apart (checkpoint.every_steps = 2), the oldest beyond keep_last = 2 removed;
  # once plainly and once with oflag=nocache, which gives each file's pages back after it as
  # trident does (see release_page_cache in lib/checkpoint/checkpoint.cpp).
  mb=$((bytes / 1048576 + 1))
  dd_writes "" >>dw
  dd_writes oflag=nocache >>dwn
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  rate "$( { dd if=dd$saves.bin of=/dev/null bs=1M 2>&1 >/dev/null; } | tail -1)" >>dr
  awk -v a="$(tail -1 tw)" -v b="$(tail -1 dw)" 'BEGIN{print a / b}' >>ratio
  awk -v a="$(tail -1 tw)" -v b="$(tail -1 dwn)" 'BEGIN{print a / b}' >>ration
  echo "round $round: trident write $(tail -1 tw) read $(tail -1 tr) | dd write $(tail -1 dw)" \
       "(nocache $(tail -1 dwn)) read $(tail -1 dr) GB/s | write ratio $(tail -1 ratio) (nocache $(tail -1 ration))"
done
write_gbs=$(median <tw) read_gbs=$(median <tr) dw=$(median <dw) dwn=$(median <dwn) dr=$(median <dr)
blocked=$(median <blocked)
# Medians of the rounds' ratios: each pairs measurements a minute apart at most.
ratio=$(median <ratio) ration=$(median <ration)

printf '\nCheckpoint I/O, %s ranks, mlp %s: %s bytes per checkpoint, %s saves per run, median of %s rounds\n' \
  "$np" "$hidden" "$bytes" "$saves" "$rounds"
printf '%-10s %14s %14s %10s\n' "" "trident GB/s" "dd GB/s" "ratio"
printf '%-10s %14.3f %14.3f %9.1f%%   (dd conv=fsync)\n' write "$write_gbs" "$dw" "$(awk -v a="$write_gbs" -v b="$dw" 'BEGIN{print 100*a/b}')"
printf '%-10s %14.3f %14.3f %9.1f%%\n' "write" "$write_gbs" "$dwn" "$(awk -v a="$write_gbs" -v b="$dwn" 'BEGIN{print 100*a/b}')" | sed 's/$/   (dd conv=fsync oflag=nocache)/'
printf '%-10s %14.3f %14.3f %9.1f%%\n' read "$read_gbs" "$dr" "$(awk -v a="$read_gbs" -v b="$dr" 'BEGIN{print 100*a/b}')"
printf 'median of the rounds'"'"' write ratios (trident / dd in the same round): %.1f%% (dd oflag=nocache: %.1f%%)\n' \
  "$(awk -v r="$ratio" 'BEGIN{print 100*r}')" "$(awk -v r="$ration" 'BEGIN{print 100*r}')"
printf 'training blocked by saves: %s s per run of %s saves\n' "$blocked" "$saves"
printf '{ "ranks": %s, "bytes": %s, "saves": %s, "rounds": %s, "write_gb_per_s": %s, "read_gb_per_s": %s, "dd_write_gb_per_s": %s, "dd_nocache_write_gb_per_s": %s, "dd_read_gb_per_s": %s, "blocked_s": %s, "median_round_write_ratio": %s, "median_round_write_ratio_nocache": %s, "write_rounds": [%s], "dd_write_rounds": [%s], "dd_nocache_write_rounds": [%s] }\n' \
  "$np" "$bytes" "$saves" "$rounds" "$write_gbs" "$read_gbs" "$dw" "$dwn" "$dr" "$blocked" "$ratio" "$ration" "$(paste -sd, tw)" "$(paste -sd, dw)" "$(paste -sd, dwn)" >"$out/checkpoint.json"
echo "wrote $out/checkpoint.json"
}
[ "$part" = io ] && exit 0

# ---- checkpoint.async: training time blocked per save, sync against async --------------------
# The same run twice per round, checkpoint.async = false and = true (in turn first), a save every
# EVERY steps (8: the background write, ~0.5 s here, ends before the next save is due) and keep_last
# 10; the final save (synchronous in both) is left out. Per save: the training time it blocked, from
# the log lines (sync: the whole save; async: the layout, the update waiting for the copies, the
# commit, and a next save waiting for it). Step times from report.json: the mean step while a
# background write was in flight, and otherwise. Then the step-16 files of the two runs of the
# last round, compared byte for byte (they differ only in the deck's own checkpoint.async line).
every=${EVERY:-8} steps=${STEPS:-32}
aargs=(--set data.path=../syn.h5 --set model.kind=mlp --set model.hidden=$hidden --set run.threads=1
       --set optim.global_batch=64 --set optim.micro_batch=32 --set run.log_every=1000 --set run.name=ck
       --set checkpoint.every_steps="$every" --set checkpoint.keep_last=10 --set run.max_steps="$steps")
: >sync_blocked; : >async_blocked; : >async_total; : >sync_step; : >async_writing; : >async_idle
for round in $(seq 1 "$rounds"); do
  order="false true"
  [ $((round % 2)) = 0 ] && order="true false"
  for a in $order; do
    rm -rf "run_$a"
    mkdir "run_$a"
    settle
    (cd "run_$a" && mpiexec -n "$np" "$trident" train /dev/null "${aargs[@]}" --set checkpoint.async=$a >train.log 2>&1)
    rep=run_$a/runs/ck/report.json
    if [ "$a" = false ]; then
      sed -n 's/.*step_0*\([0-9]*\)\.h5 written in \([0-9.]*\) s$/\1 \2/p' "run_$a/train.log" |
        awk -v last="$steps" '$1 != last {print $2}' >>sync_blocked
      field "$rep" step_time_otherwise_s >>sync_step
    else
      sed -n 's/.*step_0*\([0-9]*\)\.h5 written in the background in \([0-9.]*\) s; it blocked training for \([0-9.]*\) s.*/\2 \3/p' \
        "run_$a/train.log" >saves.txt
      awk '{print $2}' saves.txt >>async_blocked
      awk '{print $1}' saves.txt >>async_total
      field "$rep" step_time_while_writing_s >>async_writing
      field "$rep" step_time_otherwise_s >>async_idle
    fi
  done
  echo "round $round: blocked per save sync $(tail -n $((steps / every - 1)) sync_blocked | paste -sd' ') s," \
       "async $(tail -n $((steps / every - 1)) async_blocked | paste -sd' ') s"
done
n_sync=$(wc -l <sync_blocked) n_async=$(wc -l <async_blocked)
[ "$n_sync" = "$n_async" ] && [ "$n_sync" = $(((steps / every - 1) * rounds)) ] \
  || { echo "expected $(((steps / every - 1) * rounds)) periodic saves each way, got $n_sync sync and $n_async async"; exit 1; }
bytes=$(stat -c %s "run_true/runs/ck/checkpoints/step_$(printf %07d $((2 * every))).h5")
sb=$(median <sync_blocked) ab=$(median <async_blocked) at=$(median <async_total)
ss=$(median <sync_step) aw=$(median <async_writing) ai=$(median <async_idle)
share=$(awk -v a="$ab" -v s="$sb" 'BEGIN{print 100 * a / s}')
verdict=$(awk -v p="$share" 'BEGIN{print (p <= 10) ? "met" : "NOT met"}')
# The same tensors: `trident compare` of the two modes' files of one step (every tensor bit for bit
# and the training state; the deck is listed, and may differ only in checkpoint.async). Bytes are
# not compared: the deck text's length (false/true) can move HDF5's metadata by its alignment.
step_file=checkpoints/step_$(printf %07d $((2 * every))).h5
if "$trident" compare run_false/runs/ck/$step_file run_true/runs/ck/$step_file >compare.log 2>&1; then
  # The deck's changed keys: the indented lines under "deck (listed, not compared)".
  changed=$(awk '/^deck \(listed/ {d = 1; next} /^[^ ]/ {d = 0} d' compare.log | grep -v 'checkpoint.async' || true)
  [ -z "$changed" ] && same="yes: $(grep '^equal:' compare.log)" || same="NO: deck keys other than checkpoint.async differ: $changed"
else
  same="NO: $(tail -3 compare.log | tr '\n' ' ')"
fi
printf '\ncheckpoint.async, %s ranks, mlp %s (%s bytes per checkpoint), a save every %s steps, median of %s rounds x %s saves\n' \
  "$np" "$hidden" "$bytes" "$every" "$rounds" "$((steps / every - 1))"
printf '%-34s %12s %12s\n' "" sync async
printf '%-34s %12.4f %12.4f   (async = %.1f%% of sync; target <= 10%%: %s)\n' "training blocked per save, s" "$sb" "$ab" "$share" "$verdict"
printf '%-34s %12.4f %12.4f\n' "whole save (async: in background), s" "$sb" "$at"
printf '%-34s %12.4f %12.4f\n' "step time, no save in flight, s" "$ss" "$ai"
printf '%-34s %12s %12.4f   (%.1f steps/s vs %.1f)\n' "step time while a save is written, s" "-" "$aw" \
  "$(awk -v t="$aw" 'BEGIN{print 1 / t}')" "$(awk -v t="$ai" 'BEGIN{print 1 / t}')"
echo "same tensors written: $same"
printf '{ "ranks": %s, "bytes": %s, "every_steps": %s, "rounds": %s, "sync_blocked_per_save_s": %s, "async_blocked_per_save_s": %s, "async_share_of_sync": %s, "async_whole_save_s": %s, "sync_step_s": %s, "async_step_idle_s": %s, "async_step_while_writing_s": %s, "same_tensors": "%s", "sync_blocked": [%s], "async_blocked": [%s] }\n' \
  "$np" "$bytes" "$every" "$rounds" "$sb" "$ab" "$(awk -v p="$share" 'BEGIN{print p / 100}')" "$at" "$ss" "$ai" "$aw" "$same" \
  "$(paste -sd, sync_blocked)" "$(paste -sd, async_blocked)" >"$out/checkpoint_async.json"
echo "wrote $out/checkpoint_async.json"
