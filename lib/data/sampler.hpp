#pragma once
// Which samples each rank trains on. Pure arithmetic, no I/O, identical on every rank.
//
// Epoch e visits the training split in a permutation seeded by (seed, e). Global step s
// (counted from the start of training) takes the next global_batch samples of that order;
// the global batch is cut into micro-batches of micro_batch samples, numbered 0..C-1, and
// dp rank d trains at micro-step m on chunk d * (C / dp) + m. So step s's global batch and its
// micro-batches are the same samples under every dp, and the data cursor is a global sample
// index: cursor = s * global_batch.
#include <cstdint>
#include <vector>

namespace trident::data {

class GlobalSampler {
 public:
  GlobalSampler(int64_t dataset_size, int64_t global_batch, uint64_t seed);

  int64_t dataset_size() const { return size_; }
  int64_t global_batch() const { return global_batch_; }
  int64_t steps_per_epoch() const { return size_ / global_batch_; }  // the tail of an epoch is dropped
  int64_t epoch_of(int64_t step) const { return step / steps_per_epoch(); }
  int64_t cursor_of(int64_t step) const { return step * global_batch_; }

  // Indices of the training split for global step `step`, in training order.
  std::vector<int64_t> global_batch_indices(int64_t step) const;
  // The micro-batch dp rank `dp_rank` (of `dp`) trains on at `micro_step` of `step`.
  std::vector<int64_t> micro_batch_indices(int64_t step, int64_t micro_step, int dp_rank, int dp,
                                           int64_t micro_batch) const;

  // The permutation of epoch `epoch` (Fisher-Yates over a splitmix64 stream: the same on
  // every platform and library version, unlike std::shuffle).
  std::vector<int64_t> permutation(int64_t epoch) const;

 private:
  const std::vector<int64_t>& cached_permutation(int64_t epoch) const;
  int64_t size_, global_batch_;
  uint64_t seed_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

// [begin, end) of `total` items that `part` of `parts` owns (contiguous, sizes differ by <= 1).
struct Range {
  int64_t begin, end;
};
Range even_share(int64_t total, int part, int parts);

}  // namespace trident::data
