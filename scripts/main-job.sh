#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install, build, convert Fashion-MNIST to HDF5,
# train the cnn data-parallel on 2 ranks. Writes runs/fashion_mnist_ddp/{report.json,metrics.jsonl,goodput.jsonl}
# and its checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=ci TARGET=trident bash scripts/build.sh
[ -f data/fashion_mnist.h5 ] || build/app/trident prepare-data fashion-mnist --out data/fashion_mnist.h5
mpiexec -n "${NP:-2}" build/app/trident train inputs/fashion_mnist_ddp.ini "$@"
