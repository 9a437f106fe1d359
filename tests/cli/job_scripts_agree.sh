#!/usr/bin/env bash
# job_scripts_agree.sh JOBS_DIR
# ddp_2nodes.slurm and hybrid.slurm each hold the whole job logic (sbatch copies a job script
# alone into Slurm's spool, so neither can source a shared file next to it): finding trident,
# the signal traps, resume, the launch and what each exit code means for the job. They differ
# only in the deck and the plan. This test fails when a fix lands in one of them and not in the
# other: the sections below must be the same line for line (blank lines aside).
set -u
jobs=$1
fail() { echo "FAIL: $*"; exit 1; }
# section FILE FIRST LAST: the lines from the one matching FIRST to the one before LAST (or to
# the end), with the script's own name and blank lines left out.
section() {
  awk -v first="$2" -v last="$3" -v self="$(basename "$1")" '
    $0 ~ first { on = 1 } on && last != "" && $0 ~ last { exit }
    on && NF { gsub(self, "SCRIPT"); print }' "$1"
}
compared=0
while IFS='|' read -r name first last; do
  a=$(section "$jobs/ddp_2nodes.slurm" "$first" "$last")
  b=$(section "$jobs/hybrid.slurm" "$first" "$last")
  [ -n "$a" ] || fail "no section '$name' in ddp_2nodes.slurm (from /$first/)"
  [ -n "$b" ] || fail "no section '$name' in hybrid.slurm (from /$first/)"
  if [ "$a" != "$b" ]; then
    diff <(printf '%s\n' "$a") <(printf '%s\n' "$b") | sed 's/^/    /'
    fail "the section '$name' of ddp_2nodes.slurm (<) and hybrid.slurm (>) differ: make the same change in both"
  fi
  lines=$(wc -l <<<"$a")
  echo "same in both: $name ($lines lines)"
  compared=$((compared + lines))
done <<'SECTIONS'
--help, outside a job, the signal lead, finding trident|^set -uo pipefail$|^# The deck:
resume, launch, exit codes|^# ---- a requeued job|
SECTIONS
echo "PASS ($compared lines compared)"
