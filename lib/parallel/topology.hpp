#pragma once
// The communicator groups of a RankGrid (parallel/plan.hpp: world = dp x pp, stage-major): the
// dp group of this rank's stage and the pp group of its replica.
#include <mpi.h>

#include "parallel/plan.hpp"

namespace trident::parallel {

class Topology {
 public:
  // Collective over `world`, whose size must be grid.world_size().
  Topology(MPI_Comm world, const RankGrid& grid);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  const RankGrid& grid() const { return grid_; }
  int world_size() const { return grid_.world_size(); }
  int dp() const { return grid_.dp; }
  int pp() const { return grid_.pp; }
  int rank() const { return rank_; }
  int stage() const { return grid_.stage_of(rank_); }
  int dp_rank() const { return grid_.dp_rank_of(rank_); }
  MPI_Comm world() const { return world_; }
  MPI_Comm dp_group() const { return dp_group_; }  // the dp ranks of this stage
  MPI_Comm pp_group() const { return pp_group_; }  // the stages of this replica

 private:
  MPI_Comm world_;
  RankGrid grid_;
  int rank_ = 0;
  MPI_Comm dp_group_ = MPI_COMM_NULL;
  MPI_Comm pp_group_ = MPI_COMM_NULL;
};

}  // namespace trident::parallel
