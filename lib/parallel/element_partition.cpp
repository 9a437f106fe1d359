#include "parallel/element_partition.hpp"

#include <algorithm>

namespace trident::parallel {

data::Range ElementPartition::intersect(int64_t begin, int64_t end, int rank) const {
  const auto r = range(rank);
  const int64_t b = std::max(begin, r.begin), e = std::min(end, r.end);
  return b < e ? data::Range{b, e} : data::Range{r.begin, r.begin};  // empty: at the start of the range
}

std::vector<int64_t> ElementPartition::counts(int64_t begin, int64_t end) const {
  std::vector<int64_t> out;
  for (int r = 0; r < dp_; ++r) {
    const auto piece = intersect(begin, end, r);
    out.push_back(piece.end - piece.begin);
  }
  return out;
}

}  // namespace trident::parallel
