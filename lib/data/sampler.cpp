#include "data/sampler.hpp"

#include <algorithm>
#include <stdexcept>

namespace trident::data {

namespace {
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

GlobalSampler::GlobalSampler(int64_t dataset_size, int64_t global_batch, uint64_t seed)
    : size_(dataset_size), global_batch_(global_batch), seed_(seed) {
  if (global_batch <= 0 || dataset_size < global_batch)
    throw std::invalid_argument("GlobalSampler: dataset smaller than one global batch");
}

std::vector<int64_t> GlobalSampler::permutation(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = i;
  uint64_t state = seed_ * 0x100000001B3ull + static_cast<uint64_t>(epoch) + 1;
  for (int64_t i = size_ - 1; i > 0; --i) {
    // Modulo bias is below n / 2^64: negligible for any data set that fits on disk.
    const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

const std::vector<int64_t>& GlobalSampler::cached_permutation(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_ = permutation(epoch);
    cached_epoch_ = epoch;
  }
  return cached_;
}

std::vector<int64_t> GlobalSampler::global_batch_indices(int64_t step) const {
  const auto& order = cached_permutation(epoch_of(step));
  const int64_t first = (step % steps_per_epoch()) * global_batch_;
  return {order.begin() + first, order.begin() + first + global_batch_};
}

std::vector<int64_t> GlobalSampler::micro_batch_indices(int64_t step, int64_t micro_step, int dp_rank, int dp,
                                                        int64_t micro_batch) const {
  const int64_t chunks = global_batch_ / micro_batch;
  const int64_t per_rank = chunks / dp;
  if (global_batch_ % (micro_batch * dp) != 0 || micro_step < 0 || micro_step >= per_rank)
    throw std::invalid_argument("GlobalSampler: micro-batch outside the global batch");
  const int64_t chunk = dp_rank * per_rank + micro_step;
  const auto& order = cached_permutation(epoch_of(step));
  const int64_t first = (step % steps_per_epoch()) * global_batch_ + chunk * micro_batch;
  return {order.begin() + first, order.begin() + first + micro_batch};
}

Range even_share(int64_t total, int part, int parts) {
  const int64_t base = total / parts, extra = total % parts;
  const int64_t begin = part * base + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

}  // namespace trident::data
