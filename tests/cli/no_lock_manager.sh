#!/usr/bin/env bash
# no_lock_manager.sh TRIDENT MPIEXEC SHIM: a file system without a lock manager (NFSv3 without
# rpc.statd/lockd), where every lock request fails with ENOLCK (SHIM, LD_PRELOADed). trident's
# files are each written by one process and published by rename, so HDF5's own file locks (which
# fail there: "unable to lock file, errno = 37") are not used: prepare-data writes its dataset,
# a run at np 2 warns once that its folder is unguarded, trains, saves checkpoints that verify,
# and a second run resumes from them; a save killed midway leaves a .tmp the next run names.
source "$(dirname "$0")/common.sh" "$1" "$2" 512
shim=$3
[ -f "$shim" ] || fail "no shim at $shim"
LD_PRELOAD=$shim "$trident" prepare-data synthetic --out nolock.h5 --train 512 --test 64 --classes 4 --shape 1x8x8 \
  >prepare.log 2>&1 || fail "prepare-data without locks: exit code $? ($(cat prepare.log))"
args=(/dev/null --set data.path=nolock.h5 --set model.kind=mlp --set run.threads=1 --set checkpoint.every_steps=2
      --set run.output_dir=runs/nolock)
"$mpiexec" -n 2 -genv LD_PRELOAD "$shim" "$trident" train "${args[@]}" --set run.max_steps=4 >first.log 2>&1 ||
  fail "training without locks: exit code $? ($(tail -3 first.log))"
grep -q "its file system does not support locks (No locks available)" first.log || fail "no warning that the folder is unguarded"
[ "$(grep -c "does not support locks" first.log)" = 1 ] || fail "the warning is not said once"
"$trident" inspect runs/nolock/checkpoints/step_0000004.h5 | grep -q "every block verified" || fail "step 4 does not verify"
"$mpiexec" -n 2 -genv LD_PRELOAD "$shim" "$trident" train "${args[@]}" --set run.max_steps=6 >second.log 2>&1 ||
  fail "resuming without locks: exit code $? ($(tail -3 second.log))"
grep -q "resuming from runs/nolock/checkpoints/step_0000004.h5" second.log || fail "the second run did not resume from step 4"
# A save killed midway leaves its .tmp. Without locks it may be another live run's: the next run
# leaves it, and says so (with a lock it removes it, saying so: kill_during_save.sh).
set +e
TRIDENT_TEST_KILL_DURING_SAVE=8 "$mpiexec" -n 2 -genv LD_PRELOAD "$shim" "$trident" train "${args[@]}" \
  --set run.max_steps=8 >killed.log 2>&1
set -e
[ -f runs/nolock/checkpoints/step_0000008.h5.tmp ] || fail "the killed save left no step_0000008.h5.tmp: $(ls runs/nolock/checkpoints)"
"$mpiexec" -n 2 -genv LD_PRELOAD "$shim" "$trident" train "${args[@]}" --set run.max_steps=7 >after_kill.log 2>&1 ||
  fail "resuming after the kill: exit code $? ($(tail -3 after_kill.log))"
grep -q "unfinished saves in runs/nolock/checkpoints, left as they are (without locks they may be another live run's): step_0000008.h5.tmp (" \
  after_kill.log || fail "the unfinished step_0000008.h5.tmp was not named: $(grep -i unfinished after_kill.log)"
[ -f runs/nolock/checkpoints/step_0000008.h5.tmp ] || fail "without locks, the unfinished save was removed"
# A user's own choice of HDF5's locking is theirs: with HDF5_USE_FILE_LOCKING=TRUE the same
# write fails, naming the cause.
set +e
HDF5_USE_FILE_LOCKING=TRUE LD_PRELOAD=$shim "$trident" prepare-data synthetic --out forced.h5 --train 64 --test 16 \
  --classes 4 --shape 1x8x8 >forced.log 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "No locks available" forced.log || fail "HDF5_USE_FILE_LOCKING=TRUE: exit $rc ($(cat forced.log))"
[ -z "$(ls -A | grep '^forced\.h5')" ] || fail "HDF5_USE_FILE_LOCKING=TRUE: the failed prepare-data left $(ls | grep '^forced\.h5')"
set +e
HDF5_USE_FILE_LOCKING=TRUE "$mpiexec" -n 2 -genv LD_PRELOAD "$shim" "$trident" train "${args[@]}" --set run.max_steps=8 \
  >forced_train.log 2>&1
rc=$?
set -e
refused "HDF5_USE_FILE_LOCKING=TRUE, training" forced_train.log "$rc"
grep -q "HDF5 cannot open it: unable to lock file, errno = 37, error message = 'No locks available'" forced_train.log ||
  fail "HDF5_USE_FILE_LOCKING=TRUE, training: the message does not give HDF5's cause"
set +e
HDF5_USE_FILE_LOCKING=TRUE "$mpiexec" -n 2 -genv LD_PRELOAD "$shim" "$trident" train "${args[@]}" --set run.max_steps=8 \
  --resume never --set run.output_dir=runs/forced >forced_data.log 2>&1
rc=$?
set -e
refused "HDF5_USE_FILE_LOCKING=TRUE, reading the data" forced_data.log "$rc"
grep -q "data.path nolock.h5: HDF5 cannot open it: unable to lock file, errno = 37" forced_data.log ||
  fail "HDF5_USE_FILE_LOCKING=TRUE, reading the data: the message does not name the file and HDF5's cause"
echo "without a lock manager: prepare-data, training at np 2 (unguarded, said once), checkpoints verified, resume"
echo PASS
