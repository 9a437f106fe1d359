#!/usr/bin/env bash
# shipped_decks.sh TRIDENT MPIEXEC SOURCE_DIR: the decks in inputs/ as shipped (no batch
# overrides) are valid at 1, 2, 4 and 8 ranks -- the pipeline deck at 2, 4 and 8 -- and train
# at 1, 2 and 4 (a few steps: run.max_steps is the only override); micro_batch = auto keeps the
# global batch at 128 and picks the micro-batch each rank count allows.
source "$(dirname "$0")/common.sh" "$1" "$2" 256
inputs=$3/inputs
mkdir -p data
"$trident" prepare-data fashion-mnist --out data/fashion_mnist.h5 >/dev/null
check() {  # DECK RANKS EXPECTED_BATCH_LINE: plan at RANKS (and train, RANKS <= 4)
  local deck=$1 n=$2 expected=$3 out
  out=$("$trident" plan "$inputs/$deck.ini" --world "$n") || fail "$deck: plan --world $n: exit $?: $out"
  grep -qxF "batch: $expected" <<<"$out" || fail "$deck at $n ranks: plan says '$(grep '^batch' <<<"$out")', expected '$expected'"
  [ "$n" -le 4 ] || { echo "$deck: $n ranks: $(grep '^batch' <<<"$out") (plan)"; return 0; }
  "$mpiexec" -n "$n" "$trident" train "$inputs/$deck.ini" --set run.max_steps=3 --set run.log_every=1 \
    --set "run.output_dir=runs/$deck-$n" >"$deck-$n.log" 2>&1 || fail "$deck at $n ranks: exit $?: $(tail -3 "$deck-$n.log")"
  grep -q "step 3/3" "$deck-$n.log" || fail "$deck at $n ranks did not train"
  echo "$deck: $n ranks: $(grep -o 'global batch .*' "$deck-$n.log") (trained 3 steps)"
}
check fashion_mnist_ddp 1 "global 128 = micro 64 (auto) x dp 1 x accumulation 2"
check fashion_mnist_ddp 2 "global 128 = micro 64 (auto) x dp 2 x accumulation 1"
check fashion_mnist_ddp 4 "global 128 = micro 32 (auto) x dp 4 x accumulation 1"
check fashion_mnist_ddp 8 "global 128 = micro 16 (auto) x dp 8 x accumulation 1"
check fashion_mnist_hybrid 2 "global 128 = micro 16 (auto) x dp 1 x accumulation 8"
check fashion_mnist_hybrid 4 "global 128 = micro 16 (auto) x dp 2 x accumulation 4"
check fashion_mnist_hybrid 8 "global 128 = micro 16 (auto) x dp 4 x accumulation 2"
for n in 1 2 4 8; do
  out=$("$trident" plan "$inputs/gpt_fortunes.ini" --world "$n" --set data.path=none.h5) || fail "gpt_fortunes: plan --world $n"
  echo "gpt_fortunes: $n ranks: $(grep '^batch' <<<"$out") (plan)"
done
echo PASS
