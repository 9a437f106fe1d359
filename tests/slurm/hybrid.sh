#!/usr/bin/env bash
# hybrid.sh STATE SOURCE_DIR TRIDENT BUILD_DIR: `sbatch jobs/hybrid.slurm` with no arguments
# (2 nodes x 2 tasks; default deck fashion_mnist_hybrid.ini: 2 pipeline stages x dp 2, ZeRO-1,
# 1F1B over micro-batches of 16, 1 epoch), as ddp_2nodes.sh checks the DDP job.
TEST_NAME=hybrid JOB_SCRIPT=hybrid.slurm DECK_NAME=fashion_mnist_hybrid EXPECT_MICRO=16 EXPECT_STEPS=468 EXPECT_LAYOUT="dp 2 x pp 2" \
  exec "$(dirname "$0")/ddp_2nodes.sh" "$@"
