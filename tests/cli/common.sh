# Sourced by the CLI test scripts: TRIDENT and MPIEXEC from the arguments, a scratch folder to
# run in (removed at exit), fail(), refused(), and a synthetic dataset syn.h5 of TRAIN samples of 1x16x16.
#   source common.sh TRIDENT MPIEXEC TRAIN
set -eu
trident=$1 mpiexec=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
# refused WHAT LOG CODE: a run refused as bad input: exit code 2, one error line in its log.
refused() {
  cat "$2"
  [ "$3" = 2 ] || fail "$1: exit code $3, expected 2"
  [ "$(grep -c 'trident: error' "$2")" = 1 ] || fail "$1: the error is not printed exactly once"
}
"$trident" prepare-data synthetic --out syn.h5 --train "$3" --test 256 --classes 4 --shape 1x16x16 >/dev/null
