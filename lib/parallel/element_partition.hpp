#pragma once
// ZeRO's partition of the flat parameter buffer [0, numel): dp contiguous ranges whose sizes
// differ by at most one element (no padding anywhere). A bucket or layer [begin, end) of the
// buffer is then reduced and gathered with the uneven collectives, rank r taking its
// intersection with range(r).
#include <cstdint>
#include <vector>

#include "data/sampler.hpp"

namespace trident::parallel {

class ElementPartition {
 public:
  ElementPartition(int64_t numel, int dp) : numel_(numel), dp_(dp) {}
  int dp() const { return dp_; }
  int64_t numel() const { return numel_; }
  data::Range range(int rank) const { return data::even_share(numel_, rank, dp_); }
  // [begin, end) intersected with range(rank), in buffer coordinates (empty: {range.begin, range.begin}).
  data::Range intersect(int64_t begin, int64_t end, int rank) const;
  // Elements of [begin, end) each rank owns: the counts of reduce_scatter_sum_v / all_gather_v.
  std::vector<int64_t> counts(int64_t begin, int64_t end) const;

 private:
  int64_t numel_;
  int dp_;
};

}  // namespace trident::parallel
