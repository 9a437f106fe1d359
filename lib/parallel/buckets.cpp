#include "parallel/buckets.hpp"

namespace trident::parallel {

std::vector<Bucket> assign_buckets(const std::vector<int64_t>& numels, int64_t element_bytes, int64_t bucket_bytes) {
  std::vector<int64_t> offsets(numels.size() + 1, 0);
  for (size_t i = 0; i < numels.size(); ++i) offsets[i + 1] = offsets[i] + numels[i];

  std::vector<Bucket> buckets;
  auto end = static_cast<int64_t>(numels.size());
  while (end > 0) {
    int64_t first = end - 1;
    int64_t bytes = numels[static_cast<size_t>(first)] * element_bytes;
    while (first > 0 && bytes + numels[static_cast<size_t>(first - 1)] * element_bytes <= bucket_bytes) {
      --first;
      bytes += numels[static_cast<size_t>(first)] * element_bytes;
    }
    buckets.push_back({first, end, offsets[static_cast<size_t>(first)],
                       offsets[static_cast<size_t>(end)] - offsets[static_cast<size_t>(first)]});
    end = first;
  }
  return buckets;
}

}  // namespace trident::parallel
