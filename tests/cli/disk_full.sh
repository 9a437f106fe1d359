#!/usr/bin/env bash
# disk_full.sh TRIDENT MPIEXEC: run.output_dir on a 2 MB tmpfs holds one checkpoint of this mlp
# (1.2 MB) but not two. The save at step 10 hits ENOSPC: the run stops with exit 1 and one
# message naming the disk error; the step-5 checkpoint and `latest` are intact, the partial file
# is removed; with space again, --resume auto continues from step 5 to the end. prepare-data and
# trident report on a full disk say so in one line. Needs root
# (mount); fails, not skips, without it.
source "$(dirname "$0")/common.sh" "$1" "$2" 2048
disk=$work/disk
mkdir -p "$disk"
mount -t tmpfs -o size=2m tmpfs "$disk" || fail "cannot mount a tmpfs (this test needs root)"
trap 'umount "$disk" 2>/dev/null; rm -rf "$work"' EXIT
args=(--set data.path=syn.h5 --set run.max_steps=20 --set run.log_every=5 --set run.threads=1
      --set optim.global_batch=64 --set optim.micro_batch=16 --set model.kind=mlp
      --set checkpoint.every_steps=5 --set "run.output_dir=$disk/run")
set +e
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" >full.log 2>&1
rc=$?
set -e
grep "trident: error" full.log | cut -c1-300
[ "$rc" = 1 ] || fail "exit code $rc on a full disk, expected 1: $(tail -3 full.log)"
[ "$(grep -c 'trident: error' full.log)" = 1 ] || fail "the error is not printed exactly once"
grep -q "checkpoint of step 10 not saved: .*No space left on device" full.log || fail "no message naming the disk error"
ckpts=$disk/run/checkpoints
[ "$(cat "$ckpts/latest")" = step_0000005.h5 ] || fail "latest does not name step 5"
"$trident" inspect "$ckpts/step_0000005.h5" | grep -q "every block verified" || fail "step 5 damaged"
[ -z "$(ls "$ckpts" | grep -v '^latest$\|^step_0000005.h5$')" ] || fail "left behind: $(ls "$ckpts")"

mount -o remount,size=16m "$disk"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --resume auto >resumed.log 2>&1 \
  || fail "resume after freeing space failed: $(tail -3 resumed.log)"
grep -q "resuming from $ckpts/step_0000005.h5" resumed.log || fail "did not resume from step 5"
[ "$(cat "$ckpts/latest")" = step_0000020.h5 ] || fail "the resumed run did not finish"

# prepare-data on a full disk: exit 1, one line naming --out and the disk's error, nothing left
# (it printed HDF5's whole error stack). Past a file size limit (EFBIG) it ended with signal 11
# as well: HDF5 closed at exit the file whose close had failed.
small=$work/small
mkdir -p "$small"
mount -t tmpfs -o size=256k tmpfs "$small" || fail "cannot mount a second tmpfs"
trap 'umount "$disk" "$small" 2>/dev/null; rm -rf "$work"' EXIT
make_data=(prepare-data synthetic --train 4096 --test 64 --shape 1x8x8)  # 1 MB
set +e
"$trident" "${make_data[@]}" --out "$small/x.h5" >prepare_full.log 2>&1
rc=$?
(trap '' XFSZ; ulimit -f 200; exec "$trident" "${make_data[@]}" --out big.h5) >prepare_big.log 2>&1
rc_big=$?
set -e
cat prepare_full.log prepare_big.log | cut -c1-300
[ "$rc" = 1 ] && [ "$(wc -l <prepare_full.log)" = 1 ] &&
  grep -q "prepare-data: --out $small/x.h5: writing /train/inputs failed: No space left on device" prepare_full.log ||
  fail "prepare-data on a full disk: exit $rc, not the one line expected"
[ -z "$(ls -A "$small")" ] || fail "prepare-data left on the full disk: $(ls -A "$small")"
[ "$rc_big" = 1 ] && grep -q "writing /train/inputs failed: File too large" prepare_big.log ||
  fail "prepare-data past a file size limit: exit $rc_big"
[ -z "$(ls big.h5* 2>/dev/null)" ] || fail "prepare-data past a file size limit left $(ls big.h5*)"

# A report onto a full disk names the file and the system's reason (it said "cannot write" alone),
# and leaves nothing there.
dd if=/dev/zero of="$small/filler" bs=4k 2>/dev/null || true
set +e
"$trident" report --goodput "$disk/run" --out "$small" >report_full.log 2>&1
rc=$?
set -e
cat report_full.log | cut -c1-300
[ "$rc" = 2 ] && grep -q "report: cannot write $small/goodput.md: No space left on device" report_full.log ||
  fail "report onto a full disk: exit $rc, not the message expected"
rm "$small/filler"
[ -z "$(ls -A "$small")" ] || fail "report left on the full disk: $(ls -A "$small")"

# A checkpoint given as --out by mistake is refused (exit 2) and kept (it was replaced by a dataset).
cp "$ckpts/step_0000020.h5" kept.h5
set +e
"$trident" "${make_data[@]}" --out kept.h5 >prepare_onto.log 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "prepare-data: --out kept.h5 is an HDF5 file but not a dataset" prepare_onto.log ||
  fail "prepare-data onto a checkpoint: exit $rc: $(cat prepare_onto.log)"
cmp -s kept.h5 "$ckpts/step_0000020.h5" || fail "prepare-data changed the checkpoint it refused"
echo PASS
