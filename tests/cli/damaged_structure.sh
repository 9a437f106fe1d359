#!/usr/bin/env bash
# damaged_structure.sh TRIDENT MPIEXEC dataset|checkpoint1of2|checkpoint2of2: a dataset file with
# a byte of its HDF5 structure (superblock, object headers, B-trees, heaps: the first 2 KiB and the
# last KiB of a small file) overwritten is bad input or harmless, never a crash: `inspect` exits 0
# or 2 for every such byte and a run (np 1) exits 0 or 2, with one message when 2. Every 16th byte
# of the first range and every 32nd of the last is tried (inspect), every 128th for training.
# The same for a checkpoint, whose headers sit at its start and beside each symbol table (SNOD):
# every 32nd byte of its first 2 KiB and every 16th within 512 bytes of each SNOD past them (among
# the tensors: a damaged header there gave exit 1, "negative dimension", "cannot allocate") for inspect
# (which must never say "every block verified" of a file it could not list), every 16th copy for
# a run resumed from it (a link damaged to point elsewhere gave exit 1 there).
# Three CTest tests that run side by side: the dataset, and every other checkpoint offset from the
# first (checkpoint1of2) or the second (checkpoint2of2).
part=${3:-}
case $part in dataset | checkpoint1of2 | checkpoint2of2) ;;
  *) echo "usage: damaged_structure.sh TRIDENT MPIEXEC dataset|checkpoint1of2|checkpoint2of2" >&2; exit 2 ;;
esac
source "$(dirname "$0")/common.sh" "$1" "$2" 256
size=$(stat -c %s syn.h5)
# run_judged WHAT LOG FOLDER COMMAND...: COMMAND (output to LOG) must exit 0, or 2 with one error
# line and FOLDER ("" for none) not written; sets rc.
run_judged() {
  local what=$1 log=$2 folder=$3
  shift 3
  set +e
  "$@" >"$log" 2>&1
  rc=$?
  set -e
  case $rc in
    0) ;;
    2) [ "$(grep -c 'trident: error' "$log")" = 1 ] || fail "$what: not one error line: $(cat "$log")"
       [ -z "$folder" ] || [ ! -e "$folder" ] || fail "$what: refused, yet $folder was written" ;;
    *) fail "$what: exit code $rc: $(tail -3 "$log")" ;;
  esac
}
# damage OFFSET FILE: damaged.h5, a copy of FILE with byte OFFSET overwritten.
damage() {
  cp "$2" damaged.h5
  printf '\377' | dd of=damaged.h5 bs=1 seek="$1" conv=notrunc status=none
}
args=(--set model.kind=mlp --set optim.global_batch=32 --set optim.micro_batch=32 --set run.threads=1)

# ---- a dataset ----
if [ "$part" = dataset ]; then
offsets=$(seq 0 16 2047; seq $((size - 1024)) 32 $((size - 1)))
declare -A seen
tried=0 refused_count=0
for offset in $offsets; do
  damage "$offset" syn.h5
  run_judged "inspect, byte $offset" inspect.log "" "$trident" inspect damaged.h5
  tried=$((tried + 1))
  [ "$rc" != 2 ] || refused_count=$((refused_count + 1))
  if [ $((offset % 128)) = 0 ]; then
    run_judged "train, byte $offset" train.log "runs/r$offset" "$mpiexec" -n 1 "$trident" train /dev/null "${args[@]}" \
      --set data.path=damaged.h5 --set run.max_steps=1 --set run.output_dir="runs/r$offset"
    seen[$rc]=$(( ${seen[$rc]:-0} + 1 ))
  fi
done
echo "inspect: $tried damaged copies, $refused_count refused (exit 2), the rest read (exit 0)"
echo "train: ${seen[2]:-0} refused, ${seen[0]:-0} trained"
[ "$refused_count" -gt 0 ] || fail "no damaged copy was refused: the bytes tried missed the structure"
echo PASS
exit 0
fi

# ---- a checkpoint ----
args+=(--set data.path=syn.h5)
"$mpiexec" -n 1 "$trident" train /dev/null "${args[@]}" --set run.max_steps=1 --set run.output_dir=runs/src \
  >src.log 2>&1 || fail "training the source checkpoint failed: $(tail -3 src.log)"
good=runs/src/checkpoints/step_0000001.h5
size=$(stat -c %s "$good")
tables=$(grep -obaE 'SNOD' "$good" | cut -d: -f1)
[ -n "$tables" ] || fail "no symbol table (SNOD) found in $good: the test no longer aims at its headers"
half=1  # this part's offsets: the 1st, 3rd, ... (checkpoint1of2) or the 2nd, 4th, ...
[ "$part" = checkpoint1of2 ] || half=0
offsets=$(seq 0 32 2047; for t in $tables; do [ "$t" -lt 2048 ] || seq $((t - 512)) 16 $((t + 511)); done |
          awk -v n="$size" '$1 < n' | awk -v half="$half" 'NR % 2 == half')
declare -A ck_seen
ck_tried=0 ck_refused=0
for offset in $offsets; do
  damage "$offset" "$good"
  run_judged "inspect, checkpoint byte $offset" inspect.log "" "$trident" inspect damaged.h5
  ck_tried=$((ck_tried + 1))
  [ "$rc" != 2 ] || ck_refused=$((ck_refused + 1))
  ! { grep -q 'cannot be listed' inspect.log && grep -q 'every block verified' inspect.log; } ||
    fail "inspect, checkpoint byte $offset: 'every block verified' of a file it could not list"
  if [ $((ck_tried % 16)) = 1 ]; then
    run_judged "resume, checkpoint byte $offset" train.log "runs/c$offset" "$mpiexec" -n 1 "$trident" train /dev/null \
      "${args[@]}" --set run.max_steps=2 --set run.output_dir="runs/c$offset" --resume damaged.h5
    ck_seen[$rc]=$(( ${ck_seen[$rc]:-0} + 1 ))
  fi
done
echo "checkpoint inspect: $ck_tried damaged copies, $ck_refused refused (exit 2), the rest read (exit 0)"
echo "checkpoint resume: ${ck_seen[2]:-0} refused, ${ck_seen[0]:-0} resumed"
[ "$ck_refused" -gt 0 ] || fail "no damaged checkpoint was refused: the bytes tried missed the structure"
echo PASS
