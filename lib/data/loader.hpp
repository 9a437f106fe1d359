#pragma once
// Reads the micro-batches a rank trains on, `depth` ahead of training on a background thread.
#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "data/dataset.hpp"
#include "data/sampler.hpp"

namespace trident::data {

struct MicroBatch {
  at::Tensor inputs;  // float [n, ...]
  at::Tensor labels;  // int64 [n]
};

// Produces items 0..count-1 in order with `produce`, up to `depth` ahead on one background
// thread (depth 0: on the caller's thread). An exception in the producer is rethrown by next().
class Prefetcher {
 public:
  Prefetcher(int64_t count, int depth, std::function<MicroBatch(int64_t)> produce);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  MicroBatch next();
  double wait_seconds() const { return wait_seconds_; }  // time next() spent blocked

 private:
  void run();
  int64_t count_, next_index_ = 0;
  size_t depth_;
  std::function<MicroBatch(int64_t)> produce_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<MicroBatch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
  double wait_seconds_ = 0;
};

// The training micro-batches of one dp rank for global steps [first_step, end_step): inputs
// and/or labels, as the rank's pipeline stage needs them. `pin_memory` (a rank that trains on a
// GPU): each batch is put in page-locked memory on the loader's thread, so its copy to the
// device runs asynchronously.
std::unique_ptr<Prefetcher> make_train_loader(std::shared_ptr<SplitReader> reader, GlobalSampler sampler,
                                              int64_t first_step, int64_t end_step, int64_t micro_batch,
                                              int dp_rank, int dp, int depth, bool inputs, bool labels,
                                              bool pin_memory = false);

}  // namespace trident::data
