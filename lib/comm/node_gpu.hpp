#pragma once
// The GPU of this node that a run's first rank would use, as `trident plan` names it beside its
// device-memory estimate, asked of the NVIDIA driver itself (no LibTorch, no CUDA runtime: plan
// runs in `trident`, on a login node as well as in a job). One file per build (CMake picks it):
// comm/node_gpu.cpp in CUDA builds, comm/node_gpu_none.cpp in CPU builds, which can train on no
// GPU and so name none.
#include <cstdint>
#include <optional>
#include <string>

namespace trident::comm {

struct NodeGpu {
  std::string name;         // "NVIDIA H100 80GB HBM3"
  int64_t total_bytes = 0;  // its memory in all
};

// The first device CUDA_VISIBLE_DEVICES leaves visible; nullopt where there is no driver (a login
// node), no visible device, or the driver answers with an error.
std::optional<NodeGpu> first_visible_gpu();

}  // namespace trident::comm
