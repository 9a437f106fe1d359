#!/usr/bin/env bash
# damaged_dataset.sh TRIDENT MPIEXEC MAKE_BAD_INPUTS: the real Fashion-MNIST file prepare-data
# writes carries CRC-32 blocks; one byte of an image changed behind HDF5's back is then bad input
# for `inspect` and for training at np 2 (exit 2, one message naming the file, the dataset and the
# rows, nothing written), and data.verify_checksums = false trains on it as before.
source "$(dirname "$0")/common.sh" "$1" "$2" 256
make_bad=$3
"$trident" prepare-data fashion-mnist --out fm.h5 >/dev/null
"$trident" inspect fm.h5 >inspect_good.log || fail "inspect of the fresh file: $(tail -3 inspect_good.log)"
grep -A1 '^/train/inputs ' inspect_good.log
grep -q '@crc32_blocks = CRC-32 of 45 blocks of rows' inspect_good.log || fail "no 45 blocks on /train/inputs"
grep -q '^checksums: every block of 4 datasets verified' inspect_good.log || fail "the fresh file does not verify"

# Row 50000 of 60000 (784 bytes a row, 1337 rows a block): block [49469, 50806), in rank 1's share.
"$make_bad" flip-byte fm.h5 /train/inputs $((50000 * 784 + 400))
args=(--set data.path=fm.h5 --set model.kind=mlp --set run.max_steps=1 --set run.threads=1 --set run.output_dir=runs/a)
set +e
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" >train.log 2>&1
rc=$?
"$trident" inspect fm.h5 >inspect_bad.log 2>&1
inspect_rc=$?
set -e
refused train train.log $rc
grep -q 'data.path fm.h5: /train/inputs: rows \[49469, 50806) differ from their CRC-32 (attribute crc32_blocks): the file is damaged; make it again' train.log ||
  fail "training: no message naming the damaged rows"
[ ! -e runs ] || fail "bad input, yet runs/ was written"
refused inspect inspect_bad.log $inspect_rc
grep -q '^checksums: FAILED: fm.h5: /train/inputs: rows \[49469, 50806)' inspect_bad.log || fail "inspect: no FAILED line"

"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set data.verify_checksums=false >unchecked.log 2>&1 ||
  fail "data.verify_checksums = false: $(tail -3 unchecked.log)"
echo PASS
