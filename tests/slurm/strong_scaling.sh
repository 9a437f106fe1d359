#!/usr/bin/env bash
# strong_scaling.sh STATE SOURCE_DIR TRIDENT: jobs/strong_scaling.sh at 1, 2 and 4 ranks (2 per
# node) into one study folder, then its dependent `trident report` job: report.md with a row per
# rank count (the 1-rank run the baseline), report.csv with 3 runs, report.svg. A study sbatch
# refuses part of is cancelled whole.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" strong_scaling
export TRIDENT=$trident
# --serial: one run at a time (this machine's 2 cores serve both "nodes").
# shellcheck disable=SC2046
mapfile -t out < <("$src/jobs/strong_scaling.sh" --ranks 1,2,4 --tasks-per-node 2 --serial --study "$work/study" \
                     -- $(tiny_args 40))
[ ${#out[@]} = 5 ] || fail "strong_scaling.sh printed ${#out[@]} lines, expected the study folder and 4 job ids: ${out[*]}"
study=${out[0]} report_job=${out[4]}
echo "study $study: runs ${out[*]:1:3}, report job $report_job"
for id in "${out[@]:1:3}"; do expect_completed "$id" 120 "run job $id"; done
expect_completed "$report_job" 60 "the report job"
for f in report.md report.csv report.svg; do [ -s "$study/report/$f" ] || fail "no $study/report/$f"; done
md=$study/report/report.md
rows=$(grep -cE '^\| [0-9]+ \| [0-9]+ \| dp ' "$md")
[ "$rows" = 3 ] || { cat "$md"; fail "the table has $rows rows, expected 3"; }
grep -qE '^\| 1 \| 1 \| dp 1 × pp 1, zero 0 \| 64 \| .* \| 1\.00 \(baseline\) \|' "$md" || { cat "$md"; fail "the 1-rank run is not the baseline"; }
grep -qE '^\| 4 \| 2 \| dp 4 × pp 1' "$md" || { cat "$md"; fail "no 4-rank row on 2 nodes"; }
[ "$(wc -l <"$study/report/report.csv")" = 4 ] || fail "report.csv does not hold a header and 3 runs"
grep -q '<polyline' "$study/report/report.svg" || fail "report.svg has no curves"
sed -n '/^| ranks | nodes/,/^$/p' "$md"

# A rank count the cluster cannot hold (64 ranks, 2 per node: 32 nodes of its 2): sbatch refuses
# that run; the one already queued (held here, so that it cannot start) is cancelled, and no
# report job is submitted: no half study.
# shellcheck disable=SC2046
if "$src/jobs/strong_scaling.sh" --ranks 1,64 --tasks-per-node 2 --hold --study "$work/too_big" -- $(tiny_args 40) \
     >too_big.txt 2>&1; then
  cat too_big.txt; fail "a study of 64 ranks on a 2-node cluster was submitted"
fi
grep -q "sbatch failed; cancelling the 1 job(s) already submitted" too_big.txt || { cat too_big.txt; fail "no message about the cancelled job"; }
left=$(squeue -h -t PENDING,RUNNING -o %j | grep -c "^trident-strong" || true)
[ "$left" = 0 ] || { squeue; fail "$left job(s) of the refused study are still queued"; }
echo "after $(elapsed)"
echo PASS
