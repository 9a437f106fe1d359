#!/usr/bin/env bash
# prepare_same_pid.sh TRIDENT: two prepare-data tasks with the same process id (each the first
# process of its own PID namespace, as in containers; process ids also repeat across nodes)
# write one shared --out at once: both succeed, the file verifies, no temporary file is left.
# Exit 77 (skipped) where this machine cannot make PID namespaces (unshare needs root).
set -eu
trident=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
unshare -pf --mount-proc true 2>/dev/null || { echo "SKIPPED: no PID namespaces here (unshare)"; exit 77; }
task() { unshare -pf --mount-proc sh -c "[ \$\$ = 1 ] && exec '$trident' prepare-data synthetic --out shared.h5 --train 20000 --test 512 --classes 4 --shape 1x28x28" >"task$1.log" 2>&1; }
task 1 & a=$!
task 2 & b=$!
rc_a=0 rc_b=0
wait $a || rc_a=$?
wait $b || rc_b=$?
[ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] || fail "exit codes $rc_a and $rc_b: $(cat task1.log task2.log)"
"$trident" inspect shared.h5 | grep -q "every block of 4 datasets verified" || fail "shared.h5 does not verify"
[ "$(ls -A)" = "$(printf 'shared.h5\ntask1.log\ntask2.log')" ] || fail "left behind: $(ls)"
echo "two tasks of process id 1 wrote shared.h5 at once: both exit 0, it verifies, nothing else left"
echo PASS
