#!/usr/bin/env bash
# Installs the Debian 12 packages trident needs to build, test and run; skips what is present.
# Idempotent: a second run installs nothing and takes about a second.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config ccache
  libtorch-dev libopenblas0-openmp          # without OpenBLAS LibTorch uses reference BLAS (12-15x slower)
  mpich libmpich-dev libhdf5-mpich-dev      # MPI and parallel HDF5 built on it
  libboost-program-options-dev libgtest-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  dataset-fashion-mnist                     # the real data set, /usr/share/datasets/fashion-mnist
  fortunes                                  # a real text corpus for the GPT (prepare-data text)
  slurmctld slurmd slurm-client munge       # tests/slurm starts a real 2-node SLURM cluster on this machine
  lmod                                      # tests/slurm/module_load.sh: module load trident
  clang-14 libclang-rt-14-dev               # tests/fuzz: libFuzzer with ASan + UBSan
  python3-pip unzip                         # scripts/fetch-cuda-libtorch.sh: PyPI's torch wheel (CUDA flavour)
  strace                                    # tests/cli/checkpoint_durability.sh: the order of fsyncs and renames
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
