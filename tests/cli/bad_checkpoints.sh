#!/usr/bin/env bash
# bad_checkpoints.sh TRIDENT MPIEXEC MAKE_BAD_INPUTS: resuming from a checkpoint that does not
# fit is bad input: exit 2, one message naming the file (and tensor), and the run folder it was
# asked to continue is left exactly as it was (every file's checksum compared).
#   other_shape    written by mlp 256,128, resumed by mlp 64
#   other_version  format version rewritten to 99 (metadata checksum kept valid)
#   garbled_step   the step line rewritten to "4x", checksum kept valid (it threw
#                  std::invalid_argument: a fault, which --resume auto did not pass over)
#   corrupt        bytes in the middle of a tensor overwritten
#   truncated      the file cut in half
#   renamed        a byte of a tensor's name changed (the blocks' checksums cover data, not names)
#   reshaped       a tensor's first dimension in its header changed (trident compare too)
#   deck_changed   a byte of the deck attribute changed (global_batch 64 -> 94)
#   other_optimizer  an AdamW checkpoint resumed with SGD (its state does not carry over)
#   fewer_layers   written by mlp 64,64,64, resumed by mlp 64,64 (its fc3 would be dropped)
# And a resume that passes over a damaged newest checkpoint prunes around it: the good older one
# it resumed from is kept, the damaged later one is moved, untouched, into checkpoints/previous.
source "$(dirname "$0")/common.sh" "$1" "$2" 2048
make_bad=$3
args=(--set data.path=syn.h5 --set run.max_steps=4 --set run.threads=1 --set optim.global_batch=64
      --set optim.micro_batch=16 --set model.kind=mlp --set run.output_dir=runs/src)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" >src.log 2>&1 || fail "training failed: $(tail -3 src.log)"
good=runs/src/checkpoints/step_0000004.h5
cp "$good" other_version.h5 && "$make_bad" meta-line other_version.h5 format_version 99
cp "$good" garbled_step.h5 && "$make_bad" meta-line garbled_step.h5 step 4x
cp "$good" corrupt.h5
size=$(stat -c %s "$good")
printf 'trident-damage-%.0s' $(seq 64) | dd of=corrupt.h5 bs=1 seek=$((size / 2)) conv=notrunc status=none
head -c $((size / 2)) "$good" >truncated.h5
# One byte of a tensor's name, and one of the deck attribute (global_batch 64 -> 94): the blocks'
# checksums cover neither, so both verified, and a renamed tensor was "missing (another model?)".
flip_first() {  # FILE PATTERN OFFSET BYTE: the byte at OFFSET into PATTERN's first occurrence
  python3 - "$@" <<'PY'
import sys
path, pattern, offset, byte = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), int(sys.argv[4], 0)
data = bytearray(open(path, "rb").read())
at = data.find(pattern)
assert at >= 0, f"no {pattern!r} in {path}"
data[at + offset] = byte
open(path, "wb").write(bytes(data))
PY
}
cp "$good" renamed.h5 && flip_first renamed.h5 head.linear.weight 0 0x97
cp "$good" deck_changed.h5 && flip_first deck_changed.h5 "global_batch        = 64" 22 0x39
# A tensor's first dimension in its header rewritten to 8675543: `trident compare` listed it as a
# difference (exit 1, "float32 [8675543 x ...] in A"); damage is bad input (exit 2).
read -r rows cols < <("$trident" inspect "$good" | sed -n 's|^/params/fc1.linear.weight  float32  \[\([0-9]*\) x \([0-9]*\)\]$|\1 \2|p')
cp "$good" reshaped.h5 && python3 - reshaped.h5 "$rows" "$cols" <<'PY'
import struct, sys
path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = bytearray(open(path, "rb").read())
at = data.find(struct.pack("<QQ", rows, cols))  # the first tensor of that shape's dataspace
assert at >= 0, f"no dataspace [{rows} x {cols}] in {path}"
data[at:at + 8] = struct.pack("<Q", 8675543)
open(path, "wb").write(bytes(data))
PY
snapshot() { find runs/src -type f -print0 | sort -z | xargs -0 md5sum; }
before=$(snapshot)

expect_bad() {  # NAME REGEX ARGS...
  train_refused "$1" "$2" "${args[@]}" "${@:3}"
  [ "$(snapshot)" = "$before" ] || fail "$1: the run folder changed"
}
expect_bad other_shape "checkpoint .*step_0000004.h5: .*fc1.*shape" --set model.hidden=64 --resume "$good"
# A checkpoint of a deeper model (mlp 64,64,64) into a shallower one (64,64), every shared tensor
# the same shape: refused, not loaded into its first layers with the rest dropped.
"$mpiexec" -n 1 "$trident" train /dev/null "${args[@]}" --set model.hidden=64,64,64 --set run.max_steps=1 \
  --set run.output_dir=runs/deep >deep.log 2>&1 || fail "training the deeper model failed: $(tail -3 deep.log)"
expect_bad fewer_layers "checkpoint runs/deep/checkpoints/step_0000001.h5: it holds 2 tensors the model lacks \(/params/fc3.linear.bias, /params/fc3.linear.weight\).*model.hidden 64,64,64 -> 64,64" \
  --set model.hidden=64,64 --resume runs/deep/checkpoints/step_0000001.h5
expect_bad other_version "checkpoint other_version.h5: format version 99 \(this trident reads version [0-9]+\)" \
  --resume other_version.h5
expect_bad garbled_step "checkpoint garbled_step.h5: metadata line 'step' is not a number \('4x'\)" \
  --resume garbled_step.h5
expect_bad corrupt "checkpoint corrupt.h5: .*(checksum|damaged)" --resume corrupt.h5
expect_bad truncated "checkpoint truncated.h5: .*(truncated|damaged)" --resume truncated.h5
expect_bad renamed "checkpoint renamed.h5: its tensor names are damaged" --resume renamed.h5
expect_bad reshaped "checkpoint reshaped.h5: .*damaged" --resume reshaped.h5
expect_bad deck_changed "checkpoint deck_changed.h5: its deck \(attribute 'deck'\) is damaged" --resume deck_changed.h5
"$trident" inspect renamed.h5 >inspect_renamed.log 2>&1 && fail "trident inspect verified a file with a damaged tensor name"
# inspect of a file HDF5 cannot open says HDF5's reason (it said "HDF5 cannot open it" alone).
set +e
"$trident" inspect truncated.h5 >inspect_truncated.log 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "inspect: truncated.h5: HDF5 cannot open it: truncated file: eof = " inspect_truncated.log ||
  fail "inspect of a truncated file: exit $rc: $(cat inspect_truncated.log)"
expect_bad other_optimizer "checkpoint .*step_0000004.h5: written with optim.name = adamw, this run's is sgd" \
  --set optim.name=sgd --resume "$good"

# Checkpoints at steps 2 and 4, step 4 damaged; --resume auto takes step 2, moves step 4 (not
# this run's) into checkpoints/previous, untouched, and saves step 3.
chain=(--set checkpoint.every_steps=2 --set run.output_dir=runs/chain)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${chain[@]}" >chain.log 2>&1 || fail "chain: $(tail -3 chain.log)"
printf 'trident-damage-%.0s' $(seq 64) | dd of=runs/chain/checkpoints/step_0000004.h5 bs=1 \
  seek=$((size / 2)) conv=notrunc status=none
damaged=$(md5sum <runs/chain/checkpoints/step_0000004.h5)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${chain[@]}" --set run.max_steps=3 >resumed.log 2>&1 \
  || fail "resume past a damaged checkpoint: $(tail -3 resumed.log)"
grep -q "resuming from .*step_0000002.h5" resumed.log || fail "did not resume from step 2: $(grep -i resum resumed.log)"
[ "$(cat runs/chain/checkpoints/latest)" = step_0000003.h5 ] || fail "latest is $(cat runs/chain/checkpoints/latest)"
"$trident" inspect runs/chain/checkpoints/step_0000002.h5 >/dev/null || fail "the good step 2 it resumed from is gone or damaged"
grep -q "checkpoints in runs/chain/checkpoints of another run (this one starts at step 2 from runs/chain/checkpoints/step_0000002.h5) moved to runs/chain/checkpoints/previous, so that a requeue before this run's first save does not resume from them: step_0000004.h5$" \
  resumed.log || fail "the damaged step 4 was not moved aside as another run's: $(grep -i 'checkpoints in' resumed.log)"
[ "$(md5sum <runs/chain/checkpoints/previous/step_0000004.h5)" = "$damaged" ] || fail "the damaged step 4 was changed"
# Resumed again (from step 3), saving only at step 5: keep_last 2 keeps 3 and 5, prunes 2.
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${chain[@]}" --set run.max_steps=5 \
  --set checkpoint.every_steps=10 >resumed2.log 2>&1 || fail "second resume: $(tail -3 resumed2.log)"
grep -q "resuming from .*step_0000003.h5" resumed2.log || fail "did not resume from step 3: $(grep -i resum resumed2.log)"
left=$(cd runs/chain/checkpoints && echo step_*.h5)
[ "$left" = "step_0000003.h5 step_0000005.h5" ] || fail "checkpoints left: $left"
"$trident" inspect runs/chain/checkpoints/step_0000003.h5 >/dev/null || fail "step 3 is damaged"

# The same with step 4's metadata garbled under a valid checksum: passed over, named with why (it
# was std::invalid_argument, a fault that stopped --resume auto).
garbled=(--set checkpoint.every_steps=2 --set run.output_dir=runs/garbled)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${garbled[@]}" >garbled.log 2>&1 || fail "garbled: $(tail -3 garbled.log)"
"$make_bad" meta-line runs/garbled/checkpoints/step_0000004.h5 step 4x
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${garbled[@]}" --set run.max_steps=3 >garbled_resumed.log 2>&1 ||
  fail "resume past a garbled checkpoint: $(tail -3 garbled_resumed.log)"
grep -q "resuming from .*step_0000002.h5 (skipped .*step_0000004.h5: .*metadata line 'step' is not a number ('4x'))" \
  garbled_resumed.log || fail "garbled step 4 not passed over with its reason: $(grep -i resum garbled_resumed.log)"

# --resume given a run folder, its checkpoints folder or its `latest` file: the newest checkpoint
# that verifies there (step 5), or the one `latest` names; a folder with none is bad input.
for from in runs/chain runs/chain/checkpoints runs/chain/checkpoints/latest; do
  out=runs/from_$(echo "$from" | tr / _)
  "$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=6 --set run.output_dir="$out" \
    --resume "$from" >from.log 2>&1 || fail "--resume $from: $(tail -3 from.log)"
  grep -q "resuming from runs/chain/checkpoints/step_0000005.h5" from.log || fail "--resume $from: $(grep -i resum from.log)"
  grep -q "deck keys changed since the checkpoint was written: .*run.max_steps 5 -> 6" from.log \
    || fail "--resume $from: the changed run.max_steps is not listed: $(grep -i 'deck keys' from.log)"
  [ "$(cat "$out/checkpoints/latest")" = step_0000006.h5 ] || fail "--resume $from did not train on to step 6"
done
# --resume auto:PATH (what the job scripts pass on a requeue of a run started with --resume PATH):
# PATH while the run's folder has no checkpoint (a requeue before the first save); once it has,
# its own newest, not PATH again (which threw the requeued run's progress away).
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=6 --set run.output_dir=runs/auto_path \
  --resume auto:runs/chain/checkpoints/step_0000005.h5 >auto_path.log 2>&1 || fail "auto:PATH: $(tail -3 auto_path.log)"
grep -q "no checkpoint of this run in runs/auto_path/checkpoints yet; resuming from runs/chain/checkpoints/step_0000005.h5" \
  auto_path.log || fail "auto:PATH without a checkpoint of its own: $(grep -i resum auto_path.log)"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=7 --set run.output_dir=runs/auto_path \
  --resume auto:runs/chain/checkpoints/step_0000005.h5 >auto_path2.log 2>&1 || fail "auto:PATH again: $(tail -3 auto_path2.log)"
grep -q "this run has checkpoints of its own; --resume auto: resuming from runs/auto_path/checkpoints/step_0000006.h5" \
  auto_path2.log || fail "auto:PATH with a checkpoint of its own: $(grep -i resum auto_path2.log)"
expect_bad auto_empty "resume auto:: auto:PATH needs a checkpoint file or folder after 'auto:'" --resume auto: \
  --set run.output_dir=runs/auto_empty

# --resume never in that folder: says it replaces the earlier run's results, moves its
# checkpoints and `latest` into checkpoints/previous (replacing the damaged step 4 an earlier
# start had put there), and `latest` then names this run's.
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${chain[@]}" --set run.max_steps=2 --resume never \
  >never.log 2>&1 || fail "--resume never: $(tail -3 never.log)"
grep -q "starting fresh in runs/chain: metrics.jsonl, evaluations.jsonl, goodput.jsonl of an earlier run there are replaced" never.log \
  || fail "--resume never did not say what it replaces: $(grep -i fresh never.log)"
grep -q "runs/chain/report.json (the run as it ended before) moved to report.previous.json" never.log \
  || fail "--resume never did not say where the earlier report.json went: $(grep -i report never.log)"
grep -q "(this one starts at step 0 from scratch) moved to runs/chain/checkpoints/previous, .*: step_0000003.h5, step_0000005.h5$" \
  never.log || fail "--resume never: $(grep -i 'checkpoints in' never.log)"
grep -q "warning: removed the checkpoints an earlier start had moved to runs/chain/checkpoints/previous: step_0000004.h5$" never.log ||
  fail "--resume never did not warn that it removed the earlier set: $(grep -i 'removed' never.log)"
left=$(cd runs/chain/checkpoints && echo step_*.h5)
[ "$left" = "step_0000002.h5" ] || fail "after --resume never: $left"
[ "$(cd runs/chain/checkpoints/previous && echo *)" = "latest step_0000003.h5 step_0000005.h5" ] ||
  fail "after --resume never, previous holds $(ls runs/chain/checkpoints/previous)"
[ "$(cat runs/chain/checkpoints/previous/latest)" = step_0000005.h5 ] || fail "previous/latest is $(cat runs/chain/checkpoints/previous/latest)"
[ "$(cat runs/chain/checkpoints/latest)" = step_0000002.h5 ] || fail "after --resume never, latest is $(cat runs/chain/checkpoints/latest)"
[ "$(wc -l <runs/chain/goodput.jsonl)" = 1 ] || fail "after --resume never, goodput.jsonl holds $(wc -l <runs/chain/goodput.jsonl) records, expected this run's 1"
# A fresh start that fails before its first save (a lost node; here a fault at step 1), then its
# requeue (the job scripts pass --resume auto for never): it starts fresh again, not from the
# earlier run's step 2 (which it resumed from, unannounced, when that stayed in checkpoints/).
set +e
TRIDENT_TEST_FAULT=0:1 "$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${chain[@]}" --set run.max_steps=2 \
  --resume never >never_fault.log 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "fresh start with a fault at step 1: exit code $rc, expected 1 ($(tail -3 never_fault.log))"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${chain[@]}" --set run.max_steps=2 --resume auto \
  >never_requeued.log 2>&1 || fail "the requeue of the failed fresh start: $(tail -3 never_requeued.log)"
grep -q -- "--resume auto: no checkpoint in runs/chain/checkpoints, starting fresh" never_requeued.log ||
  fail "the requeue of a fresh start did not start fresh: $(grep -i resum never_requeued.log)"
# A run resumed from a file of previous/ (the run a fresh start set aside), failing before its
# first save, then requeued with --resume auto:PATH (what the job scripts pass): the file came
# back into checkpoints/ and the requeue resumes from it, not from the fresh start's step 2
# (which it took as "its own" before).
lineage=(--set checkpoint.every_steps=2 --set run.output_dir=runs/lineage)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${lineage[@]}" --set run.max_steps=4 >lineage_a.log 2>&1 ||
  fail "lineage A: $(tail -3 lineage_a.log)"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${lineage[@]}" --set run.max_steps=2 --resume never \
  >lineage_b.log 2>&1 || fail "lineage B: $(tail -3 lineage_b.log)"
from_previous=runs/lineage/checkpoints/previous/step_0000004.h5
set +e
TRIDENT_TEST_FAULT=0:5 "$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${lineage[@]}" --set run.max_steps=6 \
  --resume "$from_previous" >lineage_c.log 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "lineage C (a fault at step 5): exit code $rc ($(tail -3 lineage_c.log))"
grep -q "step_0000004.h5 moved back from runs/lineage/checkpoints/previous into runs/lineage/checkpoints: this run starts from it" \
  lineage_c.log || fail "lineage C: the file it resumed from was not brought back: $(grep -i 'previous' lineage_c.log)"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${lineage[@]}" --set run.max_steps=6 \
  --resume "auto:$from_previous" >lineage_requeued.log 2>&1 || fail "lineage C requeued: $(tail -3 lineage_requeued.log)"
grep -q "this run has checkpoints of its own; --resume auto: resuming from runs/lineage/checkpoints/step_0000004.h5" \
  lineage_requeued.log || fail "lineage C requeued: $(grep -i resum lineage_requeued.log)"
[ "$(cd runs/lineage/checkpoints/previous && echo step_*.h5)" = step_0000002.h5 ] ||
  fail "lineage: previous/ holds $(ls runs/lineage/checkpoints/previous), expected B's step 2"
# A run resumed from a file of previous/ that finishes: report.json names the file where it is
# now, checkpoints/step_0000004.h5 (it named checkpoints/previous/..., where nothing is any more).
brought=(--set checkpoint.every_steps=2 --set run.output_dir=runs/brought)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${brought[@]}" --set run.max_steps=4 >brought_a.log 2>&1 ||
  fail "brought A: $(tail -3 brought_a.log)"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${brought[@]}" --set run.max_steps=2 --resume never \
  >brought_b.log 2>&1 || fail "brought B: $(tail -3 brought_b.log)"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" "${brought[@]}" --set run.max_steps=6 \
  --resume runs/brought/checkpoints/previous/step_0000004.h5 >brought_c.log 2>&1 || fail "brought C: $(tail -3 brought_c.log)"
grep -q '"resumed_from": "checkpoints/step_0000004.h5"' runs/brought/report.json ||
  fail "brought C: report.json's resumed_from: $(grep resumed_from runs/brought/report.json)"
# --resume auto where every checkpoint is damaged: bad input naming each, not a quiet fresh start.
mkdir -p runs/all_damaged/checkpoints
cp corrupt.h5 runs/all_damaged/checkpoints/step_0000004.h5
echo step_0000004.h5 >runs/all_damaged/checkpoints/latest
damaged_before=$(md5sum runs/all_damaged/checkpoints/*)
expect_bad all_damaged "resume auto: no checkpoint in runs/all_damaged/checkpoints verifies \(skipped checkpoint .*step_0000004.h5: .*damaged.*\): resume from one with --resume PATH, or start over with --resume never" \
  --set run.output_dir=runs/all_damaged
[ "$(md5sum runs/all_damaged/checkpoints/*)" = "$damaged_before" ] || fail "all_damaged: its checkpoints changed"
[ ! -e runs/all_damaged/metrics.jsonl ] || fail "all_damaged: refused, yet metrics.jsonl was written"
mkdir -p runs/empty/checkpoints
expect_bad empty_folder "resume runs/empty: runs/empty/checkpoints holds no checkpoint" --resume runs/empty

# A `latest` that names no step file of its folder (a path into another run's folder, an edited or
# damaged file) is passed over, said, for the newest step file there that verifies: it resumed
# from the other run's checkpoint, or echoed the bytes.
mkdir -p runs/pointer/checkpoints
cp runs/src/checkpoints/step_0000004.h5 runs/pointer/checkpoints/
for content in ../../chain/checkpoints/step_0000005.h5 "$(printf '\001\002 not a name')"; do
  printf '%s\n' "$content" >runs/pointer/checkpoints/latest
  "$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=5 --set run.output_dir=runs/pointer \
    >pointer.log 2>&1 || fail "latest '$content': $(tail -3 pointer.log)"
  grep -q "resuming from runs/pointer/checkpoints/step_0000004.h5 (skipped runs/pointer/checkpoints/latest: it does not name a step_\*.h5 file of its folder)" \
    pointer.log || fail "latest '$content': $(grep -i resum pointer.log)"
  rm runs/pointer/checkpoints/step_0000005.h5
done
echo "a latest naming no step file of its folder: passed over for step 4"
# `trident compare` with a damaged file, either side: exit 2 naming the file (1 is "different").
for bad in corrupt truncated reshaped; do
  for order in "$bad.h5 $good" "$good $bad.h5"; do
    set +e
    # shellcheck disable=SC2086
    "$trident" compare $order >compare.log 2>&1
    rc=$?
    set -e
    [ "$rc" = 2 ] && grep -q "trident: error: .*$bad.h5: .*\(damaged\|not a trident checkpoint\)" compare.log ||
      fail "compare $order: exit $rc: $(tail -2 compare.log)"
  done
done
echo "compare with a corrupt, truncated or reshaped checkpoint: exit 2 naming it"
# A run folder whose name starts with '!' (the candidates' tag for a bad `latest`) resumes from
# its own checkpoint.
mkdir -p '!bang/checkpoints'
cp runs/src/checkpoints/step_0000004.h5 runs/src/checkpoints/latest '!bang/checkpoints/'
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=5 --set 'run.output_dir=!bang' \
  >bang.log 2>&1 || fail "run folder '!bang': $(tail -3 bang.log)"
grep -q "resuming from !bang/checkpoints/step_0000004.h5$" bang.log || fail "run folder '!bang': $(grep -i resum bang.log)"
# A fresh start whose setting aside of another run's checkpoints fails (a file that cannot be
# renamed: chattr +i, as root on ext4 or xfs) is refused, and the folder is left as it was: the
# file that had moved and the unfinished save included (it removed the one and renamed what was in
# the way before it was refused).
cp -r runs/src runs/stuck
cp runs/stuck/checkpoints/step_0000004.h5 runs/stuck/checkpoints/step_0000001.h5
printf 'x' >runs/stuck/checkpoints/step_0000008.h5.tmp
mkdir runs/stuck/checkpoints/previous.new && printf 'x' >runs/stuck/checkpoints/previous.new/step_0000003.h5
stuck_file=$work/runs/stuck/checkpoints/step_0000004.h5
stuck_snapshot() { find runs/stuck | sort; find runs/stuck -type f -print0 | sort -z | xargs -0 md5sum; }
stuck_before=$(stuck_snapshot)
if chattr +i "$stuck_file" 2>/dev/null; then
  trap 'chattr -i "$stuck_file"; rm -rf "$work"' EXIT
  train_refused stuck "the checkpoints in runs/stuck/checkpoints of another run could not be set aside \(moving step_0000004.h5 into runs/stuck/checkpoints/previous.new failed \(Operation not permitted\); nothing was moved\)" \
    "${args[@]}" --set run.output_dir=runs/stuck --resume never
  chattr -i "$stuck_file"
  [ "$(stuck_snapshot)" = "$stuck_before" ] || fail "stuck: the run folder changed: $(diff <(echo "$stuck_before") <(stuck_snapshot))"
else
  echo "skipped the set-aside failure: this user or file system cannot make a file immutable (chattr +i)"
fi
echo PASS
