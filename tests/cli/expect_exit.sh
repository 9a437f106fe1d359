#!/usr/bin/env bash
# expect_exit.sh CODE REGEX COMMAND...
# Runs COMMAND in a new empty folder. Passes when it exits with CODE, its output matches the
# extended regex REGEX, "trident: error" is printed at most once (rank 0 only), and, when CODE
# is 2 (bad input), nothing was written in the folder.
set -u
code=$1 regex=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$(cd "$work" && "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" = "$code" ] || fail "exit code $rc, expected $code"
grep -Eq -- "$regex" <<<"$out" || fail "output does not match /$regex/"
count=$(grep -c 'trident: error' <<<"$out")
[ "$count" -le 1 ] || fail "the error was printed $count times, expected once"
if [ "$code" = 2 ] && [ -n "$(ls -A "$work")" ]; then fail "bad input, yet files were written: $(ls -A "$work")"; fi
echo PASS
