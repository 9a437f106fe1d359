#!/usr/bin/env bash
# deck_encodings.sh TRIDENT MPIEXEC: a deck saved with a UTF-8 byte-order mark and CRLF line
# endings (as Windows editors write it) trains like the same deck in plain LF; the resolved
# deck the run prints has the deck's values.
source "$(dirname "$0")/common.sh" "$1" "$2" 1024
deck='[run]\r\nname = windows\r\nmax_steps = 4\r\nlog_every = 2\r\nthreads = 1\r\n[data]\r\npath = syn.h5\r\nprefetch = 0\r\n[model]\r\nkind = mlp\r\n[optim]\r\nglobal_batch = 32\r\nlr = 0.003\r\n'
printf '\xEF\xBB\xBF'"$deck" >bom_crlf.ini
printf "${deck//\\r/}" >plain.ini
head -c 3 bom_crlf.ini | od -An -tx1 | grep -q "ef bb bf" || fail "the test deck has no byte-order mark"
"$mpiexec" -n 1 "$trident" train bom_crlf.ini >bom.log 2>&1 || fail "the BOM + CRLF deck: exit $? ($(tail -3 bom.log))"
"$mpiexec" -n 1 "$trident" train plain.ini --set run.output_dir=runs/plain >plain.log 2>&1 || fail "the plain deck: exit $?"
grep -q "lr  *= 0.003" bom.log || fail "the BOM deck's lr was not read"
loss() { grep -o '"loss":[0-9.e+-]*' "$1" | tail -1; }
[ "$(loss runs/windows/metrics.jsonl)" = "$(loss runs/plain/metrics.jsonl)" ] \
  || fail "the two decks trained differently: $(loss runs/windows/metrics.jsonl) vs $(loss runs/plain/metrics.jsonl)"
echo "BOM + CRLF deck trained: $(loss runs/windows/metrics.jsonl) at step 4, as the LF deck"
echo PASS
