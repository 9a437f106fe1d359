// DDP: gradients averaged over the dp group by bucketed all-reduce, each bucket launched
// (non-blocking) the moment backward has produced all of its gradients on the last
// micro-step; earlier micro-steps only accumulate locally.
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/timer.hpp"
#include "parallel/buckets.hpp"
#include "parallel/grad_sync.hpp"

namespace trident::parallel {

namespace {

class Ddp final : public GradSync {
 public:
  Ddp(optim::FlatParams& flat, comm::Communicator& comm, double bucket_mb) : flat_(flat), comm_(comm) {
    buckets_ = assign_buckets(flat.numels(), static_cast<int64_t>(sizeof(float)),
                              static_cast<int64_t>(bucket_mb * 1024 * 1024));
    bucket_of_param_.resize(flat.slots.size());
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (int64_t p = buckets_[b].first_param; p < buckets_[b].end_param; ++p)
        bucket_of_param_[static_cast<size_t>(p)] = b;
    pending_.resize(buckets_.size());
    if (comm_.size() == 1) return;  // nothing to reduce
    for (size_t i = 0; i < flat.slots.size(); ++i) {
      // The accumulator must outlive the hook registration: the parameter holds it weakly.
      auto accumulator = torch::autograd::impl::grad_accumulator(flat.slots[i].param);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            on_gradient_ready(i);
            return outputs;
          }));
      accumulators_.push_back(std::move(accumulator));
    }
  }

  std::string name() const override { return "ddp"; }

  void before_backward(bool reduce) override {
    reduce_ = reduce && comm_.size() > 1;
    if (!reduce_) return;
    for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].end_param - buckets_[b].first_param;
    next_launch_ = 0;
    work_.clear();
  }

  void finish() override {
    if (!reduce_) return;
    Stopwatch watch;
    // Buckets whose parameters took no part in this backward are launched now, still in order.
    while (next_launch_ < buckets_.size()) launch(next_launch_++);
    for (auto& w : work_) w->wait();
    work_.clear();
    exposed_seconds_ += watch.seconds();
    reduce_ = false;
  }

 private:
  void on_gradient_ready(size_t param) {
    if (!reduce_) return;
    --pending_[bucket_of_param_[param]];
    // Collectives must be issued in the same order on every rank: strictly bucket order.
    while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
    for (auto& w : work_) w->test();  // drives MPI progress while backward goes on
  }

  void launch(size_t b) {
    auto slice = flat_.grads.narrow(0, buckets_[b].offset, buckets_[b].numel);
    work_.push_back(comm_.all_reduce_sum_async(slice));
    ++launched_total_;
  }

  optim::FlatParams& flat_;
  comm::Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_param_;
  std::vector<int64_t> pending_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<std::unique_ptr<comm::Work>> work_;
  size_t next_launch_ = 0;
  bool reduce_ = false;
};

}  // namespace

std::unique_ptr<GradSync> make_ddp(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb) {
  return std::make_unique<Ddp>(flat, dp_comm, bucket_mb);
}

std::unique_ptr<GradSync> make_grad_sync(const config::Deck& deck, optim::FlatParams& flat,
                                         comm::Communicator& dp_comm) {
  return make_ddp(flat, dp_comm, deck.parallel.bucket_mb);
}

}  // namespace trident::parallel
