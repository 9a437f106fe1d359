#!/usr/bin/env bash
# train_smoke.sh TRIDENT MPIEXEC NP: prepares a synthetic dataset, trains the cnn on NP ranks
# and checks what a user and the job scripts rely on: exit 0, the progress lines, and the
# contract fields of report.json and metrics.jsonl.
set -eu
trident=$1 mpiexec=$2 np=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$trident" prepare-data synthetic --out data/syn.h5 --train 1024 --test 256 --classes 4 --shape 1x12x12 >/dev/null
"$trident" inspect data/syn.h5 | grep -q '/train/inputs  float32  \[1024 x 1 x 12 x 12\]'
out=$("$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 --set run.name=smoke \
      --set run.max_steps=12 --set run.log_every=4 --set optim.global_batch=64 --set optim.micro_batch=16 2>&1)
printf '%s\n' "$out"
fail() { echo "FAIL: $*"; exit 1; }
grep -Eq "step 12/12 \| loss [0-9.]+ \| lr .* samples/s \| ETA" <<<"$out" || fail "no progress line"
[ "$(grep -c 'resolved deck' <<<"$out")" = 1 ] || fail "the resolved deck must be printed once"
report=runs/smoke/report.json
[ -f "$report" ] || fail "no $report"
for field in '"world": '"$np" '"dp": '"$np" '"steps": 12' '"test_accuracy"' '"samples_per_s"' \
             '"comm_exposed"' '"peak_bytes"' '"startup_peak_bytes"' '"global_batch": 64' '"torch_version"' '"nodes": 1' \
             '"time_to_safe_stop_s": [0-9]'; do
  grep -Eq -- "$field" "$report" || fail "report.json lacks $field"
done
[ "$(wc -l < runs/smoke/metrics.jsonl)" = 3 ] || fail "metrics.jsonl should have 3 records (steps 4, 8, 12)"
grep -q '"step":12' runs/smoke/metrics.jsonl || fail "metrics.jsonl lacks step 12"

# A job whose signal (--signal=B:USR1@N, passed as TRIDENT_SIGNAL_LEAD_S) comes too late for a
# step and a save: rank 0 says so once, naming the lead to ask for.
late=$(TRIDENT_SIGNAL_LEAD_S=0.000001 "$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 \
       --set run.name=smoke_lead --set run.max_steps=8 --set checkpoint.every_steps=2 --set optim.global_batch=64 \
       --set optim.micro_batch=16 2>&1) || fail "the run with a short signal lead failed: $late"
[ "$(grep -c "the job's signal comes 1e-06 s before its end" <<<"$late")" = 1 ] ||
  fail "expected one signal-lead warning: $late"
grep -Eq "Ask for at least --signal=B:USR1@[0-9]+" <<<"$late" || fail "the warning does not name the lead needed"

# The ETA counts the saves still ahead, each blocking as long as this run's have (here 2 s, rank
# 0's writes stalled), the final one as long as the last, and times the steps without them: at
# step 6 the saves at 8 and 12 (the final), 4 s, where the window's 2 s save spread over its 2
# steps said 6; at step 8 its own save and the final one, where the window without a save said 0.
# shellcheck source=tests/eta_text.sh
source "$(dirname "$0")/../eta_text.sh"  # seconds_of
eta_of() { seconds_of "$(sed -nE "s/.*step $1\/12 .*ETA ([0-9hms]+)$/\1/p" <<<"$saving")"; }
saving=$(TRIDENT_TEST_SLOW_SAVE=0:2000 "$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 \
         --set run.name=smoke_saving --set run.max_steps=12 --set run.log_every=2 --set checkpoint.every_steps=4 \
         --set checkpoint.async=false --set optim.global_batch=64 --set optim.micro_batch=16 2>&1) ||
  fail "the run with slow saves failed: $saving"
for step in 6 8; do
  eta=$(eta_of $step)
  [ "$eta" -ge 4 ] && [ "$eta" -le 5 ] || fail "step $step's ETA is $eta s, not the 4-5 s of the two saves ahead: $saving"
done
# A run that will not finish in its job (TRIDENT_JOB_END_TIME, which the job scripts take from
# squeue: here a minute away, where 100000 steps take several) is told so once, from the second
# progress line on, with the step its stop signal will save; one without a job end is not. (The
# run ends by an injected fault at step 30.)
grep -q "will not finish in this job" <<<"$out" && fail "a run without a job end was told it will not finish: $out"
long=$(TRIDENT_JOB_END_TIME=$(($(date +%s) + 60)) TRIDENT_SIGNAL_LEAD_S=5 TRIDENT_TEST_FAULT=0:30 "$mpiexec" -n "$np" \
       "$trident" train /dev/null --set data.path=data/syn.h5 --set run.name=smoke_long --set run.max_steps=100000 \
       --set run.log_every=10 --set optim.global_batch=64 --set optim.micro_batch=16 2>&1) &&
  fail "the run with a fault at step 30 exited 0: $long"
[ "$(grep -c "will not finish in this job" <<<"$long")" = 1 ] || fail "expected one line saying the run will not finish: $long"
grep -Eq "^\[trident 0\] warning: this run will not finish in this job: its ETA, [0-9hms]+, goes past the job's stop signal, which comes in 0m[0-5][0-9]s \(TRIDENT_JOB_END_TIME less TRIDENT_SIGNAL_LEAD_S 5 s\), at about step [0-9]+ of 100000\..* ask for about [0-9hms]+ more \(sbatch --time\)" \
  <<<"$(grep -A1 "step 20/100000" <<<"$long" | tail -1)" || fail "no such line after the second progress line: $long"
# The same run slowed after step 30 by 50 ms a step (TRIDENT_TEST_SLOW_STEPS; a step here takes a few
# ms) falls further behind: what it needs past the stop signal more than doubles. It is told again,
# at the second line in a row so far behind (step 50, not 40: one slow window is not enough), with
# the time it was told at step 20 and the time it needs now; and only then.
slowed=$(TRIDENT_TEST_SLOW_STEPS=30:50 TRIDENT_JOB_END_TIME=$(($(date +%s) + 60)) TRIDENT_SIGNAL_LEAD_S=5 \
         TRIDENT_TEST_FAULT=0:60 "$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 \
         --set run.name=smoke_slowed --set run.max_steps=100000 --set run.log_every=10 --set optim.global_batch=64 \
         --set optim.micro_batch=16 2>&1) && fail "the slowed run with a fault at step 60 exited 0: $slowed"
[ "$(grep -c "will not finish in this job" <<<"$slowed")" = 2 ] || fail "expected two lines saying the run will not finish: $slowed"
first=$(grep -A1 "step 20/100000" <<<"$slowed" | tail -1) again=$(grep -A1 "step 50/100000" <<<"$slowed" | tail -1)
[[ $first =~ ask\ for\ about\ ([0-9hms]+)\ more ]] || fail "no warning after step 20: $slowed"
told=${BASH_REMATCH[1]}
pattern="^\[trident 0\] warning: this run has fallen further behind since step 20 \(past the stop signal it needed $told then, ([0-9hms]+) now\); this run will not finish in this job: .*at about step [0-9]+ of 100000\..* ask for about \1 more \(sbatch --time\)$"
[[ $again =~ $pattern ]] || fail "no line after step 50 saying the run fell further behind since step 20: $slowed"
[ "$(seconds_of "${BASH_REMATCH[1]}")" -ge $((2 * $(seconds_of "$told"))) ] ||
  fail "told again with ${BASH_REMATCH[1]}, not twice the $told told at step 20: $again"
echo "fallen behind: told $told at step 20, ${BASH_REMATCH[1]} at step 50"
# The same run as link 1 of 3 of a restart chain (jobs/restart_chain.sh passes TRIDENT_CHAIN_LINK,
# TRIDENT_CHAIN_LINKS; the job scripts TRIDENT_JOB_TIME_LIMIT_S from squeue). Each later link trains
# its 65 s less the 5 s lead and this run's start-up (goodput.jsonl's startup_s), about 60 s: two
# are far short of the rest, and the warning names the links missing, ceil(rest / per link) - 2.
# With 100000 s links, the next link finishes it: one line, not a warning.
chain_run() {  # NAME TIME_LIMIT_S [LINK]
  TRIDENT_CHAIN_LINK=${3:-1} TRIDENT_CHAIN_LINKS=3 TRIDENT_JOB_TIME_LIMIT_S=$2 TRIDENT_JOB_END_TIME=$(($(date +%s) + 60)) \
    TRIDENT_SIGNAL_LEAD_S=5 TRIDENT_TEST_FAULT=0:30 "$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 \
    --set run.name="$1" --set run.max_steps=100000 --set run.log_every=10 --set optim.global_batch=64 \
    --set optim.micro_batch=16 2>&1
}
# links_missing_ok PER REST MISSING AFTER: MISSING is ceil(REST / PER) less the AFTER links to come
# (PER and REST are printed to the second: within that of a whole number of links, the count may
# round either way).
links_missing_ok() {
  python3 -c "import math, sys; per, rest, m, after = map(int, sys.argv[1:]); n = rest / per
assert m >= 1 and (m == math.ceil(n) - after or abs(n - round(n)) * per < 2 and abs(m - (round(n) - after)) <= 1)" "$@"
}
short=$(chain_run smoke_chain_short 65) && fail "the chain's run with a fault at step 30 exited 0: $short"
line=$(grep -A1 "step 20/100000" <<<"$short" | tail -1)
grep -q "will not finish in this job" <<<"$short" && fail "a chain's link was told to finish in its job: $short"
[ "$(grep -c "this restart chain will not finish the run" <<<"$short")" = 1 ] || fail "expected one chain warning: $short"
pattern="^\[trident 0\] warning: this restart chain will not finish the run: its ETA, [0-9hms]+, goes past this job's stop signal, which comes in 0m[0-5][0-9]s .*, and its 2 link\(s\) after this one train about ([0-9hms]+) each \(the job's --time 1m05s less its start-up [0-9hms]+ and the signal's lead 5 s\), [0-9hms]+ in all, for the ([0-9hms]+) the run needs after this job\. About ([0-9]+) more link\(s\) are needed: .*jobs/restart_chain.sh -n \3 "
[[ $line =~ $pattern ]] || fail "no chain warning after the second progress line: $short"
per=$(seconds_of "${BASH_REMATCH[1]}") rest=$(seconds_of "${BASH_REMATCH[2]}") missing=${BASH_REMATCH[3]}
startup=$(grep -o '"startup_s":[0-9.e-]*' runs/smoke_chain_short/goodput.jsonl | tail -1 | cut -d: -f2)
python3 -c "import sys; assert abs(int(sys.argv[1]) - (65 - 5 - float(sys.argv[2]))) <= 1" "$per" "$startup" ||
  fail "a link trains ${per} s, not 65 - 5 - its start-up $startup s: $line"
links_missing_ok "$per" "$rest" "$missing" 2 || fail "the chain warning's count, $missing, is not ceil($rest / $per) - 2: $line"
echo "a chain 2 links short: ${per} s a link, ${rest} s to go, $missing more link(s) named"
# The chain's last link, as short: the links missing are all the rest takes.
last=$(chain_run smoke_chain_last 65 3) && fail "the chain's run with a fault at step 30 exited 0: $last"
pattern="^\[trident 0\] warning: this restart chain will not finish the run: .*, and this is its last link; a link trains about ([0-9hms]+) \(the job's --time 1m05s .*\), and the run needs ([0-9hms]+) after this job\. About ([0-9]+) more link\(s\) are needed: .*jobs/restart_chain.sh -n \3 "
[[ $(grep -A1 "step 20/100000" <<<"$last" | tail -1) =~ $pattern ]] || fail "no last-link warning after the second progress line: $last"
per=$(seconds_of "${BASH_REMATCH[1]}") rest=$(seconds_of "${BASH_REMATCH[2]}") missing=${BASH_REMATCH[3]}
links_missing_ok "$per" "$rest" "$missing" 0 || fail "the last link's count, $missing, is not ceil($rest / $per)"
enough=$(chain_run smoke_chain_enough 100000) && fail "the chain's run with a fault at step 30 exited 0: $enough"
grep -q "warning" <<<"$enough" && fail "a chain that finishes the run was warned: $enough"
grep -A1 "step 20/100000" <<<"$enough" | tail -1 | grep -Eq "^\[trident 0\] link 1 of 3 of a restart chain: its ETA, .*at this rate link 2 finishes the run \(each link trains about 27h4[56]m: the job's --time 27h46m less .*\) and cancels the links left$" \
  || fail "no line saying which link finishes the run: $enough"

# A requeued job whose run had already finished: exit 0, and report.json, metrics.jsonl,
# evaluations.jsonl and the checkpoints stay exactly as the finished run left them.
before=$(md5sum runs/smoke/report.json runs/smoke/metrics.jsonl runs/smoke/evaluations.jsonl runs/smoke/checkpoints/*)
again=$("$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 --set run.name=smoke         --set run.max_steps=12 --set run.log_every=4 --set optim.global_batch=64 --set optim.micro_batch=16 2>&1) ||
  fail "resuming a finished run exited $?: $again"
grep -q "nothing to train: .*step_0000012.h5 is at step 12 of 12; report.json, metrics.jsonl and evaluations.jsonl left as they are" \
  <<<"$again" || fail "no 'nothing to train' line: $again"
[ "$(md5sum runs/smoke/report.json runs/smoke/metrics.jsonl runs/smoke/evaluations.jsonl runs/smoke/checkpoints/*)" = "$before" ] ||
  fail "resuming a finished run changed its files"
# Its last checkpoint resumed into another folder: exit 0 with its test figures, and no report.json,
# metrics.jsonl or evaluations.jsonl there, where a scaling study would read a zero-step run (an empty
# metrics.jsonl was left there, and a line saying report.json was "left as it is").
other=$("$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 --set run.name=smoke_other \
        --set run.max_steps=12 --set optim.global_batch=64 --set optim.micro_batch=16 \
        --resume runs/smoke/checkpoints/step_0000012.h5 2>&1) || fail "a finished checkpoint in another folder: $other"
grep -q "nothing to train: .* nothing written to report.json, metrics.jsonl or evaluations.jsonl in runs/smoke_other .* test accuracy" \
  <<<"$other" || fail "no line saying what the other folder gets: $other"
[ ! -e runs/smoke_other/report.json ] && [ ! -e runs/smoke_other/metrics.jsonl ] && [ ! -e runs/smoke_other/evaluations.jsonl ] ||
  fail "the other folder got a report.json, metrics.jsonl or evaluations.jsonl: $(ls runs/smoke_other)"
# The finished run's own folder without its report.json (killed after its last save): said so,
# not "raise run.max_steps", and metrics.jsonl and evaluations.jsonl kept.
rm runs/smoke/report.json
metrics=$(md5sum runs/smoke/metrics.jsonl runs/smoke/evaluations.jsonl)
unreported=$("$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 --set run.name=smoke \
             --set run.max_steps=12 --set optim.global_batch=64 --set optim.micro_batch=16 2>&1) ||
  fail "a finished run without its report.json: $unreported"
grep -q "nothing to train: .* metrics.jsonl and evaluations.jsonl left as they are; runs/smoke has no report.json: the run ended before writing it" \
  <<<"$unreported" || fail "no line saying the report is missing: $unreported"
[ "$(md5sum runs/smoke/metrics.jsonl runs/smoke/evaluations.jsonl)" = "$metrics" ] || fail "metrics.jsonl or evaluations.jsonl changed"
# A finished run extended (run.max_steps raised) that ends before its own end (here a fault at
# step 14): its folder no longer holds the earlier end's report.json, which trident report took
# for this run's; that one is kept as report.previous.json.
"$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 --set run.name=smoke_extended \
  --set run.max_steps=12 --set optim.global_batch=64 --set optim.micro_batch=16 >/dev/null 2>&1 || fail "smoke_extended failed"
cp runs/smoke_extended/report.json finished_report.json
set +e
extended=$(TRIDENT_TEST_FAULT=0:14 "$mpiexec" -n "$np" "$trident" train /dev/null --set data.path=data/syn.h5 \
           --set run.name=smoke_extended --set run.max_steps=16 --set optim.global_batch=64 --set optim.micro_batch=16 2>&1)
rc=$?
set -e
[ "$rc" = 1 ] || fail "the extended run: exit $rc, expected 1 (the injected fault): $extended"
grep -q "runs/smoke_extended/report.json (the run as it ended before) moved to report.previous.json" <<<"$extended" ||
  fail "no line saying where report.json went: $extended"
[ ! -e runs/smoke_extended/report.json ] || fail "the earlier end's report.json is still there"
cmp -s finished_report.json runs/smoke_extended/report.previous.json || fail "report.previous.json is not the earlier report.json"
# Rank 0's own fault: its goodput record has exit code 1 and its figures at the fault (step 14),
# not those of its last update (step 12, where it started).
record=$(tail -1 runs/smoke_extended/goodput.jsonl)
grep -q '"exit_code":1[,}]' <<<"$record" && grep -q '"last_step":14[,}]' <<<"$record" ||
  fail "the faulted lifetime's goodput record: $record"
echo PASS
