#pragma once
// Which device this rank trains on (run.device), decided from numbers alone so the rules are
// unit-tested without a GPU. Torch-free and CUDA-free: the caller asks the CUDA runtime how
// many devices it sees (after CUDA_VISIBLE_DEVICES / SLURM --gpus-per-task restricted them).
#include <optional>
#include <string>
#include <vector>

namespace trident::comm {

struct PlacementQuery {
  std::string requested = "auto";  // run.device: auto | cpu | cuda
  int local_rank = 0;              // rank among the ranks on this node
  int local_size = 1;              // ranks on this node
  int visible_devices = 0;         // CUDA devices this process sees (0 in a CPU-only build)
  std::string host;                // for the message
  std::optional<std::string> cuda_visible_devices;  // the variable's value; nullopt when unset
};

struct Placement {
  std::string device = "cpu";  // "cpu" or "cuda:<index>"
  int cuda_index = -1;         // the CUDA device index, -1 on the CPU
  std::string error;           // non-empty: no device could be chosen; says why and what to do

  bool ok() const { return error.empty(); }
  bool is_cuda() const { return cuda_index >= 0; }
};

// The rules, in order:
//   cpu                                   -> cpu
//   no visible device                     -> cpu for auto; an error for cuda
//   one visible device                    -> cuda:0 whatever the local rank (SLURM
//                                            --gpus-per-task=1 gives each task its own device)
//   visible devices >= ranks on the node  -> cuda:<local rank>
//   1 < visible devices < ranks on node   -> an error naming both numbers (one rank per GPU)
// A requested value other than auto | cpu | cuda, or numbers out of range, are errors too.
Placement place_device(const PlacementQuery& query);

// Which ranks of one node train on the same physical GPU: `gpu_ids[i]` is local rank i's GPU
// (its UUID; "" on the CPU) and `world_ranks[i]` its rank in the job. "" when no two share one;
// else "ranks A and B on <host> share one GPU (<id>)", the first such pair.
std::string ranks_sharing_a_gpu(const std::vector<std::string>& gpu_ids, const std::vector<int>& world_ranks,
                                const std::string& host);

struct BackendChoice {
  std::string backend;  // "mpi" or "nccl"
  std::string note;     // non-empty: why auto did not pick the usual one (for the log)
  std::string error;    // non-empty: the request cannot be met; says why and what to do
};

// parallel.backend for the run: auto is NCCL on GPUs and MPI on CPUs, except where ranks share
// a GPU (`sharing` from ranks_sharing_a_gpu on any node): NCCL refuses that ("Duplicate GPU
// detected"), so auto takes MPI (host staging) and says so, and an explicit nccl is an error.
BackendChoice choose_backend(const std::string& requested, bool on_cuda, const std::string& sharing);

// CUDA_VISIBLE_DEVICES as the CUDA runtime reads it: comma-separated indices or UUIDs
// ("GPU-...", "MIG-..."), blanks ignored; the list ends at the first entry that hides the rest
// (empty, or a negative index such as -1). "" and "-1" mean no device.
std::vector<std::string> parse_cuda_visible_devices(const std::string& value);

// "CUDA_VISIBLE_DEVICES=0,1" or "CUDA_VISIBLE_DEVICES unset", for messages.
std::string describe_cuda_visible_devices(const std::optional<std::string>& value);

}  // namespace trident::comm
