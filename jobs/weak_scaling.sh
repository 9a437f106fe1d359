#!/bin/bash
# Weak scaling: the same work per rank at every rank count (optim.global_batch = B x ranks,
# optim.micro_batch = B, B from --per-rank-batch, default 64), one job per count into one study
# folder, then a job that runs `trident report --kind weak` (efficiency T0/TN against the smallest
# run, step time T0: the step time
# should stay flat).
#
# Usage: jobs/weak_scaling.sh [--ranks 1,2,4,8] [--tasks-per-node T] [--per-rank-batch B]
#          [--study DIR] [--serial] [-j JOBSCRIPT] [SBATCH_OPTION ...] -- DECK [--set ...]
# Options: see jobs/scaling_study.sh. Prints the study folder and the job ids; the table is
# STUDY/report/report.md (also report.csv, report.svg) when the last job has run.

# scaling_study.sh next to this script, or the installed one (this script copied alone).
study=$(dirname "$0")/scaling_study.sh
[ -r "$study" ] || study=${TRIDENT_HOME:-/nonexistent}/share/trident/jobs/scaling_study.sh
[ -r "$study" ] || { echo "$(basename "$0"): cannot find scaling_study.sh next to it, nor in \$TRIDENT_HOME/share/trident/jobs (module load trident)" >&2; exit 2; }
TRIDENT_STUDY_SCRIPT=$(basename "$0") TRIDENT_STUDY_CALLER=$0 exec bash "$study" --kind weak "$@"
