#!/usr/bin/env bash
# damaged_structure.sh TRIDENT MPIEXEC: a dataset file with a byte of its HDF5 structure (superblock,
# object headers, B-trees, heaps: the first 2 KiB and the last KiB of a small file) overwritten is
# bad input or harmless, never a crash: `inspect` exits 0 or 2 for every such byte and a run
# (np 1) exits 0 or 2, with one message when 2. Every 16th byte of the first range and every 32nd
# of the last is tried (inspect), every 128th for training.
source "$(dirname "$0")/common.sh" "$1" "$2" 256
size=$(stat -c %s syn.h5)
offsets=$(seq 0 16 2047; seq $((size - 1024)) 32 $((size - 1)))
declare -A seen
tried=0 refused_count=0
for offset in $offsets; do
  cp syn.h5 damaged.h5
  printf '\377' | dd of=damaged.h5 bs=1 seek="$offset" conv=notrunc status=none
  set +e
  "$trident" inspect damaged.h5 >inspect.log 2>&1
  rc=$?
  set -e
  tried=$((tried + 1))
  case $rc in
    0) ;;
    2) refused_count=$((refused_count + 1))
       [ "$(grep -c 'trident: error' inspect.log)" = 1 ] || fail "inspect, byte $offset: not one error line: $(cat inspect.log)" ;;
    *) fail "inspect, byte $offset: exit code $rc: $(tail -3 inspect.log)" ;;
  esac
  if [ $((offset % 128)) = 0 ]; then
    set +e
    "$mpiexec" -n 1 "$trident" train /dev/null --set data.path=damaged.h5 --set model.kind=mlp --set run.max_steps=1 \
      --set optim.global_batch=32 --set optim.micro_batch=32 --set run.threads=1 --set run.output_dir=runs/r$offset \
      >train.log 2>&1
    rc=$?
    set -e
    case $rc in
      0) ;;
      2) [ "$(grep -c 'trident: error' train.log)" = 1 ] || fail "train, byte $offset: not one error line"
         [ ! -e "runs/r$offset" ] || fail "train, byte $offset: refused, yet runs/r$offset was written" ;;
      *) fail "train, byte $offset: exit code $rc: $(tail -3 train.log)" ;;
    esac
    seen[$rc]=$(( ${seen[$rc]:-0} + 1 ))
  fi
done
echo "inspect: $tried damaged copies, $refused_count refused (exit 2), the rest read (exit 0)"
echo "train: ${seen[2]:-0} refused, ${seen[0]:-0} trained"
[ "$refused_count" -gt 0 ] || fail "no damaged copy was refused: the bytes tried missed the structure"
echo PASS
