// ZeRO stage 1: the optimizer state is partitioned. Gradients are all-reduced exactly as in
// DDP (bucketed, during backward); each rank then updates only its contiguous partition of the
// parameters, and the updated partitions are all-gathered in place.
#include "core/timer.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/element_partition.hpp"

namespace trident::parallel {

namespace {

class Zero1 final : public GradSync {
 public:
  Zero1(optim::FlatParams& flat, comm::Communicator& comm, double bucket_mb)
      : flat_(flat), comm_(comm), ddp_(make_ddp(flat, comm, bucket_mb)), partition_(flat.numel(), comm.size()) {
    range_ = partition_.range(comm.rank());
    counts_ = partition_.counts(0, flat.numel());
  }

  std::string name() const override { return "zero1"; }
  void before_backward(bool last) override { ddp_->before_backward(last); }
  void count_gradients(bool counting) override { ddp_->count_gradients(counting); }
  void finish() override {
    ddp_->finish();
    exposed_seconds_ = ddp_->exposed_comm_seconds() + gather_seconds_;
    launched_total_ = ddp_->buckets_launched();
  }
  at::Tensor optimizer_params() override { return flat_.params.narrow(0, range_.begin, range_.end - range_.begin); }
  at::Tensor optimizer_grads() override { return flat_.grads.narrow(0, range_.begin, range_.end - range_.begin); }
  bool sharded() const override { return true; }
  void after_step() override {
    Stopwatch watch;
    comm_.all_gather_v(optimizer_params(), flat_.params, counts_);
    gather_seconds_ += watch.seconds();
    exposed_seconds_ = ddp_->exposed_comm_seconds() + gather_seconds_;
    flat_.zero_grad();
  }
  at::Tensor full_params() override { return flat_.params; }
  StateBytes state_bytes() const override { return {flat_.numel() * 4, flat_.numel() * 4, 0}; }

 private:
  optim::FlatParams& flat_;
  comm::Communicator& comm_;
  std::unique_ptr<GradSync> ddp_;
  ElementPartition partition_;
  data::Range range_{0, 0};
  std::vector<int64_t> counts_;
  double gather_seconds_ = 0;
};

}  // namespace

std::unique_ptr<GradSync> make_zero1(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb) {
  return std::make_unique<Zero1>(flat, dp_comm, bucket_mb);
}

}  // namespace trident::parallel
