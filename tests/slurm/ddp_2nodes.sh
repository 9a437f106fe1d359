#!/usr/bin/env bash
# ddp_2nodes.sh STATE SOURCE_DIR TRIDENT BUILD_DIR: `sbatch jobs/ddp_2nodes.slurm DECK --set ...`
# with the script's own #SBATCH defaults (2 nodes x 2 tasks), trident found the way a user's job
# finds it: `module load trident` from an installed prefix (nothing of the build on PATH). The
# job completes, and its report.json says 4 ranks on 2 nodes.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" ddp_2nodes
build=$4
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install failed"

# shellcheck disable=SC2046
id=$(env -u TRIDENT -u TRIDENT_HOME PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
       MODULEPATH="$prefix/share/modulefiles" \
       sbatch --parsable --output="$work/ddp-%j.out" "$src/jobs/ddp_2nodes.slurm" $(tiny_args 40) \
       --set run.output_dir="$work/run")
echo "submitted job $id"
expect_completed "$id" 120 "the 2-node DDP job"
out=$work/ddp-$id.out
grep -q "  $prefix/bin/trident train" "$out" || { show_job "$id"; fail "the job did not run the module's trident"; }
report=$work/run/report.json
[ -f "$report" ] || fail "no $report"
nodes=$(json_int "$report" nodes) world=$(json_int "$report" world)
echo "report.json: layout.world = $world, layout.nodes = $nodes ($(field "$id" NodeList)) after $(elapsed)"
[ "$nodes" = 2 ] || fail "layout.nodes = $nodes, expected 2"
[ "$world" = 4 ] || fail "layout.world = $world, expected 4 (2 nodes x 2 tasks)"
grep -q "world 4 on 2 node(s) \[node1,node2\]" "$out" || fail "trident did not see node1 and node2"
echo PASS
