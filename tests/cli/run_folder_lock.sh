#!/usr/bin/env bash
# run_folder_lock.sh TRIDENT MPIEXEC: one run folder, one run at a time.
#  1. Run A trains (np 2); run B, started into the same run.output_dir while A trains, exits 2
#     with one message naming the folder and A's owner line (job, host, A's rank-0 pid), and
#     writes nothing; A then finishes with every metrics record and checkpoint of its own.
#  2. Run C is SIGKILLed (every process) in mid-training; run D into its folder starts at once
#     (the kernel released the lock with C's processes) and resumes from C's checkpoint.
#  3. A --resume that is refused (another global batch) into a new folder leaves no folder.
#  4. A checkpoints folder a run could not save into is refused before training.
#  5. A rank that sees another folder under run.output_dir than rank 0 (node-local storage; here
#     a relative path under another working directory) is refused at start-up, naming the rank,
#     and the refused run leaves nothing in either folder.
#  6. A requeued Slurm job whose folder is locked by an earlier lifetime of the same job (a failed
#     node's lock) waits run.requeue_lock_wait_s for it; another job's lock is refused at once.
source "$(dirname "$0")/common.sh" "$1" "$2" 4096
args=(/dev/null --set data.path=syn.h5 --set model.kind=mlp --set model.hidden=256,256 --set run.threads=1
      --set data.prefetch=0 --set optim.global_batch=64 --set run.log_every=100 --set checkpoint.every_steps=400
      --set checkpoint.keep_last=10)
wait_for_line() {  # FILE REGEX SECONDS
  local deadline=$((SECONDS + $3))
  until grep -qE "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "no line /$2/ in $1 after $3 s: $(tail -3 "$1")"
    sleep 0.1
  done
}

# ---- 1. a second run into a folder in use
"$mpiexec" -n 2 "$trident" train "${args[@]}" --set run.max_steps=4000 --set run.output_dir=runs/shared >a.log 2>&1 &
a=$!
wait_for_line a.log "step 100/4000" 120
owner_pid=$(sed 's/.*pid \([0-9]*\),.*/\1/' runs/shared/.trident-lock)
set +e
"$mpiexec" -n 2 "$trident" train "${args[@]}" --set run.max_steps=40 --set run.output_dir=runs/shared >b.log 2>&1
rc_b=$?
set -e
refused "second run" b.log "$rc_b"
grep -Eq "run.output_dir runs/shared is in use by another run: job .*, host $(hostname), pid $owner_pid, started [0-9T:-]+Z" b.log \
  || fail "second run: the message does not name the owner (pid $owner_pid)"
grep -q "step [0-9]" b.log && fail "second run: it started training"
wait "$a" || fail "first run: exit code $? ($(tail -3 a.log))"
records=$(wc -l <runs/shared/metrics.jsonl)
[ "$records" = 40 ] || fail "first run: metrics.jsonl has $records records, expected 40 (4000 steps, one per 100)"
grep -q '"steps": 4000' runs/shared/report.json || fail "first run: report.json is not the 4000-step run's"
for step in $(seq 400 400 4000); do
  [ -f "runs/shared/checkpoints/step_$(printf %07d "$step").h5" ] || fail "first run: checkpoint of step $step missing"
done
[ "$(cat runs/shared/checkpoints/latest)" = step_0004000.h5 ] || fail "latest is $(cat runs/shared/checkpoints/latest)"
echo "run folder owned by pid $owner_pid: a second run exited 2 while it trained; the first wrote all 4000 steps," \
  "40 records, 10 checkpoints"

# ---- 2. the lock of a killed run is free at once
"$mpiexec" -n 2 "$trident" train "${args[@]}" --set run.max_steps=100000 --set run.output_dir=runs/killed >c.log 2>&1 &
c=$!
wait_for_line c.log "checkpoint .*step_0000400.h5 written" 120
pids=$(pgrep -f "trident train .*runs/killed" || true)
kill -KILL $pids 2>/dev/null || true
wait "$c" 2>/dev/null || true
saved=$(sed 's/step_0*\([0-9]*\).h5/\1/' runs/killed/checkpoints/latest)
"$mpiexec" -n 2 "$trident" train "${args[@]}" --set run.max_steps=$((saved + 50)) --set run.output_dir=runs/killed \
  >d.log 2>&1 || fail "the run after a SIGKILLed owner: exit code $? ($(tail -3 d.log))"
grep -q "resuming from runs/killed/checkpoints/step_$(printf %07d "$saved").h5" d.log \
  || fail "did not resume from step $saved: $(grep resum d.log)"
echo "after SIGKILL of its owner the folder was claimed at once: $(grep -o 'resuming from [^ ]*' d.log)"

# ---- 3. a refused --resume leaves no folder behind
set +e
"$mpiexec" -n 2 "$trident" train "${args[@]}" --set optim.global_batch=128 --set run.output_dir=runs/new/refused \
  --resume "runs/killed/checkpoints/$(cat runs/killed/checkpoints/latest)" >e.log 2>&1
rc_e=$?
set -e
grep "trident: error" e.log | cut -c1-200
[ "$rc_e" = 2 ] || fail "refused resume: exit code $rc_e, expected 2"
grep -q "optim.global_batch = 64" e.log || fail "refused resume: the message does not name the global batch"
[ ! -e runs/new ] || fail "refused resume: it left $(find runs/new) behind"
# The same where the folder cannot be made part way (a name too long: runs/part and runs/part/a
# were left), and through a folder its path leaves again (runs/dots/x/../run: runs/dots/x was).
refused_into() {  # WHAT OUTPUT_DIR REGEX
  set +e
  "$mpiexec" -n 2 "$trident" train "${args[@]}" --set optim.global_batch=128 --set "run.output_dir=$2" \
    --resume "runs/killed/checkpoints/$(cat runs/killed/checkpoints/latest)" >"$1.log" 2>&1
  local rc=$?
  set -e
  refused "$1" "$1.log" "$rc"
  grep -Eq "$3" "$1.log" || fail "$1: no message matching /$3/"
}
runs_time=$(stat -c %.9Y runs)
refused_into too_long "runs/part/a/$(printf 'x%.0s' $(seq 300))" "run.output_dir runs/part/a/x+: cannot create it \(File name too long\)"
[ ! -e runs/part ] || fail "too_long: it left $(find runs/part) behind"
refused_into dots runs/dots/x/../run "optim.global_batch = 64"
[ ! -e runs/dots ] || fail "dots: it left $(find runs/dots) behind"
[ "$(stat -c %.9Y runs)" = "$runs_time" ] || fail "the refused starts changed the time of runs/, where they made their folders"
# An earlier run's lock file is put back as it was, however long its text (it was cut to 511 bytes).
printf 'notes of the user, %.0s' $(seq 50) >>runs/shared/.trident-lock
lock_before=$(md5sum <runs/shared/.trident-lock)
# (and the times: of the lock file, of the folder and of its checkpoints folder, where the start
# made and removed its probe files)
times() { find runs/shared -printf '%p %T@\n' | sort; }
times_before=$(times)
refused_into lock_text runs/shared "optim.global_batch = 64"
[ "$(md5sum <runs/shared/.trident-lock)" = "$lock_before" ] || fail "lock_text: the lock file's text changed"
[ "$(times)" = "$times_before" ] || fail "lock_text: times changed: $(diff <(echo "$times_before") <(times))"
# The same in a run folder without a lock file: the one the start made there is removed, and the
# folder's time put back.
cp -r runs/shared runs/unlocked && rm runs/unlocked/.trident-lock
times_before=$(find runs/unlocked -printf '%p %T@\n' | sort)
refused_into unlocked runs/unlocked "optim.global_batch = 64"
[ ! -e runs/unlocked/.trident-lock ] || fail "unlocked: the refused start left its lock file"
[ "$(find runs/unlocked -printf '%p %T@\n' | sort)" = "$times_before" ] || fail "unlocked: times changed"
echo "refused starts left no folder (a name too long, a path through x/..), an earlier lock file's text whole, and every time as it was"

# ---- 4. a checkpoints folder a run could not save into is refused before training, not at the
# first save after the run's work: a link to a folder that is missing, a `latest` that is a
# folder, a read-only mount (where this machine lets root bind-mount; said when it does not).
one=("${args[@]}" --set run.max_steps=2)
expect_refused() {  # FOLDER REGEX
  set +e
  "$trident" train "${one[@]}" --set "run.output_dir=$1" >refused.log 2>&1
  local rc=$?
  set -e
  refused "$1" refused.log "$rc"
  grep -qE "$2" refused.log || fail "$1: the message does not say /$2/"
  [ ! -e "$1/metrics.jsonl" ] && [ ! -e "$1/.trident-lock" ] || fail "$1: the refused run wrote $(ls -A "$1")"
}
mkdir -p runs/dangling runs/latest_folder/checkpoints/latest runs/readonly/checkpoints
ln -s "$PWD/not_made" runs/dangling/checkpoints
expect_refused runs/dangling "its checkpoints folder runs/dangling/checkpoints is a link to .*/not_made, which does not exist"
expect_refused runs/latest_folder "runs/latest_folder/checkpoints/latest is not a regular file"
# A failure inside leaves the mount: common.sh's trap could not remove the scratch folder under it.
trap 'umount "$work/runs/readonly/checkpoints" 2>/dev/null || true; rm -rf "$work"' EXIT
if mount --bind runs/readonly/checkpoints runs/readonly/checkpoints 2>/dev/null &&
   mount -o remount,ro,bind runs/readonly/checkpoints 2>/dev/null; then
  expect_refused runs/readonly "cannot write into its checkpoints folder runs/readonly/checkpoints \\(Read-only file system\\)"
  umount runs/readonly/checkpoints
  echo "checkpoints folder: a dangling link, latest a folder, read-only: each refused before training"
else
  umount runs/readonly/checkpoints 2>/dev/null || true
  echo "checkpoints folder: a dangling link, latest a folder refused; read-only not tried (no bind mount here)"
fi

# ---- 5. ranks that see different folders under one run.output_dir
mkdir -p node_a node_b
set +e
"$mpiexec" -n 1 -wdir "$PWD/node_a" "$trident" train "${one[@]}" --set data.path="$PWD/syn.h5" --set run.output_dir=runs/x \
  : -n 1 -wdir "$PWD/node_b" "$trident" train "${one[@]}" --set data.path="$PWD/syn.h5" --set run.output_dir=runs/x \
  >split.log 2>&1
rc=$?
set -e
refused "folders split between ranks" split.log "$rc"
grep -q "run.output_dir runs/x: rank 1 on $(hostname) does not see the folder rank 0 claimed (runs/x/.trident-lock is not there)" split.log ||
  fail "folders split between ranks: the message does not name rank 1 and the lock file"
grep -q "this rank resolves it in $PWD/node_b" split.log || fail "folders split between ranks: no working directory named"
[ -z "$(find node_a node_b -mindepth 1)" ] || fail "folders split between ranks: the refused run left $(find node_a node_b -mindepth 1)"
echo "a rank seeing another folder under run.output_dir: refused at start-up (exit 2), nothing left behind"
# The same for a checkpoints folder that is a link to storage rank 1 does not share: here rank 1
# runs in a mount namespace where another folder is bound over the link's target (as node-local
# scratch under one path is another folder on each node). Where this machine lets root do that.
mkdir -p scratch/ckpt other_scratch/ckpt linked
ln -s "$PWD/scratch/ckpt" linked/checkpoints
set +e
"$mpiexec" -n 1 "$trident" train "${one[@]}" --set run.output_dir="$PWD/linked" \
  : -n 1 unshare -m sh -c "mount --bind '$PWD/other_scratch' '$PWD/scratch' && exec \"\$0\" \"\$@\"" \
  "$trident" train "${one[@]}" --set run.output_dir="$PWD/linked" >linked.log 2>&1
rc=$?
set -e
if grep -q "unshare: \|mount: " linked.log; then
  echo "a checkpoints link to storage one rank does not share: not tried ($(grep -m1 "unshare: \|mount: " linked.log))"
else
  refused "a checkpoints link to unshared storage" linked.log "$rc"
  grep -q "run.output_dir $PWD/linked: rank 1 on $(hostname) does not see the checkpoints folder rank 0 writes into ($PWD/linked/checkpoints, a link to $PWD/scratch/ckpt: rank 0's probe .trident-seen.* is not there)" linked.log ||
    fail "a checkpoints link to unshared storage: the message does not name rank 1 and the link"
  [ -z "$(find scratch other_scratch -mindepth 2)" ] && [ "$(ls -A linked)" = checkpoints ] ||
    fail "a checkpoints link to unshared storage: the refused run left $(find scratch other_scratch linked -mindepth 1)"
  # Both ranks seeing the same storage through the link: the run trains and saves there.
  "$mpiexec" -n 2 "$trident" train "${one[@]}" --set run.output_dir="$PWD/linked" >linked_shared.log 2>&1 ||
    fail "a checkpoints link both ranks share: $(tail -3 linked_shared.log)"
  [ -f scratch/ckpt/step_0000002.h5 ] && [ -z "$(find scratch/ckpt -name '.trident-seen*')" ] ||
    fail "a checkpoints link both ranks share: $(ls -A scratch/ckpt)"
  echo "a checkpoints link to storage rank 1 does not share: refused at start-up (exit 2); shared, it trains"
fi

# ---- 6. a requeued job whose folder is still locked by its own earlier lifetime (its node failed,
# and the file system holds that lock until it gives up on the node). The earlier lifetime here is
# a process with the job's id and restart 0, frozen (SIGSTOP) after a checkpoint; killing it
# stands for the file system letting its lock go. (SLURM_* set for the trident process only.)
env SLURM_JOB_ID=4242 "$trident" train "${args[@]}" --set run.max_steps=100000 --set run.output_dir=runs/requeued \
  >earlier.log 2>&1 &
earlier=$!
wait_for_line earlier.log "checkpoint .*step_0000400.h5 written" 120
kill -STOP "$earlier"
saved=$(sed 's/step_0*\([0-9]*\).h5/\1/' runs/requeued/checkpoints/latest)
grep -q "^job 4242, host $(hostname), pid $earlier," runs/requeued/.trident-lock ||
  fail "the owner line: $(cat runs/requeued/.trident-lock)"
requeue=("${args[@]}" --set run.output_dir=runs/requeued --set run.max_steps=$((saved + 50)))
expect_exit() {  # CODE LOG COMMAND...: run COMMAND (its output to LOG), expecting exit code CODE
  local code=$1 log=$2 rc
  shift 2
  set +e
  "$@" >"$log" 2>&1
  rc=$?
  set -e
  [ "$rc" = "$code" ] || fail "$log: exit code $rc, expected $code: $(tail -3 "$log")"
}
# Another job's lock is refused at once, requeued or not.
expect_exit 2 other_job.log env SLURM_JOB_ID=999 SLURM_RESTART_COUNT=1 "$trident" train "${requeue[@]}"
grep -q "runs/requeued is in use by another run: job 4242, host" other_job.log && ! grep -q "Waiting up to" other_job.log ||
  fail "another job's lock: $(cat other_job.log)"
# The requeue waits run.requeue_lock_wait_s, then exits 2 saying what to do.
started=$SECONDS
expect_exit 2 short_wait.log env SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 "$trident" train "${requeue[@]}" \
  --set run.requeue_lock_wait_s=2
refused "a short wait" short_wait.log 2
grep -q "locked by an earlier lifetime of this job (job 4242, host .*), which Slurm has ended.*Waiting up to 2 s" short_wait.log &&
  grep -q "still locked by an earlier lifetime of this job .* after 2 s (run.requeue_lock_wait_s = 2).* remove runs/requeued/.trident-lock" \
  short_wait.log || fail "a short wait: the messages"
[ $((SECONDS - started)) -ge 2 ] || fail "a short wait: it did not wait 2 s"
# The next link of a jobs/restart_chain.sh chain (another job id, the held one named as its
# predecessor) waits the same way.
expect_exit 2 chain_link.log env SLURM_JOB_ID=4243 TRIDENT_CHAIN_PREVIOUS_JOB=4242 "$trident" train "${requeue[@]}" \
  --set run.requeue_lock_wait_s=1
grep -q "locked by the previous link of this job chain (job 4242, host .*), which Slurm has ended.*Waiting up to 1 s" \
  chain_link.log && grep -q "still locked by the previous link of this job chain .* after 1 s" chain_link.log ||
  fail "the next link of a chain: $(cat chain_link.log)"
# A stop signal during the wait: exit 3 (the job scripts requeue), nothing written.
env SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 "$trident" train "${requeue[@]}" >signalled_wait.log 2>&1 &
waiter=$!
wait_for_line signalled_wait.log "Waiting up to 300 s" 60
kill -USR1 "$waiter"
set +e
wait "$waiter"
rc=$?
set -e
[ "$rc" = 3 ] && grep -q "stopped by a signal while waiting for the lock of run.output_dir runs/requeued" signalled_wait.log ||
  fail "a stop signal during the wait: exit $rc: $(cat signalled_wait.log)"
# With the default wait, the requeue takes the folder once the lock is let go, resumes from the
# earlier lifetime's checkpoint and finishes.
env SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 "$trident" train "${requeue[@]}" >requeue.log 2>&1 &
requeued=$!
wait_for_line requeue.log "Waiting up to 300 s" 60
sleep 1
kill -KILL "$earlier"
set +e
wait "$requeued"
rc=$?
set -e
[ "$rc" = 0 ] || fail "the requeue: exit $rc: $(tail -3 requeue.log)"
grep -q "its lock was freed after [0-9.]* s; this run holds it" requeue.log &&
  grep -q "resuming from runs/requeued/checkpoints/step_$(printf %07d "$saved").h5" requeue.log ||
  fail "the requeue did not take the freed lock and resume from step $saved: $(grep -E 'lock|resum' requeue.log)"
grep -q "^job 4242 (restart 1), host" runs/requeued/.trident-lock || fail "the requeue's owner line: $(cat runs/requeued/.trident-lock)"
wait "$earlier" 2>/dev/null || true
echo "a requeue finding its earlier lifetime's lock: another job refused at once; a 2 s wait exits 2; a stop signal" \
  "in the wait exits 3; the default wait took the lock once freed and resumed from step $saved"
echo PASS
