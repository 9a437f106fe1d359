#!/usr/bin/env python3
"""Where a traced step's GPU time goes: reads Chrome traces written by LibTorch's Kineto profiler
(trident's TRIDENT_PROFILE_STEPS, or gpt_reference.py --profile) and prints, per trace, the
device's busy time against the traced span (the rest is the GPU waiting for the host), the
kernels by kind, the costliest kernels, and the costliest (operator, kernel) pairs (the innermost
operator that launched each kernel: which layer's backward a reduction belongs to), all per step.

  benchmarks/profile_summary.py --steps 2 trace.json[.gz] ...
"""
import argparse
import bisect
import collections
import gzip
import json
import re

KINDS = [  # first match wins
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matmul", r"gemm|sm90_xmma|cutlass|nvjet|cublas|xmma|wgmma"),
    ("optimizer", r"adam|sgd|multi_tensor|foreach"),
    ("cross-entropy / softmax", r"softmax|log_softmax|nll|cross_entropy|logsumexp"),  # trident's kernels too
    ("layernorm", r"layer_norm|layernorm|LayerNorm"),
    ("gelu", r"gelu|GeluCUDA"),
    ("reduction (norms, sums)", r"reduce_kernel|norm_kernel|Reduce"),
    ("copy / cast", r"copy|Memcpy|memcpy|cast|CatArray|to_copy"),
    ("fill / memset", r"fill|Memset|memset|zero"),
    ("embedding", r"embedding|index|gather|scatter"),
    ("elementwise", r"elementwise|vectorized|unrolled|triton"),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def launching_operators(events):
    """Kernel correlation id -> the two innermost CPU operators enclosing its launch (the runtime
    or driver call with that correlation id, on the launching thread), outer > inner."""
    ops = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            ops[e.get("tid")].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e["name"]))
    starts = {}
    for tid, spans in ops.items():
        spans.sort()
        starts[tid] = [a for a, _, _ in spans]
    found = {}
    for e in events:
        if e.get("cat") not in ("cuda_runtime", "cuda_driver") or "correlation" not in e.get("args", {}):
            continue
        ts, tid = float(e["ts"]), e.get("tid")
        spans, names = ops.get(tid, []), []
        i = bisect.bisect_right(starts.get(tid, []), ts) - 1
        while i >= 0 and len(names) < 2:  # the latest-starting spans that still enclose ts
            if spans[i][1] >= ts:
                names.insert(0, spans[i][2])
            i -= 1
        if names:
            found[e["args"]["correlation"]] = " > ".join(names)
    return found


def summarize(path, steps, top):
    events = load(path)
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        print(f"{path}: no GPU events")
        return
    intervals = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in gpu)
    span = intervals[-1][1] - intervals[0][0]
    busy, cur_start, cur_end = 0.0, *intervals[0]
    for start, end in intervals[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    kernels = [e for e in gpu if e.get("cat") == "kernel"]
    launches = len(kernels) / steps
    by_kind, by_name, count = collections.Counter(), collections.Counter(), collections.Counter()
    for e in gpu:
        by_kind[kind_of(e["name"])] += float(e.get("dur", 0))
        by_name[e["name"]] += float(e.get("dur", 0))
        count[e["name"]] += 1
    print(f"\n== {path}")
    print(f"per step: span {span / steps / 1e3:.2f} ms, GPU busy {busy / steps / 1e3:.2f} ms "
          f"({100 * busy / span:.1f}%), {launches:.0f} kernels")
    print("| kind | ms per step | share of busy |")
    print("|---|---:|---:|")
    for kind, us in by_kind.most_common():
        print(f"| {kind} | {us / steps / 1e3:.2f} | {100 * us / busy:.1f}% |")
    print(f"| kernel (top {top}) | ms per step | calls per step |")
    print("|---|---:|---:|")
    for name, us in by_name.most_common(top):
        print(f"| {name[:110]} | {us / steps / 1e3:.3f} | {count[name] / steps:.0f} |")
    operator_of = launching_operators(events)
    by_pair, pair_count = collections.Counter(), collections.Counter()
    for e in kernels:
        pair = (operator_of.get(e.get("args", {}).get("correlation"), "(none seen)"), e["name"])
        by_pair[pair] += float(e.get("dur", 0))
        pair_count[pair] += 1
    print(f"| launching operator > kernel (top {top}) | ms per step | calls per step |")
    print("|---|---:|---:|")
    for (op, name), us in by_pair.most_common(top):
        print(f"| {op[:90]} > {name[:60]} | {us / steps / 1e3:.3f} | {pair_count[(op, name)] / steps:.0f} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("traces", nargs="+")
    p.add_argument("--steps", type=int, default=1, help="steps each trace covers")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    for path in args.traces:
        summarize(path, args.steps, args.top)


if __name__ == "__main__":
    main()
