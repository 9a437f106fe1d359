// ZeRO stage 2: optimizer state and gradients are partitioned. The whole gradient is never
// held: as backward finishes a bucket, its gradients are copied into a transient buffer and
// freed, the bucket is reduce-scattered, and each rank adds its piece to its gradient
// partition (on every micro-step: accumulation happens in the partition). Each rank updates
// its contiguous partition of the parameters; the partitions are all-gathered in place.
#include "core/timer.hpp"
#include "parallel/bucket_readiness.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/element_partition.hpp"

namespace trident::parallel {

namespace {

class Zero2 final : public GradSync {
 public:
  Zero2(optim::FlatParams& flat, comm::Communicator& comm, double bucket_mb)
      : flat_(flat), comm_(comm), partition_(flat.numel(), comm.size()) {
    range_ = partition_.range(comm.rank());
    counts_ = partition_.counts(0, flat.numel());
    grad_partition_ = at::zeros({range_.end - range_.begin}, flat.options);
    // Release the whole-model gradient buffer: autograd allocates each gradient afresh, and
    // reduce() frees it once its bucket is reduced.
    for (auto& slot : flat.slots) slot.param.mutable_grad() = at::Tensor();
    flat.grads = at::Tensor();
    readiness_ = std::make_unique<BucketReadiness>(
        flat, assign_buckets(flat.numels(), 4, static_cast<int64_t>(bucket_mb * 1024 * 1024)),
        [this](size_t b) { reduce(b); });
  }

  std::string name() const override { return "zero2"; }
  void count_gradients(bool counting) override { readiness_->set_counting(counting); }
  void before_backward(bool) override {
    readiness_->flush();  // the previous micro-step's unused parameters, if any
    readiness_->arm();
  }
  void finish() override { readiness_->flush(); }
  at::Tensor optimizer_params() override { return flat_.params.narrow(0, range_.begin, range_.end - range_.begin); }
  at::Tensor optimizer_grads() override { return grad_partition_; }
  bool sharded() const override { return true; }
  void after_step() override {
    Stopwatch watch;
    comm_.all_gather_v(optimizer_params(), flat_.params, counts_);
    exposed_seconds_ += watch.seconds();
    grad_partition_.zero_();
  }
  at::Tensor full_params() override { return flat_.params; }
  StateBytes state_bytes() const override { return {flat_.numel() * 4, grad_partition_.numel() * 4, 0}; }

 private:
  void reduce(size_t b) {
    Stopwatch watch;
    const auto& bucket = readiness_->buckets()[b];
    at::Tensor staging = at::empty({bucket.numel}, flat_.options);
    for (int64_t p = bucket.first_param; p < bucket.end_param; ++p) {
      auto& slot = flat_.slots[static_cast<size_t>(p)];
      auto target = staging.narrow(0, slot.offset - bucket.offset, slot.numel);
      const auto& grad = slot.param.grad();
      if (grad.defined()) target.copy_(grad.reshape({-1}));
      else target.zero_();
      slot.param.mutable_grad() = at::Tensor();  // freed: this rank keeps only its partition
    }
    const auto piece = partition_.intersect(bucket.offset, bucket.offset + bucket.numel, comm_.rank());
    at::Tensor received = at::empty({piece.end - piece.begin}, flat_.options);
    comm_.reduce_scatter_sum_v(staging, received, partition_.counts(bucket.offset, bucket.offset + bucket.numel));
    grad_partition_.narrow(0, piece.begin - range_.begin, piece.end - piece.begin).add_(received);
    ++launched_total_;
    exposed_seconds_ += watch.seconds();
  }

  optim::FlatParams& flat_;
  comm::Communicator& comm_;
  ElementPartition partition_;
  data::Range range_{0, 0};
  std::vector<int64_t> counts_;
  at::Tensor grad_partition_;
  std::unique_ptr<BucketReadiness> readiness_;
};

}  // namespace

std::unique_ptr<GradSync> make_zero2(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb) {
  return std::make_unique<Zero2>(flat, dp_comm, bucket_mb);
}

}  // namespace trident::parallel
