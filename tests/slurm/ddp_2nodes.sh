#!/usr/bin/env bash
# ddp_2nodes.sh STATE SOURCE_DIR TRIDENT BUILD_DIR: `sbatch jobs/ddp_2nodes.slurm` exactly as a
# user submits it -- no arguments, the script's own #SBATCH layout (2 nodes x 2 tasks) and its
# default deck (the installation's fashion_mnist_ddp.ini: Fashion-MNIST, global batch 128,
# micro_batch = auto, 3 epochs) -- from an empty submit folder, with trident found the way a
# user's job finds it: `module load trident` from an installed prefix (nothing of the build on
# PATH). The job makes data/fashion_mnist.h5 itself and trains to completion; report.json says 4
# ranks on 2 nodes, micro-batches of 32, every step of 3 epochs, and a trained model.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" "${TEST_NAME:-ddp_2nodes}"
build=$4
job_script=${JOB_SCRIPT:-ddp_2nodes.slurm} deck_name=${DECK_NAME:-fashion_mnist_ddp}
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null || fail "cmake --install failed"
submit=$work/submit
mkdir -p "$submit"
cd "$submit"

id=$(env -u TRIDENT -u TRIDENT_HOME PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
       MODULEPATH="$prefix/share/modulefiles" sbatch --parsable "$src/jobs/$job_script")
echo "submitted job $id: sbatch jobs/$job_script (no arguments) from $submit"
expect_completed "$id" 900 "jobs/$job_script with no arguments"
out=$(ls "$submit"/trident-*-"$id".out)
grep -q "  $prefix/bin/trident train $prefix/share/trident/inputs/$deck_name.ini" "$out" \
  || { show_job "$id"; fail "the job did not run the module's trident on its default deck"; }
grep -q "making data/fashion_mnist.h5" "$out" || fail "the job did not say it made the data file"
report=$submit/runs/$deck_name/report.json
[ -f "$report" ] || fail "no $report"
field_of() { python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, r))' "$report" "$1"; }
nodes=$(field_of 'layout["nodes"]') world=$(field_of 'layout["world"]') micro=$(field_of 'layout["micro_batch"]')
dp=$(field_of 'layout["dp"]') pp=$(field_of 'layout["pp"]') steps=$(field_of steps)
accuracy=$(field_of 'final["test_accuracy"]')
echo "report.json: world $world on $nodes nodes ($(field "$id" NodeList)), dp $dp x pp $pp, micro_batch $micro," \
  "$steps steps, test accuracy $accuracy, after $(elapsed)"
[ "$nodes" = 2 ] || fail "layout.nodes = $nodes, expected 2"
[ "$world" = 4 ] || fail "layout.world = $world, expected 4 (2 nodes x 2 tasks)"
expect_steps=${EXPECT_STEPS:-1404}  # 3 epochs of 468 full batches of 128 (60000 samples)
[ "$steps" = "$expect_steps" ] || fail "steps = $steps, expected $expect_steps (epochs x 468 batches of 128)"
[ "dp $dp x pp $pp" = "${EXPECT_LAYOUT:-dp 4 x pp 1}" ] || fail "layout dp $dp x pp $pp, expected ${EXPECT_LAYOUT:-dp 4 x pp 1}"
[ "$micro" = "${EXPECT_MICRO:-32}" ] || fail "layout.micro_batch = $micro, expected ${EXPECT_MICRO:-32}"
awk -v a="$accuracy" 'BEGIN { exit !(a > 0.85) }' || fail "test accuracy $accuracy: the model did not train"
grep -q "world 4 on 2 node(s) \[node1,node2\]" "$out" || fail "trident did not see node1 and node2"
echo PASS
