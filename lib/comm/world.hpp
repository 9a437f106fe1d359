#pragma once
// The MPI world of one run: who this process is, on which node, among how many.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trident::comm {

// Initialises MPI on construction and finalises it on destruction. MPI_THREAD_MULTIPLE: the
// fail-fast watchdog thread (comm/watchdog.hpp) sends heartbeats while the main thread trains. Works under mpiexec (Hydra) and srun --mpi=pmi2.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

struct World {
  MPI_Comm comm = MPI_COMM_WORLD;  // the ranks of this run (tests use sub-communicators)
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the ranks on this node (MPI_Comm_split_type SHARED)
  int local_size = 1;
  int node_count = 1;
  int node_index = 0;
  std::string host;
  std::vector<std::string> node_names;  // one per node, in node order

  // Collective over `comm`.
  static World from(MPI_Comm comm);
};

// Every rank passes its own verdict (empty = fine); if any rank has one, every rank throws
// BadInput with the lowest failing rank's message (so rank 0 can print it once). Collective.
void agree_or_throw(MPI_Comm comm, const std::string& local_error);
// The `bytes` bytes at `mine` of every rank on this rank's node, in local-rank order (local_size
// x bytes): what the ranks of a node compare (GPUs, CPU sets, memory limits). `bytes` must be
// the same on each. Collective over the node's ranks.
std::vector<unsigned char> gather_on_node(const World& world, const void* mine, size_t bytes);
// `text` as `root` has it, on every rank. Collective.
std::string broadcast(MPI_Comm comm, const std::string& text, int root = 0);
// The same agreement without the throw: "" when no rank has an error. Collective.
std::string first_error(MPI_Comm comm, const std::string& local_error);

// FNV-1a of `text`: what ranks compare as one number (a limit's key, what they read of a file).
uint64_t fingerprint_of(const std::string& text);

// Where every rank must read the same file (`mine`: what this rank read of it, "" for nothing):
// "" when this rank's is what most ranks read, else "<who> reads a different <what> than rank 1
// and 2 more ranks (rank 1: theirs; here: mine)". The reference is rank 0's unless more ranks
// read something else (then the lowest of them), so that a stale copy on rank 0's node is named,
// not every rank that agrees with the others. Collective.
std::string differs_from_most(MPI_Comm comm, const std::string& mine, const std::string& what);

}  // namespace trident::comm
