#!/usr/bin/env bash
# GPT on one GPU, trident against PyTorch (the "On the GPU" issue's table), in one call: the same
# model (GPT-2 small by default: 12 layers, 12 heads, d_model 768, seq 1024, vocab 50304), micro-
# batch 16, bf16 autocast, AdamW (fused; lr 3e-4, weight decay 0.01), clipping at 1.0, on random
# tokens; PyTorch in eager mode and torch.compile (benchmarks/gpt_reference.py).
# Warm-up steps are excluded; tokens/s is the median of WINDOWS timed windows (trident: its
# metrics.jsonl records, one per window); MFU against 989 TFLOP/s (H100 SXM bf16 dense), FLOPs per
# token 6 N + 12 L T d (N without the embedding tables). Prints a table, writes
# results/gpt_gpu.json.
#   benchmarks/gpt_gpu.sh [BUILD_DIR]
#   env: LAYERS HEADS D_MODEL SEQ VOCAB MICRO WARMUP STEPS WINDOWS DEVICE (cuda) PRECISION (bf16)
#        CUDA_GRAPH (both: a row with run.cuda_graph = true, then one without; true; false)
#        VARIANTS ("NAME:VAR=VALUE ...": a row each, with the graph and that variable set)
#        MODES (eager,compile; empty: trident only) PYTHON (python3) MPIEXEC (mpiexec)
#        PROFILE (a folder: after the timing, a trace of two steps of each implementation there,
#        summarised by benchmarks/profile_summary.py)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
L=${LAYERS:-12} H=${HEADS:-12} D=${D_MODEL:-768} T=${SEQ:-1024} V=${VOCAB:-50304} B=${MICRO:-16}
warmup=${WARMUP:-10} steps=${STEPS:-30} windows=${WINDOWS:-3} device=${DEVICE:-cuda} precision=${PRECISION:-bf16}
modes=${MODES-eager,compile} python=${PYTHON:-python3} mpiexec=${MPIEXEC:-mpiexec}
window=$((steps / windows))
profile=${PROFILE:+$(mkdir -p "$PROFILE" && cd "$PROFILE" && pwd)}
[ $((warmup % window)) = 0 ] || { echo "WARMUP ($warmup) must be a multiple of STEPS / WINDOWS ($window)" >&2; exit 2; }

# Every step reads new tokens (no sample twice): (warmup + steps) x B samples of T + 1 tokens.
"$trident" prepare-data synthetic --tokens $(((warmup + steps) * B * (T + 1) + T + 1)) \
  --test-tokens $((B * (T + 1) + 1)) --vocab "$V" --out tokens.h5 >/dev/null
train_gpt() {  # train_gpt OUTPUT_DIR STEPS [--set KEY=VALUE ...]
local dir=$1 count=$2
shift 2
"$mpiexec" -n 1 "$trident" train /dev/null "$@" --set run.name=gpt_gpu --set run.output_dir="$dir" --set data.path=tokens.h5 \
  --set model.kind=gpt --set model.layers="$L" --set model.heads="$H" --set model.d_model="$D" --set model.seq_len="$T" \
  --set model.vocab="$V" --set run.device="$device" --set optim.precision="$precision" --set optim.lr=3e-4 \
  --set optim.weight_decay=0.01 --set optim.clip_grad_norm=1.0 --set optim.global_batch="$B" \
  --set optim.micro_batch="$B" --set run.max_steps="$count" --set run.log_every="$window" \
  --set run.peak_tflops=989 --set data.prefetch=4 --set checkpoint.keep_last=1 >"$dir.log" 2>&1 \
  || { tail -20 "$dir.log"; echo "trident train failed ($dir.log)" >&2; return 1; }
}
# trident's windows after the warm-up in run folder $1: samples/s x T tokens; the median; row name $2.
trident_row() {
python3 - "$T" "$warmup" "$1" "$2" <<'PY'
import json, sys
seq, warmup, run, impl = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
report = json.load(open(run + "/report.json"))
rates = [r["samples_per_s"] * seq for r in map(json.loads, open(run + "/metrics.jsonl")) if r["step"] > warmup]
tokens = sorted(rates)[len(rates) // 2]
per_token = report["throughput"]["tflops"] / report["throughput"]["tokens_per_s"] if report["throughput"]["tokens_per_s"] else 0
print(json.dumps({"impl": impl, "torch": report["torch_version"], "device": report["layout"]["device"],
                  "device_name": report["layout"].get("device_name"), "parameters": report["parameters"],
                  "tokens_per_s": tokens, "window_tokens_per_s": rates, "tflops": tokens * per_token,
                  "mfu": tokens * per_token / 989.0, "peak_tflops": 989.0,
                  "peak_device_bytes": report["memory"].get("peak_device_bytes")}))
PY
}
# CUDA_GRAPH: both (default: run.cuda_graph = true, then false, each its own row) | true | false.
rows=()
case ${CUDA_GRAPH:-both} in
  both) graph_settings=(true false) ;;
  true | false) graph_settings=("$CUDA_GRAPH") ;;
  *) echo "CUDA_GRAPH must be both, true or false" >&2; exit 2 ;;
esac
for graph in "${graph_settings[@]}"; do
  impl=trident
  [ "$graph" = true ] && impl="trident (run.cuda_graph)"
  # A failed graph run leaves its row out and the others still run (CUDA_GRAPH=both).
  if train_gpt "run_graph_$graph" $((warmup + steps)) --set run.cuda_graph="$graph"; then
    rows+=("$(trident_row "run_graph_$graph" "$impl")")
  elif [ "$graph" = false ] || [ ${#graph_settings[@]} = 1 ]; then
    exit 1
  fi
done
# VARIANTS: more trident rows, each "NAME:VAR=VALUE[,VAR=VALUE...]" (space-separated), run with
# run.cuda_graph = true and those variables set, e.g. VARIANTS="adamw_kernel:TRIDENT_ADAMW_KERNEL=1":
# a change behind a variable measured against the default in the same call. A failed one is left
# out. The run's "cublaslt candidate" lines (TRIDENT_LT_FASTEST=1) are printed.
for variant in ${VARIANTS:-}; do
  name=${variant%%:*} setting=${variant#*:}
  IFS=, read -ra settings <<<"$setting"
  for one in "${settings[@]}"; do
    [ "$name" != "$variant" ] && [[ $one == *=* ]] || { echo "VARIANTS: '$variant' is not NAME:VAR=VALUE[,VAR=VALUE...]" >&2; exit 2; }
  done
  if (export "${settings[@]}" && train_gpt "run_$name" $((warmup + steps)) --set run.cuda_graph=true); then
    rows+=("$(trident_row "run_$name" "trident (run.cuda_graph, $name)")")
  fi
  grep -h "cublaslt candidate" "run_$name.log" || true
done
if [ -n "$modes" ]; then
  while IFS= read -r line; do rows+=("$line"); done < <("$python" "$here/gpt_reference.py" --layers "$L" --heads "$H" \
    --d-model "$D" --seq-len "$T" --vocab "$V" --micro-batch "$B" --steps "$steps" --warmup "$warmup" \
    --windows "$windows" --precision "$precision" --modes "$modes" ${profile:+--profile "$profile"})
fi
if [ -n "$profile" ]; then  # trident's trace: its own short run, so that tracing slows no timed step
  TRIDENT_PROFILE_STEPS=$((warmup)):2 train_gpt profiled $((warmup + 2)) || exit 1
  cp profiled/profile_rank0.json "$profile/profile_trident.json"
  # With the graph: the GPU's idle time left between replays.
  if [ "${CUDA_GRAPH:-both}" != false ] &&
    TRIDENT_PROFILE_STEPS=$((warmup)):2 train_gpt profiled_graph $((warmup + 2)) --set run.cuda_graph=true; then
    cp profiled_graph/profile_rank0.json "$profile/profile_trident_graph.json"
  fi
fi
printf '%s\n' "${rows[@]}" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
print("\nGPT L%s: micro-batch %s, %s, median of %s windows" % (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]))
print("| implementation | tokens/s | TFLOP/s | MFU | peak device memory | trident / this |")
print("|---|---:|---:|---:|---:|---:|")
base = rows[0]["tokens_per_s"]
for r in rows:
    peak = "%.1f GiB" % (r["peak_device_bytes"] / 2**30) if r.get("peak_device_bytes") else "-"
    print("| %s | %.0f | %.1f | %.1f%% | %s | %.2fx |" % (r["impl"], r["tokens_per_s"], r["tflops"], 100 * r["mfu"],
          peak, base / r["tokens_per_s"]))
json.dump(rows, open(sys.argv[5], "w"), indent=2)
' "$L" "$B" "$precision" "$windows" "$out/gpt_gpu.json"
echo "(JSON: $out/gpt_gpu.json)"
