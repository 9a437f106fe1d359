#pragma once
// A step's decisions made on the device, so that a GPU step needs no host synchronisation: the
// host reads the outcome once per logging interval (and at checkpoints and epoch ends).
//
// After backward the step needs, from the global squared gradient norm:
//   - fp16: whether the scaled gradients overflowed (skip the update, lower the scale) or not
//     (unscale, maybe grow the scale): optim::LossScaler's rule, as device scalars;
//   - fp32/bf16: whether the norm is finite; the first step where it is not is recorded and
//     every update from it on is skipped, so the parameters stay as they were before it until
//     the host reads the flag and stops the run (exit 4, core/error.hpp's Diverged);
//   - clipping: grads / max(1, (norm + 1e-6) / max_norm), torch.nn.utils.clip_grad_norm_'s
//     coefficient inverted, as a device scalar;
//   - the losses and norms the log reports, summed on the device.
// The skip flag and the divisor (the fp16 scale times clipping's) go to the optimizer's fused
// kernel (Optimizer::step_unless), which divides each gradient as it reads it, and leaves
// parameters, moments and the step count untouched where the flag is 1: no pass over the
// gradients of their own.
//
// Every operation is the host path's (train/step.cpp with a fused optimizer: LossScaler,
// clip_divisor) in the same IEEE order, so both give bit-identical parameters:
// tests/mpi/step_decisions_test.cpp compares them on the CPU.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace trident::optim {

class LossScaler;

// What the optimizer's fused kernel takes from a step's decisions.
struct DeviceDecision {
  at::Tensor skip;          // float scalar: 1 skips the update
  at::Tensor grad_divisor;  // float scalar: the update uses grads / grad_divisor
};

// What the host learns at a sync point (one copy).
struct DeviceStepReading {
  double last_loss = 0;       // the last step's loss (its micro-batches' mean)
  double last_norm = 0;       // the last step's gradient norm before clipping (0 on a skipped fp16 step)
  double loss_sum = 0;        // the step losses summed since reset_loss_sum()
  int64_t diverged_step = 0;  // the first step (1-based) whose norm was not finite; 0: none
  double diverged_norm = 0, diverged_loss = 0;
  int64_t skipped_steps = 0;  // fp16 overflows so far (the run's, checkpoints included)
};

class DeviceStep {
 public:
  // `scaler` (fp16; null otherwise) gives the starting scale and takes the device's state back at
  // each read, for the log and the checkpoint. `accumulation` divides a step's summed losses.
  DeviceStep(const at::TensorOptions& device, double clip_norm, int64_t accumulation, LossScaler* scaler);

  // The factor the summed loss is multiplied by before backward: `base` times the fp16 scale, a
  // device scalar (the scale changes on the device). Undefined without fp16: use `base`.
  at::Tensor loss_factor(double base) const;

  // After backward, for step `step` (1-based), from the (fp16: scaled) gradients' global squared
  // norm: the skip flag and the gradient divisor for Optimizer::step_unless.
  DeviceDecision decide(const at::Tensor& squared_norm, const at::Tensor& summed_loss, int64_t step);

  // The host's one synchronisation: copies the outcome and writes the fp16 state into the scaler.
  DeviceStepReading read();
  void reset_loss_sum();

 private:
  LossScaler* scaler_;
  double clip_norm_;
  int64_t accumulation_;
  // Device scalars: fp64 for the sums (as the host path's doubles), int64 for the counters.
  at::Tensor scale_, good_, skipped_;  // fp16 only
  at::Tensor last_loss_, last_norm_, loss_sum_, diverged_step_, diverged_norm_, diverged_loss_;
};

}  // namespace trident::optim
