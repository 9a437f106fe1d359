#include "comm/backend.hpp"

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"

// The only #if on the NCCL backend: CMake defines TRIDENT_HAVE_NCCL=1 for this file alone when
// TRIDENT_CUDA is on (and then adds comm/nccl_communicator.cpp to the library).
#if TRIDENT_HAVE_NCCL
#include "comm/nccl_communicator.hpp"

namespace trident::comm {
namespace {
constexpr bool kNcclBuilt = true;
std::unique_ptr<Communicator> make_nccl(MPI_Comm comm, double fail_timeout_s) {
  return std::make_unique<NcclCommunicator>(comm, fail_timeout_s);
}
std::string nccl_library_version() { return NcclCommunicator::library_version(); }
}  // namespace
}  // namespace trident::comm
#else
namespace trident::comm {
namespace {
constexpr bool kNcclBuilt = false;
std::unique_ptr<Communicator> make_nccl(MPI_Comm, double) { return nullptr; }
std::string nccl_library_version() { return ""; }
}  // namespace
}  // namespace trident::comm
#endif

namespace trident::comm {

bool nccl_backend_built() { return kNcclBuilt; }

std::string nccl_version() { return nccl_library_version(); }

std::unique_ptr<Communicator> make_communicator(const std::string& backend, MPI_Comm comm, double fail_timeout_s) {
  if (backend == "mpi") return std::make_unique<MpiCommunicator>(comm);
  if (backend == "nccl") {
    if (!kNcclBuilt)
      fatal_all("parallel.backend = nccl, but this trident was built without the NCCL backend (CMake found no "
                "CUDA LibTorch and NCCL; see the 'trident: CUDA/NCCL backend' line of its configure output)");
    return make_nccl(comm, fail_timeout_s);
  }
  fatal_all("parallel.backend: '" + backend + "' is not a communicator backend (mpi | nccl)");
}

}  // namespace trident::comm
