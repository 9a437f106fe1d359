#!/usr/bin/env bash
# zero3_accounting.sh TRIDENT MPIEXEC: report.json's training figures do not depend on the test
# split. ZeRO-3 gathers every layer for the evaluation's forwards too; those gathers (and their
# time) belong to the evaluation, so two runs that differ only in the test split's size (256 and
# 2048 samples, np 2, 6 steps) report the same zero3_gathers.
source "$(dirname "$0")/common.sh" "$1" "$2" 2048
"$trident" prepare-data synthetic --out big_test.h5 --train 2048 --test 2048 --classes 4 --shape 1x16x16 >/dev/null
for data in syn.h5 big_test.h5; do
  "$mpiexec" -n 2 "$trident" train /dev/null --set data.path=$data --set model.kind=cnn --set run.max_steps=6 \
    --set parallel.zero=3 --set optim.global_batch=64 --set run.threads=1 --set run.output_dir="runs/$data" \
    >"$data.log" 2>&1 || fail "$data: $(tail -3 "$data.log")"
done
gathers() { python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["zero3_gathers"]; print(g["total"], g["prefetched"])' "$1"; }
small=$(gathers runs/syn.h5/report.json) big=$(gathers runs/big_test.h5/report.json)
echo "zero3_gathers (total, prefetched): test split 256: $small; test split 2048: $big"
[ -n "$small" ] && [ "${small% *}" -gt 0 ] || fail "no gathers reported"
[ "$small" = "$big" ] || fail "the gathers counted depend on the test split: $small vs $big"
echo PASS
