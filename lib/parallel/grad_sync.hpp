#pragma once
// How gradients become the same on every dp rank of a stage. One file per strategy
// (ddp.cpp now; ZeRO stages later) behind this interface.
//
// Per optimizer step the trainer calls, for each micro-step m of M:
//   before_backward(m == M - 1); loss.backward();
// then finish() once, after which FlatParams::grads holds the sum over dp ranks of each
// rank's accumulated gradient (the trainer scales the loss by 1 / (M x dp), so that sum is the
// gradient of the global batch's mean loss).
#include <memory>

#include "comm/communicator.hpp"
#include "config/deck.hpp"
#include "optim/flat_params.hpp"

namespace trident::parallel {

class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual std::string name() const = 0;
  // `reduce` is true on the last micro-step: gradients are reduced as backward produces them.
  virtual void before_backward(bool reduce) = 0;
  virtual void finish() = 0;
  double exposed_comm_seconds() const { return exposed_seconds_; }  // time finish() blocked
  int64_t buckets_launched() const { return launched_total_; }

 protected:
  double exposed_seconds_ = 0;
  int64_t launched_total_ = 0;
};

std::unique_ptr<GradSync> make_ddp(optim::FlatParams& flat, comm::Communicator& dp_comm, double bucket_mb);
std::unique_ptr<GradSync> make_grad_sync(const config::Deck& deck, optim::FlatParams& flat,
                                         comm::Communicator& dp_comm);

}  // namespace trident::parallel
