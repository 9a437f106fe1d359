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
echo PASS
