#include "data/loader.hpp"

#include "comm/progress.hpp"
#include "core/timer.hpp"

namespace trident::data {

Prefetcher::Prefetcher(int64_t count, int depth, std::function<MicroBatch(int64_t)> produce)
    : count_(count), depth_(static_cast<size_t>(depth)), produce_(std::move(produce)) {
  if (depth_ > 0) thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::run() {
  try {
    for (int64_t i = 0; i < count_; ++i) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || ready_.size() < depth_; });
        if (stop_) return;
      }
      MicroBatch item = produce_(i);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(item));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

MicroBatch Prefetcher::next() {
  comm::FileIoScope io;  // reading the dataset, or waiting for the thread that does
  Stopwatch watch;
  if (next_index_ >= count_) throw std::out_of_range("Prefetcher: no more items");
  if (depth_ == 0) {
    MicroBatch item = produce_(next_index_++);
    wait_seconds_ += watch.seconds();
    return item;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty() && error_) std::rethrow_exception(error_);
  MicroBatch item = std::move(ready_.front());
  ready_.pop_front();
  ++next_index_;
  lock.unlock();
  changed_.notify_all();
  wait_seconds_ += watch.seconds();
  return item;
}

std::unique_ptr<Prefetcher> make_train_loader(std::shared_ptr<SplitReader> reader, GlobalSampler sampler,
                                              int64_t first_step, int64_t end_step, int64_t micro_batch,
                                              int dp_rank, int dp, int depth, bool inputs, bool labels,
                                              bool pin_memory) {
  const int64_t accumulation = sampler.global_batch() / (micro_batch * dp);
  auto produce = [=, sampler = std::move(sampler)](int64_t i) mutable {
    const int64_t step = first_step + i / accumulation;
    MicroBatch batch;
    reader->read(sampler.micro_batch_indices(step, i % accumulation, dp_rank, dp, micro_batch),
                 inputs ? &batch.inputs : nullptr, labels ? &batch.labels : nullptr);
    if (pin_memory) {
      if (batch.inputs.defined()) batch.inputs = batch.inputs.pin_memory();
      if (batch.labels.defined()) batch.labels = batch.labels.pin_memory();
    }
    return batch;
  };
  return std::make_unique<Prefetcher>((end_step - first_step) * accumulation, depth, std::move(produce));
}

}  // namespace trident::data
