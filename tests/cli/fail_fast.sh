#!/usr/bin/env bash
# fail_fast.sh TRIDENT MPIEXEC [nccl]: a rank that dies or stops making progress takes a 2-rank
# run down within run.fail_timeout_s (here 5 s), with a message naming the rank and every rank's
# last completed operation, and nothing is left running:
#   stopped  SIGSTOP to rank 1 (the whole process frozen: no heartbeats)
#   stalled  rank 1's main thread stuck at step 30 (TRIDENT_TEST_STALL), its heartbeat alive
#   killed   SIGKILL to rank 1 (Hydra ends the job itself, at once)
#   faulted  rank 1 fails alone while a background save is written: its message, not the watchdog's,
#            at once; and a one-rank run's fault does not wait for the save's write
# and during start-up, before the first step:
#   startup_stopped  rank 1 SIGSTOPs itself (TRIDENT_TEST_STARTUP=1:stop): the job ends the same way
#   startup_busy     rank 1 works 2 x fail_timeout_s without communicating (as a long dataset scan
#                    does) while rank 0 waits: not a stuck rank; the run trains to the end
# and rank 0 stalled in writing its records, or rank 1 in writing its part of a checkpoint (a file
# system's stall): given 20 x fail_timeout_s, then the job ends naming the rank.
# With "nccl" the ranks train on two GPUs over NCCL, so rank 0 is waiting inside an NCCL
# collective when rank 1 stops (tests/gpu registers it; exit 77, skipped, with fewer than two).
if [ "${3:-}" = nccl ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "${gpus:-0}" -ge 2 ] || { echo "skipped: needs 2 GPUs, ${gpus:-0} visible (nvidia-smi -L)"; exit 77; }
fi
source "$(dirname "$0")/common.sh" "$1" "$2" 4096
timeout_s=5
args=(--set data.path=syn.h5 --set run.max_steps=1000000 --set run.log_every=10 --set run.threads=1
      --set optim.global_batch=64 --set optim.micro_batch=16 --set model.kind=mlp --set data.prefetch=0
      --set "run.fail_timeout_s=$timeout_s")
if [ "${3:-}" = nccl ]; then args+=(--set run.device=cuda --set parallel.backend=nccl); fi
extra=()
marker=failfast_$$
cleanup() { pkill -KILL -f "run.name=$marker" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# The pid of this test's rank with PMI_RANK=$1 (mpiexec passes it in the environment).
rank_pid() {
  for p in $(pgrep -f "^$trident train .*run.name=$marker"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PMI_RANK=$1" && { echo "$p"; return; }
  done
}

# run CASE SIGNAL [ENV...]: starts the job (with the deck overrides in extra), waits for step 20, sends SIGNAL to rank 1 (unless
# "none"), and sets rc and seconds (from the signal to the launcher's exit).
run() {
  local name=$1 signal=$2
  shift 2
  env "$@" "$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${extra[@]}" --set "run.output_dir=runs/$name" \
    --set "run.name=$marker" >"$name.log" 2>&1 &
  local launcher=$!
  for _ in $(seq 600); do grep -q "step 20/" "$name.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "step 20/" "$name.log" || fail "$name: the run did not reach step 20: $(tail -3 "$name.log")"
  local start=$(date +%s.%N)
  if [ "$signal" != none ]; then
    local pid=$(rank_pid 1)
    [ -n "$pid" ] || fail "$name: rank 1 not found"
    kill "-$signal" "$pid"
  fi
  set +e
  wait "$launcher"
  rc=$?
  set -e
  seconds=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$name: exit code $rc after $seconds s"
  [ "$rc" != 0 ] || fail "$name: the job exited 0"
  # fail_timeout_s, the abort's wait and, when stalled, steps 20 to 30 (under a second) fit in 3 x
  # fail_timeout_s with room for a loaded machine (it was 30 s: a watchdog 5 times late passed).
  local limit=$((3 * timeout_s))
  [ "$(echo "$seconds < $limit" | bc)" = 1 ] || fail "$name: took $seconds s (limit $limit)"
  sleep 0.5
  [ -z "$(pgrep -f "run.name=$marker")" ] || fail "$name: processes left running: $(pgrep -af "run.name=$marker")"
}

run stopped STOP
grep -q "rank 1 on .* stopped responding: no heartbeat for [5-9]\.[0-9] s" stopped.log \
  || fail "stopped: no message naming rank 1: $(grep error stopped.log)"
grep -q "Last completed operation of every rank" stopped.log || fail "stopped: no per-rank summary"
grep -Eq "^  rank 1 on .*: step [0-9]+, [0-9]+ operations completed" stopped.log || fail "stopped: rank 1 not listed"
[ "$(grep -c 'fail-fast watchdog' stopped.log)" = 1 ] || fail "stopped: the message is not printed exactly once"
# Rank 0 aborted the job: its goodput record is closed with exit code 1, not left open as a
# killed process's is (it said "killed" and no exit code before).
[ ! -e runs/stopped/goodput.open.json ] || fail "stopped: rank 0's goodput record was left open"
grep -Eq '"exit_code":1[,}]' runs/stopped/goodput.jsonl || fail "stopped: no exit code 1 in $(cat runs/stopped/goodput.jsonl)"

run stalled none TRIDENT_TEST_STALL=1:30
grep -q "rank 1 on .* made no progress for more than $timeout_s s outside communication" stalled.log \
  || fail "stalled: no message naming rank 1: $(grep error stalled.log)"
grep -Eq "^  rank 1 on .*: step 30, .* computing for" stalled.log || fail "stalled: rank 1's state not shown"

run killed KILL

# A fault of rank 1 alone while a background save is being written (its writer slowed to 60 s a
# phase): rank 1 says what went wrong and ends the job at once. It waited for its writer before
# (minutes, here 2 x 60 s), and rank 0's watchdog aborted first, blaming rank 1 for a hang.
extra=(--set checkpoint.every_steps=40)
run faulted none TRIDENT_TEST_FAULT=1:40 TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS=60000
extra=()
grep -q "trident: fault: rank 1 on .*: a fault at step 40 (TRIDENT_TEST_FAULT)" faulted.log \
  || fail "faulted: rank 1's message is missing: $(grep -E 'fault|error' faulted.log)"
! grep -q "fail-fast watchdog" faulted.log || fail "faulted: the watchdog spoke: $(grep watchdog faulted.log)"
# The same fault of a one-rank run: its background save's write is abandoned (it waited for it).
start=$(date +%s.%N)
set +e
TRIDENT_TEST_FAULT=0:40 TRIDENT_TEST_SLOW_BACKGROUND_SAVE_MS=60000 timeout 100 "$mpiexec" -n 1 "$trident" train /dev/null \
  "${args[@]}" --set checkpoint.every_steps=40 --set run.output_dir=runs/faulted_alone --set "run.name=$marker" \
  >faulted_alone.log 2>&1
rc=$?
set -e
seconds=$(echo "$(date +%s.%N) - $start" | bc)
echo "faulted_alone: exit code $rc after $seconds s"
[ "$rc" = 1 ] || fail "faulted_alone: exit code $rc, expected 1: $(tail -3 faulted_alone.log)"
grep -q "trident: fault: rank 0 on .*: a fault at step 40 (TRIDENT_TEST_FAULT)" faulted_alone.log \
  || fail "faulted_alone: no message: $(tail -3 faulted_alone.log)"
[ "$(echo "$seconds < $((3 * timeout_s))" | bc)" = 1 ] || fail "faulted_alone: took $seconds s (it waited for its writer)"
ls runs/faulted_alone/checkpoints/step_0000040.h5.tmp >/dev/null || fail "faulted_alone: the abandoned save's file is gone"
[ ! -e runs/faulted_alone/checkpoints/step_0000040.h5 ] || fail "faulted_alone: the abandoned save was committed"

# run_to_end CASE LIMIT_S ENV=VALUE [--set ...]: a run (killed after LIMIT_S: exit 124) with that
# fault injected and those deck settings; sets rc and seconds, and checks that nothing is left running.
run_to_end() {
  local name=$1 limit=$2 injected=$3 start=$(date +%s.%N)
  shift 3
  set +e
  env "$injected" timeout "$limit" "$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" \
    --set "run.output_dir=runs/$name" --set "run.name=$marker" "$@" >"$name.log" 2>&1
  rc=$?
  set -e
  seconds=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$name: exit code $rc after $seconds s"
  sleep 0.5
  [ -z "$(pgrep -f "run.name=$marker")" ] || fail "$name: processes left running: $(pgrep -af "run.name=$marker")"
}
run_to_end startup_stopped 60 TRIDENT_TEST_STARTUP=1:stop --set run.max_steps=20
[ "$rc" = 1 ] || fail "startup_stopped: exit code $rc, expected 1 (124: the job hung): $(tail -3 startup_stopped.log)"
grep -q "rank 1 on .* stopped responding: no heartbeat for [5-9]\.[0-9] s" startup_stopped.log \
  || fail "startup_stopped: no message naming rank 1: $(grep error startup_stopped.log)"
run_to_end startup_busy 60 TRIDENT_TEST_STARTUP=1:busy=$((2 * timeout_s)) --set run.max_steps=20
[ "$rc" = 0 ] || fail "startup_busy: exit code $rc, expected 0 (a busy start-up is not a stuck rank): $(grep error startup_busy.log)"
grep -q "busy for 10.0 s during start-up" startup_busy.log || fail "startup_busy: the start-up was not held up"

# Rank 0 stalled in file I/O (its metrics.jsonl records slowed, as on an NFS server failover)
# while rank 1 waits in the next collective: not a stuck rank until 20 x run.fail_timeout_s.
# records_stalled: two 3 s stalls at fail_timeout_s 1, each followed by a step of some 0.25 s
# (a wider model) before the next collective: the run trains to the end (it was aborted: "rank 0
# made no progress for more than 1 s outside communication", first for the stall itself, then for
# the step after it, timed from the last collective before the stall). records_hung: a 60 s stall
# at fail_timeout_s 1: aborted after 20 s, naming rank 0 and its file I/O.
stall() {  # CASE FAIL_TIMEOUT_S ENV=VALUE [--set ...]: a 40-step run with that fault injected
  local name=$1 timeout=$2 injected=$3
  shift 3
  run_to_end "$name" 120 "$injected" --set run.max_steps=40 --set run.log_every=20 --set "run.fail_timeout_s=$timeout" "$@"
}
stall records_stalled 1 TRIDENT_TEST_SLOW_RECORDS_MS=3000 --set model.hidden=4096,4096 --set optim.micro_batch=32
[ "$rc" = 0 ] || fail "records_stalled: exit code $rc, expected 0: $(grep error records_stalled.log)"
[ "$(grep -c "a metrics.jsonl record slowed by 3000 ms" records_stalled.log)" = 2 ] || fail "records_stalled: not stalled twice"
stall records_hung 1 TRIDENT_TEST_SLOW_RECORDS_MS=60000
[ "$rc" = 1 ] || fail "records_hung: exit code $rc, expected 1: $(tail -3 records_hung.log)"
grep -q "rank 0 on .* has been in file I/O for more than 20 s (20 x run.fail_timeout_s" records_hung.log ||
  fail "records_hung: no message naming rank 0's file I/O: $(grep error records_hung.log)"
grep -Eq "^  rank 0 on .*: step 20, .* in file I/O for" records_hung.log || fail "records_hung: rank 0's state not shown"
[ "$(echo "$seconds < 50" | bc)" = 1 ] || fail "records_hung: took $seconds s"
# The same for rank 0's progress line (stdout, under Slurm a log on the shared file system: a
# write stalls with it once the pipes on the way are full). progress_stalled: two 3 s stalls at
# fail_timeout_s 1 are waited for (aborted after 1 s before: the main thread's lines were
# computing to the watchdog). progress_hung: a 60 s stall ends the job after 20 s, naming rank 0.
stall progress_stalled 1 TRIDENT_TEST_SLOW_PROGRESS_LINE_MS=3000
[ "$rc" = 0 ] || fail "progress_stalled: exit code $rc, expected 0: $(grep error progress_stalled.log)"
[ "$(grep -c "a progress line slowed by 3000 ms" progress_stalled.log)" = 2 ] || fail "progress_stalled: not stalled twice"
stall progress_hung 1 TRIDENT_TEST_SLOW_PROGRESS_LINE_MS=60000
[ "$rc" = 1 ] || fail "progress_hung: exit code $rc, expected 1: $(tail -3 progress_hung.log)"
grep -q "rank 0 on .* has been in file I/O for more than 20 s (20 x run.fail_timeout_s" progress_hung.log ||
  fail "progress_hung: no message naming rank 0's file I/O: $(grep error progress_hung.log)"
[ "$(echo "$seconds < 50" | bc)" = 1 ] || fail "progress_hung: took $seconds s"
# The same for rank 1 stalled writing its part of a checkpoint while rank 0 waits in the save's
# collectives. save_uneven: a 5 s stall at fail_timeout_s 2 is waited for. save_hung: a 60 s
# stall at fail_timeout_s 1 ends the job after 20 s, naming rank 1 (the save's collectives were
# invisible to the watchdog: the job waited out the stall, as it would a hung mount to its time limit).
stall save_uneven 2 TRIDENT_TEST_SLOW_SAVE=1:5000 --set checkpoint.every_steps=20
[ "$rc" = 0 ] || fail "save_uneven: exit code $rc, expected 0: $(grep error save_uneven.log)"
grep -q "rank 1's checkpoint write stalled 5000 ms" save_uneven.log || fail "save_uneven: no stall"
stall save_hung 1 TRIDENT_TEST_SLOW_SAVE=1:60000 --set checkpoint.every_steps=20
[ "$rc" = 1 ] || fail "save_hung: exit code $rc, expected 1: $(tail -3 save_hung.log)"
grep -q "rank 1 on .* has been in file I/O for more than 20 s (20 x run.fail_timeout_s" save_hung.log ||
  fail "save_hung: no message naming rank 1's file I/O: $(grep error save_hung.log)"
[ "$(echo "$seconds < 50" | bc)" = 1 ] || fail "save_hung: took $seconds s"
[ ! -e runs/save_hung/checkpoints/step_0000020.h5 ] || fail "save_hung: the stalled save was committed"
echo PASS
