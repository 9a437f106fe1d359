#!/usr/bin/env python3
"""The PyTorch reference for benchmarks/cnn_scaling.sh: trident's model.kind = cnn (two
conv3x3-BN-ReLU-maxpool2 blocks of 32 and 64 channels, a linear head) trained with
DistributedDataParallel over gloo on CPU processes, one thread each, AdamW (lr 1e-3), clipping at
1.0, as trident's default deck. Random 1x28x28 samples in memory, 10 classes. Prints one JSON
object: samples/s, the median of the timed windows (after the warm-up), as cnn_scaling.sh reads
trident's metrics.jsonl.

  python3 benchmarks/cnn_ddp_reference.py --ranks 4 --micro-batch 64 --steps 80 --windows 4
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def cnn():
    blocks = []
    channels = 1
    for out in (32, 64):
        blocks += [nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(), nn.MaxPool2d(2)]
        channels = out
    return nn.Sequential(*blocks, nn.Flatten(), nn.Linear(64 * 7 * 7, 10))


def worker(rank, args, results):
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(cnn())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(args.micro_batch, 1, 28, 28, generator=generator),
                torch.randint(10, (args.micro_batch,), generator=generator)) for _ in range(8)]
    per_window = args.steps // args.windows
    rates = []
    for window in range(args.windows + 1):  # window 0: the warm-up
        dist.barrier()
        start = time.perf_counter()
        for step in range(per_window):
            x, y = batches[step % len(batches)]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        dist.barrier()
        if window > 0:
            rates.append(per_window * args.micro_batch * args.ranks / (time.perf_counter() - start))
    if rank == 0:
        results.put(rates)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--micro-batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=80, help="timed steps, over all windows")
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.spawn(worker, args=(args, results), nprocs=args.ranks, join=True)
    rates = results.get()
    print(json.dumps({"impl": "pytorch ddp (gloo)", "torch": torch.__version__, "ranks": args.ranks,
                      "micro_batch": args.micro_batch, "samples_per_s": sorted(rates)[len(rates) // 2],
                      "window_samples_per_s": rates}), flush=True)


if __name__ == "__main__":
    main()
