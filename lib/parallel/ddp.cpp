// DDP: every rank holds and updates the whole model. Gradients are averaged over the dp group
// by bucketed all-reduce, each bucket launched (non-blocking) the moment backward has produced
// all of its gradients on the last micro-step; earlier micro-steps only accumulate locally.
#include "core/timer.hpp"
#include "parallel/bucket_readiness.hpp"
#include "parallel/grad_sync.hpp"

namespace trident::parallel {

namespace {

class Ddp final : public GradSync {
 public:
  Ddp(optim::FlatParams& flat, comm::Communicator& comm, double bucket_mb) : flat_(flat), comm_(comm) {
    auto buckets = assign_buckets(flat.numels(), static_cast<int64_t>(sizeof(float)),
                                  static_cast<int64_t>(bucket_mb * 1024 * 1024));
    for (const auto& b : buckets) bucket_views_.push_back(flat.grads.narrow(0, b.offset, b.numel));
    if (comm_.size() > 1)
      readiness_ = std::make_unique<BucketReadiness>(flat, std::move(buckets), [this](size_t b) { launch(b); });
  }

  std::string name() const override { return "ddp"; }

  void before_backward(bool last) override {
    if (readiness_ && last) readiness_->arm();
  }
  void count_gradients(bool counting) override {
    if (readiness_) readiness_->set_counting(counting);
  }

  void finish() override {
    if (!readiness_ || !readiness_->armed()) return;
    Stopwatch watch;
    readiness_->flush();
    for (auto& w : work_) w->wait();
    work_.clear();
    exposed_seconds_ += watch.seconds();
  }

  at::Tensor optimizer_params() override { return flat_.params; }
  at::Tensor optimizer_grads() override { return flat_.grads; }
  bool sharded() const override { return false; }
  void after_step() override { flat_.zero_grad(); }
  at::Tensor full_params() override { return flat_.params; }
  StateBytes state_bytes() const override { return {flat_.numel() * 4, flat_.numel() * 4, 0}; }

 private:
  void launch(size_t b) {
    auto& slice = bucket_views_[b];
    ++launched_total_;
    if (b + 1 < bucket_views_.size()) {
      work_.push_back(comm_.all_reduce_sum_async(slice));
      for (auto& w : work_) w->test();  // drives MPI progress while backward goes on
      return;
    }
    // The last bucket has nothing left to overlap with: a blocking all-reduce (the same
    // algorithm as a plain MPI_Allreduce, no request bookkeeping), all of it exposed.
    Stopwatch watch;
    comm_.all_reduce_sum(slice);
    exposed_seconds_ += watch.seconds();
  }

  optim::FlatParams& flat_;
  comm::Communicator& comm_;
  std::vector<at::Tensor> bucket_views_;  // slices of the flat gradient buffer, made once
  std::unique_ptr<BucketReadiness> readiness_;
  std::vector<std::unique_ptr<comm::Work>> work_;
};

}  // namespace

std::unique_ptr<GradSync> make_ddp(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb) {
  return std::make_unique<Ddp>(flat, dp_comm, bucket_mb);
}

}  // namespace trident::parallel
