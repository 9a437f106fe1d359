#pragma once
// How the dp ranks of a stage share the work of one optimizer step. One file per strategy
// behind this interface: ddp.cpp (gradients all-reduced, every rank updates everything),
// zero1.cpp (optimizer state partitioned), zero2.cpp (+ gradients), zero3.cpp (+ parameters).
//
// Per optimizer step the trainer calls, for each micro-step m of M:
//   before_backward(m == M - 1); forward; loss.backward();
// then finish(); clips optimizer_grads() by the global norm; updates optimizer_params() from
// optimizer_grads(); then after_step(). The trainer scales the loss by 1 / (M x dp), so the
// reduced gradient is that of the global batch's mean loss.
#include <memory>

#include "comm/communicator.hpp"
#include "config/deck.hpp"
#include "model/model.hpp"
#include "optim/flat_params.hpp"

namespace trident::parallel {

// Model-state bytes this rank holds, by kind (optimizer state is the optimizer's to report).
struct StateBytes {
  int64_t params = 0, grads = 0, master = 0;
};

class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual std::string name() const = 0;
  // `last` is true on the last micro-step of a step.
  virtual void before_backward(bool last) = 0;
  // A split backward (zb-h1, parallel/split_backward.hpp) is about to compute these parameters'
  // gradients, apart from the backward through their layer's input.
  virtual void before_weight_gradients(const std::vector<at::Tensor>& params) {}
  // Several chunks per rank (interleaved): after before_backward(true), whether the next
  // backward's gradients complete buckets (a chunk's last backward of the step) or only
  // accumulate (another chunk's, whose last is still to come).
  virtual void count_gradients(bool counting) {}
  virtual void finish() = 0;
  // What this rank's optimizer updates: fp32 parameters and their reduced gradients, one
  // contiguous buffer each (the whole model for DDP, this rank's partition for ZeRO).
  virtual at::Tensor optimizer_params() = 0;
  virtual at::Tensor optimizer_grads() = 0;
  // True when optimizer_grads() holds only this rank's partition: the global gradient norm is
  // then summed over the dp group.
  virtual bool sharded() const = 0;
  // After the optimizer step: every rank's parameters up to date again, gradients cleared.
  virtual void after_step() = 0;
  // Every parameter, whole, in model order (collective for ZeRO-3; for tests and checkpoints).
  virtual at::Tensor full_params() = 0;
  // ZeRO-3 keeps only optimizer_params() (this rank's partition); the others hold every
  // parameter in full_params() (a view: writing it sets the parameters).
  virtual bool params_partitioned() const { return false; }
  virtual StateBytes state_bytes() const = 0;

  double exposed_comm_seconds() const { return exposed_seconds_; }  // communication nobody overlapped
  int64_t buckets_launched() const { return launched_total_; }
  // ZeRO-3: layer parameter gathers, and how many of them a prefetch had started in advance.
  int64_t gathers() const { return gathers_; }
  int64_t gathers_prefetched() const { return gathers_prefetched_; }

 protected:
  double exposed_seconds_ = 0;
  int64_t launched_total_ = 0;
  int64_t gathers_ = 0, gathers_prefetched_ = 0;
};

std::unique_ptr<GradSync> make_ddp(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb);
std::unique_ptr<GradSync> make_zero1(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb);
std::unique_ptr<GradSync> make_zero2(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb);
std::unique_ptr<GradSync> make_zero3(optim::FlatParams& flat, model::LayerStack& model, comm::Communicator& dp_comm);

// parallel.zero picks the strategy.
std::unique_ptr<GradSync> make_grad_sync(const config::Deck& deck, optim::FlatParams& flat, model::LayerStack& model,
                                         comm::Communicator& dp_comm);

}  // namespace trident::parallel
