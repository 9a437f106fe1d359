#include "comm/world.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "comm/progress.hpp"
#include "core/error.hpp"
#include "core/host.hpp"
#include "core/log.hpp"

namespace trident::comm {

MpiSession::MpiSession(int* argc, char*** argv) {
  // MPICH's ring MPI_Allgatherv (its choice for large messages, ZeRO-3's layer gathers) moves each
  // piece in 32 KB chunks, each a hand-off between two ranks: with more ranks than cores, every
  // hand-off waits for a time slice. 16 MB chunks made such gathers two orders of magnitude
  // faster (benchmarks/README.md, "MPICH's ring all-gather"). A value the user exports wins;
  // other MPI libraries ignore the variable.
  ::setenv("MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE", "16777216", 0);
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Errors come back as codes so MPI_CHECK can name rank, host and call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // Who this process is, for every message from here on, set before any thread of trident's starts.
  int rank = 0, length = 0;
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Get_processor_name(name, &length));
  set_identity(rank, std::string(name, static_cast<size_t>(length)));
  log::set_rank(rank);
}

MpiSession::~MpiSession() {
  // HDF5 closes what is still open at exit, after MPI is gone: a parallel file whose close failed
  // (a checkpoint that hit a full disk) would then crash in MPI calls. Close it while MPI lives.
  H5close();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

World World::from(MPI_Comm comm) {
  World w;
  w.comm = comm;
  MPI_CHECK(MPI_Comm_rank(comm, &w.rank));
  MPI_CHECK(MPI_Comm_size(comm, &w.size));
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &len));
  w.host.assign(name, static_cast<size_t>(len));

  MPI_Comm node_comm;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node_comm));
  MPI_CHECK(MPI_Comm_rank(node_comm, &w.local_rank));
  MPI_CHECK(MPI_Comm_size(node_comm, &w.local_size));
  MPI_CHECK(MPI_Comm_free(&node_comm));

  // Nodes are numbered by their lowest rank: the node leaders (local rank 0) in rank order.
  const int leader = w.local_rank == 0 ? 1 : 0;
  std::vector<int> leaders(static_cast<size_t>(w.size));
  MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm));
  std::vector<char> names(static_cast<size_t>(w.size) * MPI_MAX_PROCESSOR_NAME);
  MPI_CHECK(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                          MPI_CHAR, comm));
  w.node_count = 0;
  for (int r = 0; r < w.size; ++r) {
    if (!leaders[static_cast<size_t>(r)]) continue;
    const std::string node(&names[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    w.node_names.push_back(node);
    if (node == w.host) w.node_index = w.node_count;
    ++w.node_count;
  }
  if (comm == MPI_COMM_WORLD) {
    set_identity(w.rank, w.host);
    log::set_rank(w.rank);
  }
  return w;
}

std::vector<unsigned char> gather_on_node(const World& world, const void* mine, size_t bytes) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(world.comm, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node));
  std::vector<unsigned char> all(bytes * static_cast<size_t>(world.local_size));
  MPI_CHECK(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes), MPI_BYTE, node));
  MPI_CHECK(MPI_Comm_free(&node));
  return all;
}

std::string first_error(MPI_Comm comm, const std::string& local_error) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  // The lowest failing rank, and how many failed.
  const int mine = local_error.empty() ? INT_MAX : rank, failing = local_error.empty() ? 0 : 1;
  int first = INT_MAX, failed = 0;
  {
    OpScope op(Op::all_reduce);  // the watchdog sees this rank wait (a checkpoint's, for a rank still writing)
    MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  }
  if (first == INT_MAX) return "";
  MPI_CHECK(MPI_Allreduce(&failing, &failed, 1, MPI_INT, MPI_SUM, comm));
  // Met by some ranks only (a node's own copy of a file, its own disk): which one, so the user
  // knows where to look. (Met by all, the message is the same everywhere; met by rank 0 alone, it
  // is most often a check only rank 0 makes.)
  std::string text = local_error;
  const std::string me = identity_known() ? who() : "rank " + std::to_string(rank) + " on " + host_name();  // before World::from
  if (rank == first && (first != 0 || failed > 1) && failed < size && text.find(me) == std::string::npos)
    text += " (met by " + me + (failed > 1 ? " and others" : "") + ")";
  return broadcast(comm, text, first);
}

uint64_t fingerprint_of(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::string differs_from_most(MPI_Comm comm, const std::string& mine, const std::string& what) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  // Fingerprints made odd so that none is 0, which stands for nothing read.
  const uint64_t own = mine.empty() ? 0 : fingerprint_of(mine) | 1;
  std::vector<uint64_t> all(static_cast<size_t>(size));
  MPI_CHECK(MPI_Allgather(&own, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm));
  std::vector<uint64_t> sorted = all;  // counted by binary search: thousands of ranks do it at once
  std::sort(sorted.begin(), sorted.end());
  const auto holders = [&](int r) {
    const uint64_t h = all[static_cast<size_t>(r)];
    const auto [first, last] = std::equal_range(sorted.begin(), sorted.end(), h);
    return h == 0 ? 0 : static_cast<int>(last - first);
  };
  int reference = 0, most = holders(0);
  for (int r = 1; r < size; ++r)
    if (holders(r) > most) reference = r, most = holders(r);
  const std::string theirs = broadcast(comm, mine, reference);
  if (mine.empty() || theirs.empty() || mine == theirs) return "";
  const int more = most - 1;
  return who() + " reads a different " + what + " than rank " + std::to_string(reference) +
         (more > 0 ? " and " + std::to_string(more) + " more rank" + (more > 1 ? "s" : "") : "") + " (rank " +
         std::to_string(reference) + ": " + theirs + "; here: " + mine + ")";
}

std::string broadcast(MPI_Comm comm, const std::string& text, int root) {
  int length = static_cast<int>(text.size());
  OpScope op(Op::broadcast);
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, root, comm));
  std::string out = text;
  out.resize(static_cast<size_t>(length));
  MPI_CHECK(MPI_Bcast(out.data(), length, MPI_CHAR, root, comm));
  return out;
}

void agree_or_throw(MPI_Comm comm, const std::string& local_error) {
  const std::string message = first_error(comm, local_error);
  if (!message.empty()) throw BadInput(message);
}

}  // namespace trident::comm
