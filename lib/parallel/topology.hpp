#pragma once
// world = dp x pp. Rank r sits at pipeline stage r / dp and data-parallel index r % dp
// (stage-major, as in Megatron-LM: the ranks of one stage are adjacent, so a stage's
// gradient all-reduce stays inside a node when dp <= ranks per node).
#include <mpi.h>

#include <string>

namespace trident::parallel {

class Topology {
 public:
  // Collective over `world`: splits it into the dp group of this stage and the pp group of
  // this replica.
  Topology(MPI_Comm world, int dp, int pp);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  int world_size() const { return dp_ * pp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int rank() const { return rank_; }
  int stage() const { return rank_ / dp_; }
  int dp_rank() const { return rank_ % dp_; }
  MPI_Comm world() const { return world_; }
  MPI_Comm dp_group() const { return dp_group_; }  // the dp ranks of this stage
  MPI_Comm pp_group() const { return pp_group_; }  // the stages of this replica
  static int rank_of(int stage, int dp_rank, int dp) { return stage * dp + dp_rank; }
  std::string describe() const;

 private:
  MPI_Comm world_;
  int dp_, pp_, rank_ = 0;
  MPI_Comm dp_group_ = MPI_COMM_NULL;
  MPI_Comm pp_group_ = MPI_COMM_NULL;
};

}  // namespace trident::parallel
