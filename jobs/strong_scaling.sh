#!/bin/bash
# Strong scaling: the same global batch (the deck's optim.global_batch) at every rank count, one
# job per count into one study folder, then a job that runs `trident report --kind strong`
# (against the smallest run, N0 ranks, step time T0: speedup T0/TN, efficiency T0*N0/(N*TN)).
#
# Usage: jobs/strong_scaling.sh [--ranks 1,2,4,8] [--tasks-per-node T] [--study DIR] [--serial]
#          [-j JOBSCRIPT] [SBATCH_OPTION ...] -- DECK [--set section.key=value ...]
# Example: jobs/strong_scaling.sh --ranks 1,2,4,8,16 --tasks-per-node 16 --time=00:20:00 \
#            -- inputs/fashion_mnist_ddp.ini --set run.max_steps=200
# Options: see jobs/scaling_study.sh. Prints the study folder and the job ids; the table is
# STUDY/report/report.md (also report.csv, report.svg) when the last job has run.

# scaling_study.sh next to this script, or the installed one (this script copied alone).
study=$(dirname "$0")/scaling_study.sh
[ -r "$study" ] || study=${TRIDENT_HOME:-/nonexistent}/share/trident/jobs/scaling_study.sh
[ -r "$study" ] || { echo "$(basename "$0"): cannot find scaling_study.sh next to it, nor in \$TRIDENT_HOME/share/trident/jobs (module load trident)" >&2; exit 2; }
TRIDENT_STUDY_SCRIPT=$(basename "$0") TRIDENT_STUDY_CALLER=$0 exec bash "$study" --kind strong "$@"
