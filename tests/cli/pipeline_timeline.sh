#!/usr/bin/env bash
# pipeline_timeline.sh TRIDENT MPIEXEC: pp 2 under zb-h1 with the time-balanced cut, as a user runs
# it. The log names the cut and each stage's measured time; report.json holds each stage's last
# step, in which every micro-batch has exactly one forward, input gradient and weight gradient,
# run one after another; trident report draws it and reports the bubble measured vs expected.
source "$(dirname "$0")/common.sh" "$1" "$2" 512
out=$("$mpiexec" -n 2 "$trident" train /dev/null --set data.path=syn.h5 --set run.name=tl --set model.kind=cnn \
      --set parallel.pp=2 --set parallel.schedule=zb-h1 --set parallel.balance=time --set run.max_steps=3 \
      --set optim.global_batch=32 --set optim.micro_batch=8 --set run.threads=1 2>&1) || fail "training failed: $out"
printf '%s\n' "$out"
grep -Eq "pipeline cut by measured time: stage 0 block1.* [0-9.]+ ms \| stage 1 .*head [0-9.]+ ms" <<<"$out" ||
  fail "no line naming the time-balanced cut"
python3 - runs/tl/report.json <<'PY' || fail "report.json's timeline"
import json, sys
report = json.load(open(sys.argv[1]))
stages = report["pipeline"]["stages"]
m = report["layout"]["micro_batches"]
assert m == 4 and len(stages) == 2, (m, len(stages))
for st in stages:
    ops = st["timeline"]
    got = sorted((op[0], op[1]) for op in ops)
    want = sorted((kind, i) for kind in ("F", "Bi", "W") for i in range(m))
    assert got == want, (st["stage"], got)
    for a, b in zip(ops, ops[1:]):
        assert 0 <= a[3] <= a[4] <= b[3], ("ops overlap or run backwards", a, b)
print("timeline ok:", [len(st["timeline"]) for st in stages], "ops")
PY
rep=$("$trident" report runs --out rep) || fail "trident report: $rep"
grep -q "wrote rep/timeline_tl.svg" <<<"$rep" || fail "no timeline picture: $rep"
[ "$(grep -c '<title>F' rep/timeline_tl.svg)" = 8 ] || fail "the picture should show 4 forwards on each of 2 stages"
grep -Eq "bubble measured 0\.[0-9]+, expected 0\.[0-9]+" rep/report.md || fail "report.md lacks the bubble line"
grep -q "timeline_tl.svg" rep/report.md || fail "report.md does not show the picture"
# A run folder of a long relative path: its picture's name keeps the path's start and a hash (it
# was the whole path, longer than a file name may be: the report was refused).
long=long/$(printf 'a%.0s' $(seq 130))/$(printf 'b%.0s' $(seq 130))
mkdir -p "$long" && cp -r runs/tl/. "$long/"
rep=$("$trident" report long --out rep_long 2>&1) || fail "report of a long run folder: $rep"
picture=$(cd rep_long && echo timeline_*.svg)
[[ $picture =~ ^timeline_a{130}_b{49}_[0-9a-f]{16}\.svg$ ]] || fail "the picture's name: $picture"
grep -q "($picture)" rep_long/report.md || fail "report.md does not show $picture"
# A report refused (an --out it cannot make, a name too long) leaves no folder; a user's file with
# a temporary file's name in --out is left (it was removed or renamed over report.md).
set +e
"$trident" report runs --out "new/c/$(printf 'x%.0s' $(seq 300))" >refused.log 2>&1
rc=$?
set -e
refused "report into a path it cannot make" refused.log "$rc"
[ ! -e new ] || fail "the refused report left $(find new)"
mkdir -p rep_user/report.md.tmp && echo "the user's" >rep_user/report.csv.tmp
"$trident" report runs --out rep_user >/dev/null || fail "report beside a user's .tmp files"
[ -d rep_user/report.md.tmp ] && [ "$(cat rep_user/report.csv.tmp)" = "the user's" ] || fail "the user's .tmp files: $(ls -A rep_user)"
grep -q "bubble measured" rep_user/report.md || fail "rep_user/report.md is not the report"
echo PASS
