#!/usr/bin/env bash
# resume_from_tmp.sh TRIDENT MPIEXEC: --resume naming an unfinished save (step_N.h5.tmp, whole
# but not committed: the user salvages it) resumes from it and leaves it in place. The run
# removed it at start-up with the unfinished saves an earlier run left, so the file the user
# named was gone.
source "$(dirname "$0")/common.sh" "$1" "$2" 512
args=(--set data.path=syn.h5 --set model.kind=mlp --set run.threads=1 --set optim.global_batch=32
      --set checkpoint.every_steps=2 --set run.output_dir=runs/r)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=4 >first.log 2>&1 || fail "$(tail -3 first.log)"
salvaged=runs/r/checkpoints/step_0000004.h5.tmp
mv runs/r/checkpoints/step_0000004.h5 "$salvaged"
printf 'step_0000002.h5\n' >runs/r/checkpoints/latest
sum=$(md5sum <"$salvaged")
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set run.max_steps=6 --resume "$salvaged" >second.log 2>&1 ||
  fail "--resume $salvaged: $(grep -m1 error second.log)"
grep -q "resuming from $salvaged" second.log || fail "not resumed from $salvaged: $(grep -i resum second.log)"
[ -f "$salvaged" ] || fail "the file the run resumed from was removed"
[ "$(md5sum <"$salvaged")" = "$sum" ] || fail "the file the run resumed from was changed"
[ "$(cat runs/r/checkpoints/latest)" = step_0000006.h5 ] || fail "did not train on to step 6"
echo PASS
