#!/usr/bin/env bash
# resume_deck_changes.sh TRIDENT MPIEXEC: deck keys changed on resume that the tensor checks cannot
# judge.
#   momentum  SGD resumed with momentum from a checkpoint written without it (optim.momentum 0
#             keeps no buffer) trains on, its buffer starting at zero as a fresh run's, and the log
#             says so. It was refused as "tensor /optim/momentum_buffer/... is missing (another
#             model?)", naming neither optim.momentum nor the changed keys.
#   heads     a gpt resumed with another model.heads (every tensor the same shape) is refused,
#             naming the key (exit 2, nothing written): it trained another model to exit 0. With
#             model.d_model changed too, the tensor check refuses it, naming both keys (the heads
#             check ran first and named heads alone).
source "$(dirname "$0")/common.sh" "$1" "$2" 512
args=(--set data.path=syn.h5 --set model.kind=mlp --set run.threads=1 --set optim.global_batch=32 --set optim.name=sgd
      --set optim.lr=0.05 --set checkpoint.every_steps=4)
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set optim.momentum=0 --set run.max_steps=4 \
  --set run.output_dir=runs/plain >plain.log 2>&1 || fail "momentum 0: $(tail -3 plain.log)"
"$trident" inspect runs/plain/checkpoints/step_0000004.h5 | grep -q momentum_buffer && fail "momentum 0 wrote a buffer"
"$mpiexec" -n 2 "$trident" train /dev/null "${args[@]}" --set optim.momentum=0.9 --set run.max_steps=8 \
  --set run.output_dir=runs/momentum --resume runs/plain/checkpoints/step_0000004.h5 >momentum.log 2>&1 ||
  fail "resumed with momentum 0.9: $(grep -m1 error momentum.log)"
grep -q "deck keys changed since the checkpoint was written: .*optim.momentum 0 -> 0.9" momentum.log ||
  fail "the log does not list optim.momentum: $(grep 'deck keys' momentum.log)"
grep -q "SGD's momentum buffer, which the file does not hold, starts at zero" momentum.log ||
  fail "the log does not say the buffer starts at zero: $(grep 'deck keys' momentum.log)"
"$trident" inspect runs/momentum/checkpoints/step_0000008.h5 | grep -q "every block verified" || fail "step 8 does not verify"
"$trident" inspect runs/momentum/checkpoints/step_0000008.h5 | grep -q "/optim/momentum_buffer/fc1" ||
  fail "step 8 holds no momentum buffer"

"$trident" prepare-data synthetic --tokens 20000 --test-tokens 2000 --vocab 64 --out tokens.h5 >/dev/null
gpt=(--set data.path=tokens.h5 --set model.kind=gpt --set model.layers=1 --set model.d_model=16 --set model.seq_len=16
     --set run.threads=1 --set optim.global_batch=8 --set run.max_steps=2 --set checkpoint.every_steps=2)
"$mpiexec" -n 1 "$trident" train /dev/null "${gpt[@]}" --set model.heads=2 --set run.output_dir=runs/gpt \
  >gpt.log 2>&1 || fail "gpt: $(tail -3 gpt.log)"
set +e
"$mpiexec" -n 1 "$trident" train /dev/null "${gpt[@]}" --set model.heads=4 --set run.max_steps=4 \
  --set run.output_dir=runs/heads --resume runs/gpt/checkpoints/step_0000002.h5 >heads.log 2>&1
rc=$?
set -e
refused heads heads.log $rc
grep -q "written with model.heads = 2, this run's is 4" heads.log || fail "heads: the key is not named"
[ ! -e runs/heads ] || fail "heads: the refused run wrote runs/heads"
set +e
"$mpiexec" -n 1 "$trident" train /dev/null "${gpt[@]}" --set model.heads=4 --set model.d_model=32 --set run.max_steps=4 \
  --set run.output_dir=runs/wider --resume runs/gpt/checkpoints/step_0000002.h5 >wider.log 2>&1
rc=$?
set -e
refused wider wider.log $rc
grep -q "model.d_model 16 -> 32" wider.log && grep -q "model.heads 2 -> 4" wider.log ||
  fail "heads and d_model: not both named: $(grep error wider.log)"
[ ! -e runs/wider ] || fail "heads and d_model: the refused run wrote runs/wider"
echo PASS
