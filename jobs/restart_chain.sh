#!/bin/bash
# A training run longer than the queue's time limit, as a chain of N jobs.
#
# Usage: jobs/restart_chain.sh [-n N] [-j JOBSCRIPT] [SBATCH_OPTION ...] -- DECK [--set ...]
#   -n N          jobs in the chain (default 4)
#   -j JOBSCRIPT  the job script each link runs (default: ddp_2nodes.slurm next to this script;
#                 hybrid.slurm works too)
#   anything else before `--` goes to every sbatch (e.g. --time=04:00:00 --nodes=4);
#   everything after `--` goes to `trident train`.
#
# Job k+1 depends on job k with --dependency=afterany, so it starts when job k ends, however it
# ended, and continues from the newest checkpoint (trident's --resume auto). A link that hits its
# time limit gets SIGUSR1 a little before (--signal=B:USR1@SIGNAL_S, default 120 s; Slurm's timing
# is coarse), passes it to the ranks, which checkpoint and exit 3; the next link takes over. A
# link that is preempted or requeued by Slurm restarts itself, and the chain waits for it. The
# link that finishes the training (exit 0) cancels the rest of the chain; so does what no retry
# can fix: bad input (exit 2: a deck, a layout the plan refuses, no trident) or a diverged run
# (exit 4). All links share one job name (trident-chain-<date>-<time>-<pid>), which
# is how a link finds the rest of its chain. From its second progress line, a link that will stop
# at its limit says which later link finishes the run at its rate, or warns how many links the
# chain lacks.
#
# Prints the job ids, one per line (the first line is the first link).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
links=4
script=$here/ddp_2nodes.slurm
sbatch_args=()
usage() { echo "usage: restart_chain.sh [-n N] [-j JOBSCRIPT] [SBATCH_OPTION ...] -- DECK [--set ...]" >&2; exit 2; }
# An option that takes a value must have one (not the end of the line).
needs_value() { [ "$2" -ge 2 ] || { echo "restart_chain.sh: $1 wants a value" >&2; usage; }; }
while [ $# -gt 0 ]; do
  case $1 in
    -n) needs_value "$1" $#; links=$2; shift 2 ;;
    -j) needs_value "$1" $#; script=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --signal*) echo "restart_chain.sh: give the signal's lead as SIGNAL_S=N (the chain asks for --signal=B:USR1@N itself and tells trident)" >&2; exit 2 ;;
    *) sbatch_args+=("$1"); shift ;;
  esac
done
[ $# -gt 0 ] || usage
[[ $links =~ ^[1-9][0-9]*$ ]] || { echo "restart_chain.sh: -n wants a positive count, got '$links'" >&2; exit 2; }
# -j: a path, or the name of a job script next to this one (-j hybrid.slurm), or of the installed
# ones (this script copied alone into the user's folder).
for dir in "$here" ${TRIDENT_HOME:+"$TRIDENT_HOME/share/trident/jobs"}; do
  [ -r "$script" ] || [ ! -r "$dir/$(basename "$script")" ] || script=$dir/$(basename "$script")
done
[ -r "$script" ] || { echo "restart_chain.sh: no job script $script (next to this script, or in \$TRIDENT_HOME/share/trident/jobs)" >&2; exit 2; }
# The deck (the first argument after --, unless it is an option): every link would fail on it.
[ "${1#-}" != "$1" ] || [ -r "$1" ] || { echo "restart_chain.sh: cannot read the deck $1" >&2; exit 2; }

name=trident-chain-$(date +%Y%m%d-%H%M%S)-$$
signal_s=${SIGNAL_S:-120}
previous= submitted=()
for ((k = 1; k <= links; k++)); do
  dependency=()
  [ -n "$previous" ] && dependency=(--dependency="afterany:$previous")
  # TRIDENT_CHAIN tells the job script it is a link: a stop passes to the next link instead of
  # requeueing (unless TRIDENT_MAX_REQUEUE says otherwise), and a finished run ends the chain.
  # TRIDENT_CHAIN_LINK: a link after the first goes on with the run's own checkpoints, not a
  # --resume PATH or never given to the chain; with TRIDENT_CHAIN_LINKS, trident says early whether
  # the links left finish the run at its rate. TRIDENT_CHAIN_PREVIOUS_JOB: the link before, which
  # has ended when this one starts: a run-folder lock it still holds is a failed node's (trident
  # waits run.requeue_lock_wait_s for it instead of refusing the folder).
  # ${a[@]+"${a[@]}"}: an array that may be empty, which bash before 4.4 calls unbound (set -u).
  previous=$(sbatch --parsable --job-name="$name" --signal="B:USR1@$signal_s" --export="ALL,TRIDENT_CHAIN=1,TRIDENT_CHAIN_LINK=$k,TRIDENT_CHAIN_LINKS=$links,TRIDENT_CHAIN_PREVIOUS_JOB=$previous,TRIDENT_SIGNAL_LEAD_S=$signal_s" \
                    ${dependency[@]+"${dependency[@]}"} ${sbatch_args[@]+"${sbatch_args[@]}"} "$script" "$@") || {
    # No half chain: the links already submitted are cancelled.
    echo "restart_chain.sh: sbatch failed at link $k; cancelling the ${#submitted[@]} link(s) already submitted" >&2
    [ ${#submitted[@]} -eq 0 ] || scancel "${submitted[@]}"
    exit 1
  }
  previous=${previous%%;*}  # --parsable prints "id;cluster" on multi-cluster setups
  submitted+=("$previous")
  echo "$previous"
done
