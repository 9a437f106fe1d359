#!/bin/bash
# A scaling study: one job per rank count, every run's report.json in one study folder, then a
# dependent job that runs `trident report` on the folder. Called by strong_scaling.sh and
# weak_scaling.sh (the same options; see there); --kind strong|weak picks the batch rule:
#   strong: the deck's optim.global_batch for every rank count (the same work split more ways);
#   weak:   optim.global_batch = per-rank batch x ranks, optim.micro_batch = per-rank batch
#           (the same work per rank).
#
# Usage: scaling_study.sh --kind strong|weak [--ranks 1,2,4,8] [--tasks-per-node T]
#          [--study DIR] [--per-rank-batch B] [--serial] [-j JOBSCRIPT] [SBATCH_OPTION ...]
#          -- DECK [--set section.key=value ...]
#   --ranks           rank counts, comma-separated (default 1,2,4,8)
#   --tasks-per-node  ranks per node (default 2); a run of R ranks gets ceil(R / T) nodes
#   --study           the study folder (default studies/<kind>-<date>-<time>); runs land in
#                     DIR/runs/ranks_<R>/, job logs in DIR/logs/, the report in DIR/report/
#   --per-rank-batch  weak scaling: samples per rank per step (default 64)
#   --serial          each run waits for the previous one (afterany): no two runs share a node's
#                     cores or the file system at the same time, also where --exclusive cannot help
#   -j JOBSCRIPT      the job script of each run (default ddp_2nodes.slurm next to this script)
#   other options before `--` go to every sbatch (e.g. --time=00:20:00 --partition=short);
#   everything after `--` goes to `trident train`.
# Every run is submitted with --exclusive (whole nodes: timings not shared with other jobs).
# Prints the study folder, then the job ids (runs first, the report job last).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kind="" ranks=1,2,4,8 tpn=2 study="" per_rank=64 per_rank_given=0 serial=0 script=$here/ddp_2nodes.slurm
sbatch_args=()
# The name the user typed (strong_scaling.sh, weak_scaling.sh exec this script).
me=${TRIDENT_STUDY_SCRIPT:-$(basename "$0")}
# The comment block at the top of a script, without its '#'.
header() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"; }
usage() {
  local kind_option="--kind strong|weak " batch_option=""
  case $me in strong_scaling.sh) kind_option="" ;; weak_scaling.sh) kind_option="" batch_option="[--per-rank-batch B] " ;; esac
  echo "usage: $me $kind_option[--ranks 1,2,4,8] [--tasks-per-node T] [--study DIR] $batch_option[--serial] [-j JOBSCRIPT] [SBATCH_OPTION ...] -- DECK [--set ...]" >&2
  local deck=inputs/fashion_mnist_ddp.ini
  [ -n "${TRIDENT_HOME:-}" ] && deck=$TRIDENT_HOME/share/trident/$deck
  echo "e.g.:  $me --ranks 1,2,4 --time=00:20:00 -- $deck --set run.max_steps=200   ($me --help: every option)" >&2
  exit 2
}
# An option that takes a value must have one (not the end of the line).
needs_value() { [ "$2" -ge 2 ] || { echo "$me: $1 wants a value" >&2; usage; }; }
while [ $# -gt 0 ]; do
  case $1 in
    --kind) needs_value "$1" $#
            # strong_scaling.sh / weak_scaling.sh pass their own --kind first.
            [ -z "$kind" ] || [ "$kind" = "$2" ] || { echo "$me: the kind is $kind here (jobs/${2}_scaling.sh runs $2 studies)" >&2; exit 2; }
            kind=$2; shift 2 ;;
    --ranks) needs_value "$1" $#; ranks=$2; shift 2 ;;
    --tasks-per-node) needs_value "$1" $#; tpn=$2; shift 2 ;;
    --study) needs_value "$1" $#; study=$2; shift 2 ;;
    --per-rank-batch) needs_value "$1" $#; per_rank=$2; per_rank_given=1; shift 2 ;;
    --serial) serial=1; shift ;;
    -j) needs_value "$1" $#; script=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help)  # the header of the script the user ran, then this one's options
      [ -n "${TRIDENT_STUDY_CALLER:-}" ] && { header "$TRIDENT_STUDY_CALLER"; echo; }
      header "$0"
      exit 0 ;;
    *) sbatch_args+=("$1"); shift ;;
  esac
done
case $kind in strong|weak) ;; *) echo "$me: --kind strong|weak" >&2; usage ;; esac
[ $# -gt 0 ] || usage
deck=$1
shift
[ -r "$deck" ] || { echo "$me: cannot read the deck $deck" >&2; exit 2; }
[[ $tpn =~ ^[1-9][0-9]*$ ]] || { echo "$me: --tasks-per-node wants a positive count" >&2; exit 2; }
[[ $per_rank =~ ^[1-9][0-9]*$ ]] || { echo "$me: --per-rank-batch wants a positive count" >&2; exit 2; }
# A strong study keeps the deck's global batch: a per-rank batch given to it would be ignored.
[ "$kind" = weak ] || [ "$per_rank_given" = 0 ] ||
  { echo "$me: --per-rank-batch is for weak scaling (a strong study keeps the deck's optim.global_batch)" >&2; exit 2; }
IFS=, read -r -a rank_list <<<"$ranks"
[ ${#rank_list[@]} -gt 0 ] || { echo "$me: --ranks wants at least one rank count (e.g. --ranks 1,2,4)" >&2; exit 2; }
seen=,
for r in "${rank_list[@]}"; do
  [[ $r =~ ^[1-9][0-9]*$ ]] || { echo "$me: --ranks wants positive counts, got '$r'" >&2; exit 2; }
  # Two jobs of one rank count would share one run folder: the second refused, or resuming the first.
  [[ $seen != *,$r,* ]] || { echo "$me: --ranks lists $r twice" >&2; exit 2; }
  seen=$seen$r,
done
# -j: a path, or the name of a job script next to this one (-j hybrid.slurm).
for dir in "$here" ${TRIDENT_HOME:+"$TRIDENT_HOME/share/trident/jobs"}; do  # next to it, or the installed ones
  [ -r "$script" ] || [ ! -r "$dir/$(basename "$script")" ] || script=$dir/$(basename "$script")
done
[ -r "$script" ] || { echo "$me: no job script $script (next to this script, or in \$TRIDENT_HOME/share/trident/jobs)" >&2; exit 2; }
# Weak scaling sets the batches itself: an override after `--` would come last and win, silently
# making every run the same work (a strong study reported as weak).
if [ "$kind" = weak ]; then
  for arg in "$@"; do
    case $arg in
      optim.global_batch=*|optim.micro_batch=*|--set=optim.global_batch=*|--set=optim.micro_batch=*)
        echo "$me: weak scaling sets optim.global_batch (--per-rank-batch x ranks) and optim.micro_batch itself;" \
             "drop '$arg' (--per-rank-batch B chooses the work per rank)" >&2
        exit 2 ;;
    esac
  done
fi

# trident for the report job: $TRIDENT, the module, PATH, $TRIDENT_HOME/bin (as the job scripts).
if [ -z "${TRIDENT:-}" ]; then
  module_said=${TMPDIR:-/tmp}/trident-module-load.$$
  if type module >/dev/null 2>&1; then set +u; module load trident >/dev/null 2>"$module_said" || true; set -u; fi
  TRIDENT=$(command -v trident || true)
  [ -z "$TRIDENT" ] && [ -x "${TRIDENT_HOME:-/nonexistent}/bin/trident" ] && TRIDENT=$TRIDENT_HOME/bin/trident
  [ -n "$TRIDENT" ] || [ ! -s "$module_said" ] || { echo "module load trident said:"; cat "$module_said"; } >&2
  rm -f "$module_said"
fi
[ -n "$TRIDENT" ] && [ -x "$TRIDENT" ] || { echo "trident not found: module load trident, put it on PATH, or set TRIDENT_HOME" >&2; exit 2; }
TRIDENT=$(realpath "$TRIDENT")
export TRIDENT

study=$(realpath -m "${study:-studies/$kind-$(date +%Y%m%d-%H%M%S)}")
# Every run's folder checked before anything is written or the first job submitted: none is left
# queued by a refusal.
for r in "${rank_list[@]}"; do
  run=$study/runs/ranks_$r
  # (report.previous.json: a finished run that trained again there, moved aside by trident)
  [ ! -e "$run/report.json" ] && [ ! -e "$run/report.previous.json" ] ||
    { echo "$me: $run already holds a finished run; use another --study" >&2; exit 2; }
done
for folder in "$study" "$study/runs" "$study/logs"; do
  [ ! -e "$folder" ] || [ -d "$folder" ] || { echo "$me: --study: $folder is not a folder" >&2; exit 2; }
done
mkdir -p "$study/runs" "$study/logs" 2>/dev/null ||
  { echo "$me: --study: cannot make $study/runs and $study/logs (a folder above is not writable, or is a file)" >&2; exit 2; }
echo "$study"

ids=() previous=
# A submission that fails (a bad SBATCH_OPTION, the queue's limits) cancels the jobs already
# submitted: no half study runs without its report.
submit_failed() {
  echo "$me: sbatch failed; cancelling the ${#ids[@]} job(s) already submitted for this study" >&2
  [ ${#ids[@]} -eq 0 ] || scancel "${ids[@]}"
  exit 1
}
for r in "${rank_list[@]}"; do
  run=$study/runs/ranks_$r
  per_node=$((r < tpn ? r : tpn))
  nodes=$(((r + tpn - 1) / tpn))
  batch=()
  [ "$kind" = weak ] && batch=(--set "optim.global_batch=$((per_rank * r))" --set "optim.micro_batch=$per_rank")
  dependency=()  # ${a[@]+"${a[@]}"} below: may be empty, which bash before 4.4 calls unbound (set -u)
  [ "$serial" = 1 ] && [ -n "$previous" ] && dependency=(--dependency="afterany:$previous")
  id=$(sbatch --parsable --job-name="trident-$kind-r$r" --nodes="$nodes" --ntasks="$r" --ntasks-per-node="$per_node" \
              --exclusive --output="$study/logs/ranks_$r-%j.out" ${dependency[@]+"${dependency[@]}"} ${sbatch_args[@]+"${sbatch_args[@]}"} \
              "$script" "$deck" ${batch[@]+"${batch[@]}"} "$@" --set "run.name=${kind}_ranks_$r" --set "run.output_dir=$run") \
    || submit_failed
  id=${id%%;*}
  ids+=("$id")
  previous=$id
  echo "$id"
done

# The report, once every run has ended however it ended (afterany: a failed run is missing from
# the table, it does not keep the report pending forever).
deps=$(IFS=:; echo "${ids[*]}")
report_cmd=$(printf '%q ' "$TRIDENT" report "$study/runs" --out "$study/report" --kind "$kind")
id=$(sbatch --parsable --job-name="trident-$kind-report" --nodes=1 --ntasks=1 --dependency="afterany:$deps" \
            --output="$study/logs/report-%j.out" ${sbatch_args[@]+"${sbatch_args[@]}"} --wrap "$report_cmd") || submit_failed
echo "${id%%;*}"
