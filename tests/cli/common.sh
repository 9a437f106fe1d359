# Sourced by the CLI test scripts: TRIDENT and MPIEXEC from the arguments, a scratch folder to
# run in (removed at exit), fail(), and a synthetic dataset syn.h5 of TRAIN samples of 1x16x16.
#   source common.sh TRIDENT MPIEXEC TRAIN
set -eu
trident=$1 mpiexec=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$trident" prepare-data synthetic --out syn.h5 --train "$3" --test 256 --classes 4 --shape 1x16x16 >/dev/null
