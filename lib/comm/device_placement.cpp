#include "comm/device_placement.hpp"

#include <cctype>

namespace trident::comm {

namespace {

std::string trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

Placement failed(std::string why) {
  Placement p;
  p.error = std::move(why);
  return p;
}

Placement on_cuda(int index) {
  Placement p;
  p.cuda_index = index;
  p.device = "cuda:" + std::to_string(index);
  return p;
}

std::string node_of(const PlacementQuery& q) { return q.host.empty() ? std::string("this node") : "node " + q.host; }

}  // namespace

std::vector<std::string> parse_cuda_visible_devices(const std::string& value) {
  std::vector<std::string> devices;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = value.find(',', start);
    const std::string entry = trim(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    // The CUDA runtime stops at the first entry it cannot use; "-1" is the usual way to hide all.
    if (entry.empty() || entry[0] == '-') break;
    devices.push_back(entry);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return devices;
}

std::string describe_cuda_visible_devices(const std::optional<std::string>& value) {
  return value ? "CUDA_VISIBLE_DEVICES=" + *value : std::string("CUDA_VISIBLE_DEVICES unset");
}

Placement place_device(const PlacementQuery& q) {
  if (q.requested != "auto" && q.requested != "cpu" && q.requested != "cuda")
    return failed("run.device = '" + q.requested + "' is not one of auto | cpu | cuda");
  if (q.local_size < 1 || q.local_rank < 0 || q.local_rank >= q.local_size || q.visible_devices < 0)
    return failed("device placement: local rank " + std::to_string(q.local_rank) + " of " +
                  std::to_string(q.local_size) + " ranks, " + std::to_string(q.visible_devices) +
                  " visible devices is not a valid layout");
  if (q.requested == "cpu") return Placement{};

  const std::string visible = describe_cuda_visible_devices(q.cuda_visible_devices);
  if (q.visible_devices == 0) {
    if (q.requested == "auto") return Placement{};
    return failed("run.device = cuda, but local rank " + std::to_string(q.local_rank) + " on " + node_of(q) +
                  " sees no CUDA device (" + visible + ")");
  }
  // One device: either SLURM gave each task its own (--gpus-per-task=1, CUDA_VISIBLE_DEVICES
  // differs per task) or the node has one GPU. Ranks that truly share it are refused by NCCL
  // ("Duplicate GPU detected") when their communicator is created.
  if (q.visible_devices == 1) return on_cuda(0);
  if (q.visible_devices >= q.local_size) return on_cuda(q.local_rank);
  // Several devices but fewer than ranks: some ranks would share a GPU, which NCCL refuses and
  // which would halve each rank's memory; a round-robin fallback would hide a job-script mistake.
  return failed(std::to_string(q.local_size) + " ranks on " + node_of(q) + " share " +
                std::to_string(q.visible_devices) + " visible GPUs (" + visible +
                "): run one rank per GPU (at most " + std::to_string(q.visible_devices) +
                " ranks per node, or srun --gpus-per-task=1)");
}

std::string ranks_sharing_a_gpu(const std::vector<std::string>& gpu_ids, const std::vector<int>& world_ranks,
                                const std::string& host) {
  for (size_t j = 0; j < gpu_ids.size(); ++j)
    for (size_t i = 0; i < j; ++i)
      if (!gpu_ids[i].empty() && gpu_ids[i] == gpu_ids[j])
        return "ranks " + std::to_string(world_ranks.at(i)) + " and " + std::to_string(world_ranks.at(j)) + " on " +
               (host.empty() ? std::string("one node") : host) + " share one GPU (" + gpu_ids[i] + ")";
  return "";
}

BackendChoice choose_backend(const std::string& requested, bool on_cuda, const std::string& sharing) {
  BackendChoice c;
  if (requested != "auto") {
    c.backend = requested;
    if (requested == "nccl" && on_cuda && !sharing.empty())
      c.error = "parallel.backend = nccl: " + sharing +
                ", which NCCL refuses; run one rank per GPU (srun --gpus-per-task=1, or at most as many ranks per "
                "node as GPUs), or set parallel.backend = mpi to stage through host memory";
    return c;
  }
  c.backend = on_cuda && sharing.empty() ? "nccl" : "mpi";
  if (on_cuda && !sharing.empty())
    c.note = "parallel.backend = auto: " + sharing +
             "; NCCL needs one GPU per rank, so the MPI backend stages the collectives through host memory (slower: "
             "run one rank per GPU for NCCL)";
  return c;
}

}  // namespace trident::comm
