#include "parallel/topology.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident::parallel {

Topology::Topology(MPI_Comm world, const RankGrid& grid) : world_(world), grid_(grid) {
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank_));
  MPI_CHECK(MPI_Comm_size(world, &size));
  if (grid.world_size() != size)
    fatal_all(fmt::format("parallel.dp: dp({}) x pp({}) = {} != world size {}", grid.dp, grid.pp, grid.world_size(), size));
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

}  // namespace trident::parallel
