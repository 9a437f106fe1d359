#pragma once
// Gradient buckets: contiguous runs of parameters (so a bucket is one slice of the flat
// gradient buffer, reduced in place, no copies). Built from the last parameter backwards,
// because backward produces gradients roughly in reverse order: bucket 0 is ready first.
#include <cstdint>
#include <vector>

namespace trident::parallel {

struct Bucket {
  int64_t first_param = 0, end_param = 0;  // parameters [first_param, end_param)
  int64_t offset = 0, numel = 0;           // elements of the flat buffer
};

// `numels[i]`: elements of parameter i, laid out in order in the flat buffer. A bucket closes
// before it would exceed `bucket_bytes`; a parameter larger than that gets a bucket alone.
std::vector<Bucket> assign_buckets(const std::vector<int64_t>& numels, int64_t element_bytes, int64_t bucket_bytes);

}  // namespace trident::parallel
