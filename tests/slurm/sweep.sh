#!/usr/bin/env bash
# sweep.sh STATE SOURCE_DIR TRIDENT: jobs/sweep.slurm as a 3-point job array (lr x micro-batch,
# tiny), each point in its own folder with its overrides applied, then `trident report SWEEP_DIR`:
# the ranking and the micro-batch table checked against the points' report.json files, read here.
# A task beyond the sweep file's points exits 2 naming the --array to use; an edited sweep file
# resubmitted into the old points' folder exits 2 when a point it changes has run, and takes the
# folder over when none has (a 4th point refused as bad input, then corrected and trained); a
# task of the original file then still runs its point in the grown folder.
source "$(dirname "$0")/common.sh" "$1" "$2" "$3" sweep
export TRIDENT=$trident
cat >points.txt <<'POINTS'
# lr x micro-batch (global batch 64 on 2 ranks: 4, 2 and 1 micro-batches per step)
optim.lr=1e-3 optim.micro_batch=8
--set optim.lr=1e-2 --set optim.micro_batch=16
optim.lr=5e-2 optim.micro_batch=32
POINTS
# A noisier dataset than common.sh's (which every lr learns to 100%): the points' accuracies differ.
"$trident" prepare-data synthetic --out noisy.h5 --train 4096 --test 256 --classes 4 --shape 1x16x16 --noise 6 >/dev/null
# %1: one point at a time (this machine's 2 cores serve both "nodes").
# shellcheck disable=SC2046
id=$(sbatch --parsable --array=0-2%1 --output="$work/sweep-%A_%a.out" "$src/jobs/sweep.slurm" points.txt $(tiny_args 30) --set data.path="$work/noisy.h5")
for k in 0 1 2; do expect_completed "${id}_$k" 180 "sweep point $k"; done
echo "3 points trained after $(elapsed)"
dir=$work/sweeps/points
cmp -s points.txt "$dir/sweep.txt" || fail "$dir/sweep.txt is not a copy of the sweep file"

# One task too many: exit 2 before anything trains, naming the array to ask for.
# shellcheck disable=SC2046
extra=$(sbatch --parsable --array=3 --output="$work/extra-%A_%a.out" "$src/jobs/sweep.slurm" points.txt $(tiny_args 300))
s=$(wait_job "${extra}_3" 60)
[ "$(field "${extra}_3" ExitCode)" = 2:0 ] || { show_job "${extra}_3"; fail "task 3 of a 3-point sweep ended $s, not with exit 2"; }
grep -q "array task 3, but points.txt has 3 points: --array=0-2" "$work"/extra-*_3.out || fail "task 3's message does not name --array=0-2"
[ ! -e "$dir/point_3" ] || fail "task 3 made a point folder"

"$trident" report "$dir" >report.txt || { cat report.txt; fail "trident report $dir failed"; }
"$trident" report "$dir" --rank-by test_loss --out by_loss >/dev/null || fail "trident report $dir --rank-by test_loss failed"
for f in sweep.md sweep.csv sweep.svg; do [ -s "$dir/$f" ] || fail "no $dir/$f"; done
sed -n '/^| rank/,/^$/p;/^| micro-batch/,/^$/p' "$dir/sweep.md"
python3 - "$dir" <<'PY' || fail "the sweep report disagrees with the points' report.json files"
import csv, json, sys
d = sys.argv[1]
reports = [json.load(open(f"{d}/point_{k}/report.json")) for k in range(3)]
acc = [r["final"]["test_accuracy"] for r in reports]
loss = [r["final"]["test_loss"] for r in reports]
expected = sorted(range(3), key=lambda k: (-acc[k], loss[k]))  # a tie goes to the lower test loss, then file order
rows = list(csv.DictReader(open(f"{d}/sweep.csv")))
assert [int(r["point"]) for r in rows] == expected, f"ranked {[r['point'] for r in rows]}, accuracies {acc}"
by_loss = [int(r["point"]) for r in csv.DictReader(open("by_loss/sweep.csv"))]
assert by_loss == sorted(range(3), key=lambda k: (loss[k], -acc[k])), f"ranked {by_loss} by test loss, losses {loss}"
assert [int(r["rank"]) for r in rows] == [1, 2, 3]
for r in rows:
    k = int(r["point"])
    assert r["optim.lr"] == ["1e-3", "1e-2", "5e-2"][k] and r["optim.micro_batch"] == str(8 << k), r
    # the point trained with its overrides
    assert float(reports[k]["deck"]["optim"]["lr"]) == float(r["optim.lr"]), (reports[k]["deck"]["optim"], r)
    assert reports[k]["layout"]["micro_batch"] == 8 << k, reports[k]["layout"]
    assert abs(float(r["samples_per_s"]) - reports[k]["throughput"]["samples_per_s"]) <= 1e-5 * reports[k]["throughput"]["samples_per_s"]
md = open(f"{d}/sweep.md").read()
base = reports[0]["throughput"]["samples_per_s"]
for k in range(3):
    sps = reports[k]["throughput"]["samples_per_s"]
    line = f"| {8 << k} | {4 >> k} | 1 | {1e3 * reports[k]['throughput']['step_time_s']:.2f} | {sps:.0f} | {sps / base:.2f}x |"
    assert line in md, "no line " + line
print(f"    ranked {expected} by test accuracy {acc}, {by_loss} by test loss {loss}; samples/s {[round(r['throughput']['samples_per_s']) for r in reports]}")
PY

# The sweep file edited and resubmitted (named without an extension, through ./: its folder is
# still sweeps/points), while that folder holds the old file's points: the task refuses (exit 2)
# instead of pairing their finished results with the new overrides.
sed 's/1e-3/2e-3/' points.txt >points
# shellcheck disable=SC2046
edited=$(sbatch --parsable --array=0 --output="$work/edited-%A_%a.out" "$src/jobs/sweep.slurm" ./points $(tiny_args 300))
s=$(wait_job "${edited}_0" 60)
[ "$(field "${edited}_0" ExitCode)" = 2:0 ] || { show_job "${edited}_0"; fail "an edited sweep file into the old folder ended $s, not with exit 2"; }
grep -q "sweeps/points holds the points of another sweep file" "$work"/edited-*_0.out || { show_job "${edited}_0"; fail "no message naming sweeps/points"; }
cmp -s points.txt "$dir/sweep.txt" || fail "the refused task replaced $dir/sweep.txt"

# The scripts copied into a folder whose name has a space: the task finds ddp_2nodes.slurm next
# to the sweep.slurm submitted (scontrol's Command= is that path and then the arguments, joined
# by spaces; it was cut at the first space, and the task exited 2 without TRIDENT_HOME).
mkdir "$work/my jobs" && cp "$src"/jobs/*.slurm "$work/my jobs/"
# shellcheck disable=SC2046
spaced=$(env -u TRIDENT_HOME TRIDENT_SWEEP_DIR="$work/sweeps/spaced" sbatch --parsable --array=0 \
  --output="$work/spaced-%A_%a.out" "$work/my jobs/sweep.slurm" points.txt $(tiny_args 10) --set data.path="$work/noisy.h5")
expect_completed "${spaced}_0" 180 "a sweep point submitted from a folder with a space in its name"
[ -s "$work/sweeps/spaced/point_0/report.json" ] || fail "the point from the folder with a space wrote no report.json"
# A point added to the sweep file with a bad value, then corrected (the file in another folder,
# of the same name: the same sweeps/points): the first task takes the folder over (the changed
# point has no folder) and trident refuses it (exit 2, no point folder); the corrected file takes
# it over again and the point trains. Points 0-2's folders are left as they were. (A refused
# point claimed the folder for its file, which the corrected file could then not use.)
mkdir v2 && cp points.txt v2/points.txt && echo "optim.lr=abc optim.micro_batch=8" >>v2/points.txt
finished=$(cd "$dir" && find point_0 point_1 point_2 -type f -print0 | sort -z | xargs -0 md5sum)
added() {  # the 4th point of v2/points.txt
  # shellcheck disable=SC2046
  sbatch --parsable --array=3 --output="$work/added$1-%A_%a.out" "$src/jobs/sweep.slurm" v2/points.txt \
    $(tiny_args 10) --set data.path="$work/noisy.h5"
}
bad=$(added 1)
s=$(wait_job "${bad}_3" 60)
[ "$(field "${bad}_3" ExitCode)" = 2:0 ] || { show_job "${bad}_3"; fail "a point with optim.lr=abc ended $s, not with exit 2"; }
grep -q "sweeps/points/sweep.txt replaced by v2/points.txt: its changed points (3) had not run" "$work"/added1-*_3.out ||
  fail "the added point did not take the folder over: $(cat "$work"/added1-*_3.out)"
grep -q -- "--set optim.lr=abc: optim.lr is not a finite number" "$work"/added1-*_3.out || fail "the refused point's message does not name optim.lr: $(cat "$work"/added1-*_3.out)"
[ ! -e "$dir/point_3" ] || fail "the refused point made a point folder"
sed -i 's/optim.lr=abc/optim.lr=2e-3/' v2/points.txt
good=$(added 2)
expect_completed "${good}_3" 180 "the corrected 4th point"
cmp -s v2/points.txt "$dir/sweep.txt" || fail "$dir/sweep.txt is not the corrected sweep file"
[ -s "$dir/point_3/report.json" ] || fail "the corrected point wrote no report.json"
grep -q '"lr": 0.002' "$dir/point_3/report.json" || fail "point 3 did not train with optim.lr=2e-3: $(grep '"lr"' "$dir/point_3/report.json")"
[ "$(cd "$dir" && find point_0 point_1 point_2 -type f -print0 | sort -z | xargs -0 md5sum)" = "$finished" ] ||
  fail "the finished points' folders changed"
# A task of the original 3-point file (a requeue of the first sweep) runs its point in the grown
# folder, which keeps the 4-point file (it was refused: point_3 "changed" and had run).
# shellcheck disable=SC2046
again=$(sbatch --parsable --array=0 --output="$work/again-%A_%a.out" "$src/jobs/sweep.slurm" points.txt \
  $(tiny_args 30) --set data.path="$work/noisy.h5")
expect_completed "${again}_0" 120 "a task of the original sweep file after the folder grew"
grep -q "sweeps/points/sweep.txt has points this file lacks (3)" "$work"/again-*_0.out ||
  fail "the original file's task: $(cat "$work"/again-*_0.out)"
cmp -s v2/points.txt "$dir/sweep.txt" || fail "the original file's task replaced $dir/sweep.txt"
echo "after $(elapsed)"
echo PASS
