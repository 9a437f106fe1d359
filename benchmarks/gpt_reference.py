#!/usr/bin/env python3
"""The PyTorch reference for benchmarks/gpt.sh: the same GPT as trident's model.kind = gpt
(pre-LayerNorm blocks, causal scaled_dot_product_attention, 4d GELU-tanh MLP, untied head,
GPT-2 initialisation) trained with AdamW in bf16 autocast on random tokens, eager and
torch.compile. Prints one JSON object per mode: tokens/s over the timed steps.

  python3 benchmarks/gpt_reference.py --layers 12 --heads 12 --d-model 768 --seq-len 1024 \
      --vocab 50304 --micro-batch 16 --steps 30 --warmup 10 --modes eager,compile
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.attn_out = nn.Linear(d, d)
        self.mlp_norm = nn.LayerNorm(d)
        self.mlp_in = nn.Linear(d, 4 * d)
        self.mlp_out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.attn_out(y)
        return x + self.mlp_out(F.gelu(self.mlp_in(self.mlp_norm(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, heads, d, seq_len, vocab):
        super().__init__()
        self.token = nn.Embedding(vocab, d)
        self.position = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for block in self.blocks:  # the projections into the residual stream, as trident
            for lin in (block.attn_out, block.mlp_out):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, tokens):
        x = self.token(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def run(mode, args):
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Gpt(args.layers, args.heads, args.d_model, args.seq_len, args.vocab).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
    step_fn = model if mode == "eager" else torch.compile(model)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    tokens = torch.randint(args.vocab, (args.micro_batch, args.seq_len + 1), device=device)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(step_fn(x).float().flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    # The timed steps in `windows` equal windows, each ended by a synchronisation; the median
    # window is reported (as benchmarks/gpt_gpu.sh does with trident's metrics.jsonl windows).
    per_window = max(1, args.steps // args.windows)
    rates = []
    for _ in range(args.windows):
        start = time.perf_counter()
        for _ in range(per_window):
            loss = step()
        loss.item()
        if device == "cuda":
            torch.cuda.synchronize()
        rates.append(per_window * args.micro_batch * args.seq_len / (time.perf_counter() - start))
    tokens_per_s = sorted(rates)[len(rates) // 2]
    if args.profile:  # two more steps under the profiler, after the timing (benchmarks/profile_summary.py)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(f"{args.profile}/profile_{mode}.json")
    params = sum(p.numel() for p in model.parameters())
    matmul_params = params - model.token.weight.numel() - model.position.weight.numel()
    flops_per_token = 6 * matmul_params + 12 * args.layers * args.seq_len * args.d_model
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {"impl": "pytorch " + mode, "torch": torch.__version__, "device": device, "parameters": params,
            "tokens_per_s": tokens_per_s, "window_tokens_per_s": rates,
            "tflops": tokens_per_s * flops_per_token / 1e12,
            "mfu": tokens_per_s * flops_per_token / 1e12 / args.peak_tflops, "peak_tflops": args.peak_tflops,
            "peak_device_bytes": peak}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=30, help="timed steps, over all windows")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--windows", type=int, default=3, help="timed windows; the median is reported")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--peak-tflops", type=float, default=989.0, help="H100 SXM bf16 dense")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--profile", default="", help="folder for a Chrome trace of two steps per mode")
    args = p.parse_args()
    for mode in args.modes.split(","):
        print(json.dumps(run(mode, args)), flush=True)


if __name__ == "__main__":
    main()
