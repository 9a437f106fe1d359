#!/usr/bin/env bash
# Fetches the LibTorch with CUDA that the GPU machines run -- PyPI's torch 2.11.0 wheel (CUDA 13.0,
# NCCL 2.28.9, cuDNN 9.19) -- for building trident's CUDA flavour on a machine without a GPU, and
# prints the folder to give CMake as CMAKE_PREFIX_PATH (the torch folder itself: a prefix of
# torch/share/cmake would let find_library pick a system LibTorch, e.g. Debian's, before the wheel's).
#
# Once per machine: the wheels are downloaded into a cache outside the repository
# (TRIDENT_CACHE, default ~/.cache/trident; about 0.8 GB of downloads, 1.4 GB unpacked) and a
# second run only prints the path. Nothing is installed into any Python.
#
# What is unpacked, in site-packages layout so that the $ORIGIN/../../nvidia/... RPATH of
# libtorch_cuda.so finds its libraries at link and at run time:
#   torch/{include,lib,share}             LibTorch itself (headers, libraries, CMake config)
#   nvidia/cu13/lib/libcufile.so.0        nvidia-cufile 1.15.1.6      } needed by libtorch_cuda.so
#   nvidia/cusparselt/lib/...             nvidia-cusparselt-cu13 0.8.0 } and absent from the CUDA
#   nvidia/nvshmem/lib/...                nvidia-nvshmem-cu13 3.4.5    } toolkit in /usr/local/cuda
# The rest (cudart, cuBLAS, cuFFT, cuRAND, cuSPARSE, CUPTI, cuDNN, NCCL) comes from the CUDA 13
# toolkit in /usr/local/cuda, at the versions the wheel names (torch's METADATA Requires-Dist).
set -euo pipefail
torch_version=2.11.0
wheels=("torch==$torch_version" "nvidia-cufile==1.15.1.6" "nvidia-cusparselt-cu13==0.8.0" "nvidia-nvshmem-cu13==3.4.5")
cache=${TRIDENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trident}
dest=$cache/torch-$torch_version-cu130
site=$dest/site-packages
if [ -f "$dest/.complete" ]; then
  echo "$site/torch"
  exit 0
fi
python3 -m pip --version >/dev/null 2>&1 || { echo "fetch-cuda-libtorch: needs pip (apt-get install python3-pip)" >&2; exit 1; }
mkdir -p "$cache/wheels"
echo "fetch-cuda-libtorch: downloading ${wheels[*]} into $cache/wheels" >&2
# The wheel of one CPython version (the C++ libraries inside are the same in every one): the
# download does not depend on which python3 runs it.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --dest "$cache/wheels" "${wheels[@]}" >&2
rm -rf "$dest"
mkdir -p "$site"
echo "fetch-cuda-libtorch: unpacking into $site" >&2
unzip -q -o "$cache"/wheels/torch-"$torch_version"-*.whl 'torch/include/*' 'torch/lib/*' 'torch/share/*' -d "$site"
for w in nvidia_cufile nvidia_cusparselt_cu13 nvidia_nvshmem_cu13; do
  unzip -q -o "$cache"/wheels/"$w"-*.whl 'nvidia/*' -d "$site"
done
rm -f "$site"/torch/lib/libtorch_python.so  # Python bindings: not for a C++ program
touch "$dest/.complete"
echo "$site/torch"
