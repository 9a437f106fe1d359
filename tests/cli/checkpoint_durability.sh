#!/usr/bin/env bash
# checkpoint_durability.sh TRIDENT MPIEXEC: a committed checkpoint survives a crash of any node
# (Lustre, GPFS and local disks keep written data in memory for a while after close). Traced with
# strace at np 2, keep_last 1, saves at steps 2 and 4 (sync and checkpoint.async), in order:
# every rank's fdatasync of its pieces of step_S.h5.tmp, rank 0's fsync of the file (its
# checksums and metadata), the rename to step_S.h5, an fsync of the folder, the fsync of
# latest.tmp, its rename to latest, an fsync of the folder; and the previous checkpoint is
# removed only after all of that. Exit 77 (skipped) where this machine does not let strace trace.
source "$(dirname "$0")/common.sh" "$1" "$2" 512
strace -f -o /dev/null true 2>/dev/null || { echo "SKIPPED: strace cannot trace here"; exit 77; }
for async in false true; do
  dir=runs/$async
  # ?: calls this architecture lacks are left out (aarch64 has only renameat2 and unlinkat).
  strace -f -y -qq -e trace='?fsync,?fdatasync,?rename,?renameat,?renameat2,?unlink,?unlinkat' -o "trace_$async.txt" \
    "$mpiexec" -n 2 "$trident" train /dev/null --set data.path=syn.h5 --set model.kind=mlp --set run.threads=1 \
      --set run.max_steps=4 --set checkpoint.every_steps=2 --set checkpoint.keep_last=1 \
      --set checkpoint.async=$async --set run.output_dir=$dir >"train_$async.log" 2>&1 ||
    fail "checkpoint.async=$async: exit code $? ($(tail -3 "train_$async.log"))"
  # One line per call as it starts ("<unfinished ...>" for one another process interrupted).
  calls=$(grep -v "resumed>" "trace_$async.txt")
  ck="$PWD/$dir/checkpoints"
  line_of() {  # the first line number of the calls matching the extended REGEX after line FROM and before
               # line $bound (0: none)
    awk -v from="$2" -v to="$bound" -v re="$1" 'NR > from && NR < to && $0 ~ re {print NR; exit}' <<<"$calls" |
      grep . || echo 0
  }
  # rename(OLD, NEW), or renameat/renameat2 with a folder argument before each path.
  renamed() { echo "rename(at2?)?\\(([^,]*, )?\"$1\", ([^,]*, )?\"$2\""; }
  for step in 2 4; do
    name=step_000000$step.h5
    # Each stage of step 2 before the first piece of step 4 is synced: step 4's commit (the same
    # stages) would otherwise stand in for a missing one of step 2.
    bound=$(awk -v re="fdatasync\\([0-9]+<$ck/step_0000004.h5.tmp>" '$0 ~ re {print NR; exit}' <<<"$calls")
    [ "$step" = 2 ] && [ -n "$bound" ] || bound=$(($(wc -l <<<"$calls") + 1))
    synced=$(grep -cE "fdatasync\([0-9]+<$ck/$name.tmp>" <<<"$calls" || true)
    [ "$synced" = 2 ] || fail "async=$async, step $step: $synced fdatasync of the pieces in $name.tmp, expected 2 (one per rank)"
    last_piece=$(awk -v re="fdatasync\\\\([0-9]+<$ck/$name.tmp>" '$0 ~ re {n = NR} END {print n}' <<<"$calls")
    file=$(line_of "[^a-z]fsync\\([0-9]+<$ck/$name.tmp>" "$last_piece")
    named=$(line_of "$(renamed "$dir/checkpoints/$name.tmp" "$dir/checkpoints/$name")" "$file")
    folder=$(line_of "[^a-z]fsync\\([0-9]+<$ck>" "$named")
    latest=$(line_of "[^a-z]fsync\\([0-9]+<$ck/latest.tmp>" "$folder")
    pointed=$(line_of "$(renamed "$dir/checkpoints/latest.tmp" "$dir/checkpoints/latest")" "$latest")
    done_at=$(line_of "[^a-z]fsync\\([0-9]+<$ck>" "$pointed")
    for stage in file named folder latest pointed done_at; do
      [ "${!stage}" != 0 ] || fail "async=$async, step $step: no '$stage' after the one before it (pieces synced at line $last_piece)"
    done
    echo "async=$async step $step: pieces synced by line $last_piece, file $file, renamed $named, folder $folder," \
      "latest $latest, renamed $pointed, folder $done_at"
    if [ "$step" = 4 ]; then
      removed=$(grep -nE "unlink(at)?\(([^,]*, )?\"$dir/checkpoints/step_0000002.h5\"" <<<"$calls" | cut -d: -f1)
      [ -n "$removed" ] || fail "async=$async: step 2 was not removed (keep_last 1)"
      [ "$removed" -gt "$done_at" ] || fail "async=$async: step 2 removed (line $removed) before step 4 was durable (line $done_at)"
      echo "async=$async: step 2 removed at line $removed, after step 4 was durable"
    fi
  done
  [ "$(cat $dir/checkpoints/latest)" = step_0000004.h5 ] || fail "async=$async: latest is $(cat $dir/checkpoints/latest)"
done
echo PASS
