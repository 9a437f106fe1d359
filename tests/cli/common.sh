# Sourced by the CLI test scripts: TRIDENT and MPIEXEC from the arguments, a scratch folder to
# run in (removed at exit), fail(), refused(), train_refused(), and a synthetic dataset syn.h5 of
# TRAIN samples of 1x16x16.
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
# train_refused WHAT REGEX ARGS...: `trident train /dev/null ARGS...` on 2 ranks (log WHAT.log) is
# refused as bad input with a message matching the extended REGEX.
train_refused() {
  local what=$1 regex=$2
  shift 2
  set +e
  "$mpiexec" -n 2 "$trident" train /dev/null "$@" >"$what.log" 2>&1
  local rc=$?
  set -e
  refused "$what" "$what.log" "$rc"
  grep -Eq "$regex" "$what.log" || fail "$what: no message matching /$regex/"
}
"$trident" prepare-data synthetic --out syn.h5 --train "$3" --test 256 --classes 4 --shape 1x16x16 >/dev/null
