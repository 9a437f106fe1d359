#!/usr/bin/env bash
# Checkpoint I/O on this disk: trident's write and read bandwidth (report.json: checkpoint bytes
# of parameters + AdamW state / seconds, collective parallel HDF5 over NP ranks) against `dd` of
# the same number of bytes to the same folder (written with conv=fsync, read back after dropping
# it from the page cache where permitted), in the same run; and the time a save blocks training.
#   benchmarks/checkpoint.sh [BUILD_DIR]        NP=2, HIDDEN=4096,4096 (~20 M parameters, 240 MB)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
np=${NP:-2}
hidden=${HIDDEN:-4096,4096}
"$trident" prepare-data synthetic --out syn.h5 --train 4096 --test 256 --classes 10 --shape 1x28x28 >/dev/null
args=(--set data.path=syn.h5 --set model.kind=mlp --set model.hidden=$hidden --set run.threads=1
      --set optim.global_batch=64 --set optim.micro_batch=32 --set run.log_every=1000 --set checkpoint.every_steps=2
      --set checkpoint.keep_last=2)
mpiexec -n "$np" "$trident" train /dev/null --set run.name=ck --set run.max_steps=6 "${args[@]}" >write.log 2>&1
r=runs/ck/report.json
write_gbs=$(field "$r" write_gb_per_s) saves=$(field "$r" saves) blocked=$(field "$r" blocked_s)
file=$(ls runs/ck/checkpoints/step_*.h5 | tail -1)
bytes=$(stat -c %s "$file")
# Read: resume the same run (loads the last checkpoint) and train 0 more steps.
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
mpiexec -n "$np" "$trident" train /dev/null --set run.name=ck --set run.max_steps=6 "${args[@]}" >read.log 2>&1
read_gbs=$(field "$r" read_gb_per_s)

mb=$((bytes / 1048576 + 1))
dd_write=$( { dd if=/dev/zero of=dd.bin bs=1M count=$mb conv=fsync 2>&1 >/dev/null; } | tail -1)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
dd_read=$( { dd if=dd.bin of=/dev/null bs=1M 2>&1 >/dev/null; } | tail -1)
rate() { awk '{for(i=1;i<=NF;i++) if ($i ~ /^[GMk]B\/s$/) {v=$(i-1); u=$i}} END {if (u=="MB/s") v/=1000; if (u=="kB/s") v/=1e6; print v}' <<<"$1"; }
dw=$(rate "$dd_write") dr=$(rate "$dd_read")

printf '\nCheckpoint I/O, %s ranks, mlp %s: %s bytes per checkpoint, %s saves\n' "$np" "$hidden" "$bytes" "$saves"
printf '%-10s %14s %14s %10s\n' "" "trident GB/s" "dd GB/s" "ratio"
printf '%-10s %14.3f %14.3f %9.1f%%\n' write "$write_gbs" "$dw" "$(awk -v a="$write_gbs" -v b="$dw" 'BEGIN{print 100*a/b}')"
printf '%-10s %14.3f %14.3f %9.1f%%\n' read "$read_gbs" "$dr" "$(awk -v a="$read_gbs" -v b="$dr" 'BEGIN{print 100*a/b}')"
printf 'training blocked by saves: %s s over %s saves\n' "$blocked" "$saves"
printf '{ "ranks": %s, "bytes": %s, "saves": %s, "write_gb_per_s": %s, "read_gb_per_s": %s, "dd_write_gb_per_s": %s, "dd_read_gb_per_s": %s, "blocked_s": %s }\n' \
  "$np" "$bytes" "$saves" "$write_gbs" "$read_gbs" "$dw" "$dr" "$blocked" >"$out/checkpoint.json"
echo "wrote $out/checkpoint.json"
