// connect(): the first of a Trainer's three construction steps (trainer_state.hpp).
#include <torch/torch.h>

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "comm/backend.hpp"
#include "comm/cuda_runtime.hpp"
#include "comm/device_placement.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/progress.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

namespace {

// The CPUs this process may run on (sched_getaffinity), as a CPU_ALLOC set of `bytes` bytes;
// the set grows until the kernel's mask fits (nodes of more than 1024 CPUs). Empty: unknown.
std::vector<unsigned char> affinity_set() {
  for (size_t cpus = 1024; cpus <= (size_t{1} << 20); cpus *= 2) {
    std::vector<unsigned char> set(CPU_ALLOC_SIZE(cpus), 0);
    if (sched_getaffinity(0, set.size(), reinterpret_cast<cpu_set_t*>(set.data())) == 0) return set;
    if (errno != EINVAL) break;
  }
  return {};
}

// run.threads = 0: the CPUs this rank may run on (its affinity: SLURM's --cpu-bind and
// --cpus-per-task, mpiexec -bind-to, taskset, a container's cpuset), each CPU shared equally
// among the ranks of the node that may run on it: threads = the sum over its CPUs of 1 / (ranks
// on that CPU), at least 1. Ranks with the same set split it; overlapping sets never add up to
// more threads than CPUs. Not the node's core count: a task bound to 1 CPU of 64 would run 64
// threads on it. Collective over the node's ranks.
int threads_per_rank(const config::Deck& deck, const comm::World& world) {
  if (deck.run.threads > 0) return static_cast<int>(deck.run.threads);
  std::vector<unsigned char> mine = affinity_set();
  // Every rank of the node sends sets of one size; an unknown set is every CPU the node has.
  const size_t bytes = mine.empty() ? CPU_ALLOC_SIZE(1024) : mine.size();
  const std::vector<unsigned char> sizes = comm::gather_on_node(world, &bytes, sizeof bytes);
  size_t size = 0;
  for (int r = 0; r < world.local_size; ++r) {
    size_t theirs = 0;
    std::memcpy(&theirs, sizes.data() + sizeof theirs * static_cast<size_t>(r), sizeof theirs);
    size = std::max(size, theirs);
  }
  const size_t cpus = size * 8;
  if (mine.empty()) {
    mine.assign(size, 0);
    const size_t online = std::min<size_t>(cpus, std::max(1u, std::thread::hardware_concurrency()));
    for (size_t c = 0; c < online; ++c) CPU_SET_S(c, size, reinterpret_cast<cpu_set_t*>(mine.data()));
  }
  mine.resize(size, 0);
  const std::vector<unsigned char> all = comm::gather_on_node(world, mine.data(), size);
  auto* my_set = reinterpret_cast<cpu_set_t*>(mine.data());
  double share = 0;
  for (size_t c = 0; c < cpus; ++c) {
    if (!CPU_ISSET_S(c, size, my_set)) continue;
    int ranks_on_it = 0;
    for (int r = 0; r < world.local_size; ++r)
      ranks_on_it += CPU_ISSET_S(c, size, reinterpret_cast<const cpu_set_t*>(all.data() + size * static_cast<size_t>(r))) ? 1 : 0;
    share += 1.0 / std::max(1, ranks_on_it);
  }
  return std::max(1, static_cast<int>(share + 1e-9));
}

// run.device -> this rank's device from the node's ranks and the GPUs it sees (one rank per
// GPU; comm/device_placement.hpp), made current before any CUDA or NCCL call of the run.
void choose_device(const config::Deck& deck, Connection& conn) {
  comm::PlacementQuery query;
  query.requested = deck.run.device;
  query.local_rank = conn.world.local_rank;
  query.local_size = conn.world.local_size;
  query.visible_devices = comm::cuda_visible_devices();
  query.host = conn.world.host;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) query.cuda_visible_devices = visible;
  const comm::Placement placement = comm::place_device(query);
  comm::agree_or_throw(conn.world.comm, placement.ok() ? "" : "run.device: " + placement.error);
  // Every rank on a GPU or none: the backend (auto: nccl or mpi) and the collectives must be the
  // same on every rank. run.device = auto on an allocation whose nodes differ is bad input.
  const auto cuda_ranks =
      static_cast<int>(conn.world_comm->reduce_number(placement.is_cuda() ? 1.0 : 0.0, comm::Reduce::sum));
  comm::agree_or_throw(conn.world.comm,
                       cuda_ranks == 0 || cuda_ranks == conn.world.size
                           ? ""
                           : fmt::format("run.device = {}: {} of the {} ranks see a GPU and the others none ({} "
                                         "on {}: {}); ask for nodes alike, or set run.device = cpu",
                                         deck.run.device, cuda_ranks, conn.world.size,
                                         placement.is_cuda() ? "a GPU" : "none", conn.world.host, placement.device));
  conn.device = placement.device;
  conn.cuda_index = placement.cuda_index;
  if (placement.is_cuda()) {
    comm::cuda_set_device(placement.cuda_index);
    conn.torch_device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(placement.cuda_index));
    // optim.precision = fp32 on a GPU: matmuls and convolutions on TF32 tensor cores (10-bit
    // mantissa inputs, fp32 accumulation), as PyTorch's float32_matmul_precision = "high". The
    // cuBLAS and cuDNN switches only: the CPU's (oneDNN) matmuls stay fp32. Process-wide; the
    // environment's NVIDIA_TF32_OVERRIDE=0 turns it off (tests/gpu does).
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
  }
}

// parallel.backend, where ranks of a node sharing a GPU are found by their GPUs' UUIDs (one
// visible device per rank cannot tell a node with one GPU from SLURM's --gpus-per-task=1).
std::string choose_backend(const config::Deck& deck, const Connection& conn) {
  std::string sharing;
  if (conn.cuda_index >= 0) {
    struct RankGpu {
      int rank = 0;
      char uuid[64] = {};  // NUL-terminated
    } mine;
    mine.rank = conn.world.rank;
    const std::string uuid = comm::cuda_device_uuid(conn.cuda_index);
    std::copy_n(uuid.begin(), std::min(uuid.size(), sizeof mine.uuid - 1), mine.uuid);
    const std::vector<unsigned char> gathered = comm::gather_on_node(conn.world, &mine, sizeof mine);
    std::vector<RankGpu> all(static_cast<size_t>(conn.world.local_size));
    std::memcpy(all.data(), gathered.data(), gathered.size());
    std::vector<std::string> ids;
    std::vector<int> world_ranks;
    for (const RankGpu& r : all) {
      ids.emplace_back(r.uuid);
      world_ranks.push_back(r.rank);
    }
    sharing = comm::ranks_sharing_a_gpu(ids, world_ranks, conn.world.host);
  }
  // Every rank takes the same backend: a sharing node anywhere decides for all. The lowest rank
  // that saw one describes it.
  const int first_sharing = static_cast<int>(
      conn.world_comm->reduce_number(sharing.empty() ? conn.world.size : conn.world.rank, comm::Reduce::min));
  if (first_sharing < conn.world.size) {
    int length = static_cast<int>(sharing.size());
    MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first_sharing, conn.world.comm));
    sharing.resize(static_cast<size_t>(length));
    MPI_CHECK(MPI_Bcast(sharing.data(), length, MPI_CHAR, first_sharing, conn.world.comm));
  }
  const comm::BackendChoice choice = comm::choose_backend(deck.parallel.backend, conn.cuda_index >= 0, sharing);
  comm::agree_or_throw(conn.world.comm, choice.error);
  if (!choice.note.empty()) log::warn("{}", choice.note);
  return choice.backend;
}

}  // namespace

Connection connect(const config::Deck& deck, MPI_Comm comm, bool watched) {
  Connection conn;
  conn.world = comm::World::from(comm);
  conn.world_comm = std::make_unique<comm::MpiCommunicator>(conn.world.comm);
  conn.threads = threads_per_rank(deck, conn.world);
  torch::set_num_threads(conn.threads);
  choose_device(deck, conn);
  conn.topology = std::make_unique<parallel::Topology>(conn.world.comm, parallel::RankGrid::of(deck, conn.world.size));
  // parallel.backend = auto: NCCL for CUDA tensors, MPI for CPU ones and for ranks sharing a GPU.
  const std::string backend = choose_backend(deck, conn);
  // An NCCL wait counts from this rank's kernel's start, whatever its peer is doing: a peer reading
  // its data through a file system's stall (which the watchdog allows 20 x run.fail_timeout_s)
  // ended the job after 1 x. Where the watchdog watches, it judges the peers; NCCL's limit is
  // its file I/O limit, a backstop.
  const double nccl_wait_s = watched ? comm::kFileIoTimeoutFactor * deck.run.fail_timeout_s : deck.run.fail_timeout_s;
  conn.dp_comm = comm::make_communicator(backend, conn.topology->dp_group(), nccl_wait_s);
  // The interleaved schedule sends activations both ways between two ranks (the last rank feeds
  // rank 0's next chunk): NCCL's in-order sends could wait for each other there, so its pipeline
  // traffic goes over MPI (staged through the host) while the replicas' collectives stay on NCCL.
  const std::string pp_backend = deck.parallel.schedule == "interleaved" ? "mpi" : backend;
  if (pp_backend != backend && conn.world.rank == 0)
    log::info("parallel.schedule = interleaved: pipeline sends go over MPI, collectives over {}", backend);
  conn.pp_comm = comm::make_communicator(pp_backend, conn.topology->pp_group(), nccl_wait_s);
  if (pp_backend == "nccl" && conn.topology->pp() > 1)
    conn.pp_gradient_comm = comm::make_communicator(pp_backend, conn.topology->pp_group(), nccl_wait_s);
  return conn;
}

}  // namespace trident::train
