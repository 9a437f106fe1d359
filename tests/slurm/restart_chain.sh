#!/usr/bin/env bash
# restart_chain.sh STATE SOURCE_DIR TRIDENT: jobs/restart_chain.sh -n 3. The first link is
# stopped by SIGUSR1 (as a time limit's warning signal would), checkpoints and exits 3 without
# requeueing; the second link (afterany) resumes and finishes; the third is cancelled. A chain too
# short for its run says so in its first link. Then a
# chain of hybrid.slurm jobs (-j hybrid.slurm: the name of a script next to restart_chain.sh) with a
# layout its plan refuses: the first link cancels the second; and one whose plan faults (exit 1):
# the second runs.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" restart_chain
export TRIDENT=$trident
steps=4000
# shellcheck disable=SC2046
mapfile -t ids < <("$src/jobs/restart_chain.sh" -n 3 --ntasks-per-node=1 --output="$work/chain-%j.out" \
                     -- $(tiny_args $steps) --set run.output_dir="$work/run")
[ ${#ids[@]} = 3 ] || fail "restart_chain.sh printed ${#ids[@]} job ids, expected 3"
echo "chain ${ids[*]}"
wait_for_line "$work/chain-${ids[0]}.out" "step 20/$steps" 60
scancel --signal=USR1 --batch "${ids[0]}"
s=$(wait_job "${ids[0]}" 60)
[ "$s" = FAILED ] && [ "$(field "${ids[0]}" ExitCode)" = 3:0 ] \
  || { show_job "${ids[0]}"; fail "link 1 ended $s $(field "${ids[0]}" ExitCode), expected exit 3"; }
expect_completed "${ids[1]}" 120 "link 2"
grep -q "resuming from $work/run/checkpoints/step_" "$work/chain-${ids[1]}.out" || { show_job "${ids[1]}"; fail "link 2 did not resume"; }
s=$(wait_job "${ids[2]}" 30)
[ "$s" = CANCELLED ] || { show_job "${ids[2]}"; fail "link 3 ended $s, expected CANCELLED by link 2"; }
[ -n "$(final_loss "$work/run/metrics.jsonl" $steps)" ] || fail "the chain did not reach step $steps"
echo "link 1 exit 3, link 2 resumed and finished, link 3 cancelled, after $(elapsed)"

# A chain too short for its run: 3 links of 4 minutes for 10,000,000 steps. Link 1 says so from
# its second progress line, with the links after it (2) and the time limit each has (4 minutes,
# which the job script took from squeue); then the whole chain is cancelled.
# shellcheck disable=SC2046
mapfile -t short < <("$src/jobs/restart_chain.sh" -n 3 --time=4 --ntasks-per-node=1 --output="$work/short-%j.out" \
                       -- $(tiny_args 10000000) --set run.output_dir="$work/short")
[ ${#short[@]} = 3 ] || fail "restart_chain.sh printed ${#short[@]} job ids, expected 3"
wait_for_line "$work/short-${short[0]}.out" "this restart chain will not finish the run" 120
# Each later link trains its 240 s less the 120 s lead and a start-up as long as this one's: from
# the job's start (the job script passes squeue's) through srun's launch to trident's first step.
pattern="warning: this restart chain will not finish the run: .*, and its 2 link\(s\) after this one train about ([0-9]m[0-9]{2}s) each \(the job's --time 4m00s less its start-up ([0-9]m[0-9]{2}s \(the job's launch [0-9]m[0-9]{2}s, trident's [0-9]m[0-9]{2}s\)) and the signal's lead 120 s\).*About [0-9]+ more link\(s\) are needed"
line=$(grep -E "$pattern" "$work/short-${short[0]}.out") && [[ $line =~ $pattern ]] \
  || { show_job "${short[0]}"; fail "link 1 of a short chain does not say how many links it lacks, with its launch"; }
startup_text=${BASH_REMATCH[2]}
per=$(seconds_of "${BASH_REMATCH[1]}") startup=$(seconds_of "${startup_text%% *}")
[ $((240 - 120 - startup - per)) -ge -1 ] && [ $((240 - 120 - startup - per)) -le 1 ] \
  || fail "a link trains ${per} s, not 240 - 120 - its start-up ${startup} s: $line"
scancel "${short[@]}"
for link in 0 1 2; do
  s=$(wait_job "${short[link]}" 60)
  [ "$s" = CANCELLED ] || { show_job "${short[link]}"; fail "the short chain's link $((link + 1)) ended $s after scancel, expected CANCELLED"; }
done
echo "a chain too short: link 1 said how many links it lacks (a link trains ${per} s: 240 - lead 120 - start-up $startup_text); cancelled ($(elapsed))"

# A layout the allocation cannot hold (3 pipeline stages on 2 ranks): hybrid.slurm's plan refuses
# it (exit 2) before any rank starts, and the rest of the chain is cancelled then, not started
# link after link to fail the same way.
# shellcheck disable=SC2046
mapfile -t bad < <("$src/jobs/restart_chain.sh" -n 2 -j hybrid.slurm --ntasks-per-node=1 \
                     --output="$work/bad-%j.out" -- $(tiny_args 40) --set parallel.pp=3 --set run.output_dir="$work/bad")
[ ${#bad[@]} = 2 ] || fail "restart_chain.sh printed ${#bad[@]} job ids, expected 2"
s=$(wait_job "${bad[0]}" 60)
[ "$s" = FAILED ] && [ "$(field "${bad[0]}" ExitCode)" = 2:0 ] \
  || { show_job "${bad[0]}"; fail "the bad layout's link 1 ended $s $(field "${bad[0]}" ExitCode), expected exit 2"; }
s=$(wait_job "${bad[1]}" 30)
[ "$s" = CANCELLED ] || { show_job "${bad[1]}"; cat "$work/bad-${bad[0]}.out"; fail "link 2 after a bad layout ended $s, expected CANCELLED"; }
echo "a bad layout: link 1 exit 2 (plan), link 2 cancelled"

# A fault in the plan (exit 1: here a trident whose plan fails so) is not bad input: the next link
# tries again, as after a fault in training (every plan failure cancelled the chain).
cat >"$work/plan_fault.sh" <<EOF
#!/bin/sh
[ "\$1" = plan ] && { echo "plan_fault.sh: a fault in the plan" >&2; exit 1; }
exec "$trident" "\$@"
EOF
chmod +x "$work/plan_fault.sh"
# shellcheck disable=SC2046
mapfile -t faulty < <(TRIDENT=$work/plan_fault.sh "$src/jobs/restart_chain.sh" -n 2 -j hybrid.slurm --ntasks-per-node=1 \
                        --output="$work/faulty-%j.out" -- $(tiny_args 40) --set run.output_dir="$work/faulty")
[ ${#faulty[@]} = 2 ] || fail "restart_chain.sh printed ${#faulty[@]} job ids, expected 2"
for link in 0 1; do
  s=$(wait_job "${faulty[link]}" 60)
  [ "$s" = FAILED ] && [ "$(field "${faulty[link]}" ExitCode)" = 1:0 ] \
    || { show_job "${faulty[link]}"; fail "a plan's fault: link $((link + 1)) ended $s $(field "${faulty[link]}" ExitCode), expected exit 1"; }
done
echo "a plan's fault: link 1 exit 1, link 2 ran (exit 1 too)"
echo PASS
