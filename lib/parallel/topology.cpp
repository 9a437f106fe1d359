#include "parallel/topology.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident::parallel {

Topology::Topology(MPI_Comm world, int dp, int pp) : world_(world), dp_(dp), pp_(pp) {
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank_));
  MPI_CHECK(MPI_Comm_size(world, &size));
  if (dp * pp != size)
    fatal_all(fmt::format("parallel.dp: dp({}) x pp({}) = {} != world size {}", dp, pp, dp * pp, size));
  MPI_CHECK(MPI_Comm_split(world, stage(), dp_rank(), &dp_group_));
  MPI_CHECK(MPI_Comm_split(world, dp_rank(), stage(), &pp_group_));
}

Topology::~Topology() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (dp_group_ != MPI_COMM_NULL) MPI_Comm_free(&dp_group_);
  if (pp_group_ != MPI_COMM_NULL) MPI_Comm_free(&pp_group_);
}

std::string Topology::describe() const {
  return fmt::format("world {} = dp {} x pp {}; rank r -> stage r / {}, dp rank r % {}", world_size(), dp_, pp_, dp_,
                     dp_);
}

}  // namespace trident::parallel
