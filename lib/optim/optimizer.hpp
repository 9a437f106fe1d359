#pragma once
// Optimizers over a flat fp32 parameter buffer (the whole model, or later a ZeRO shard), and
// clipping by global norm.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/deck.hpp"

namespace trident::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update of `params` from `grads` (same shape) with learning rate `lr`. With a
  // `grad_divisor` (a float scalar on the parameters' device; only where divides_gradients()),
  // the update uses grads / grad_divisor, and `grads` are left so divided: the fused kernels
  // divide each gradient as they read it (PyTorch's grad_scale), so that unscaling fp16
  // gradients and clipping them cost no pass over the gradients of their own.
  virtual void step(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& grad_divisor) = 0;
  void step(at::Tensor& params, const at::Tensor& grads, double lr) { step(params, grads, lr, at::Tensor()); }
  // The same update, left undone where `skip` (a float scalar on the parameters' device, 1 or 0)
  // is 1, decided without the host: the fused kernels take the flag (PyTorch's found_inf), and
  // the step count lives on the device. Only where fused_optimizers_built().
  virtual void step_unless(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& skip,
                           const at::Tensor& grad_divisor) = 0;
  // Whether step() on these parameters runs the fused kernel, which takes a grad_divisor.
  virtual bool divides_gradients(const at::Tensor& params) const = 0;
  virtual int64_t state_bytes() const = 0;  // optimizer state held by this rank

  // For checkpoints: the state buffers by name (each the size of the parameters it updates;
  // allocate_state makes them before a first step, e.g. to load them) and the step count.
  virtual void allocate_state(const at::Tensor& params) = 0;
  virtual std::vector<std::pair<std::string, at::Tensor>> state() = 0;
  virtual int64_t steps() const = 0;
  virtual void set_steps(int64_t steps) = 0;
};

// On CUDA tensors with LibTorch >= 2.4, AdamW and SGD run as one fused kernel over the flat
// buffer (at::_fused_adamw_ / at::_fused_sgd_, PyTorch's fused=True); elsewhere as a few vector
// ops. `fused` forces the fused kernels where the build has them (from 2.4 on the CPU too: tests
// compare them there).
std::unique_ptr<Optimizer> make_optimizer(const config::Deck& deck, bool fused = false);
// Whether this build's LibTorch has the fused AdamW and SGD kernels.
bool fused_optimizers_built();

// The L2 norm from the global sum of squares (over every shard and stage), with LibTorch's fp64
// sqrt, as the device computes it.
double global_norm(double squared_norm);

// Scales `grads` so that their L2 norm is at most `max_norm` (0: no clipping), as
// torch.nn.utils.clip_grad_norm_ does. `squared_norm` is the global sum of squares (over every
// shard and stage). Returns the norm before clipping.
double clip_by_global_norm(at::Tensor& grads, double squared_norm, double max_norm);

// The same clipping as a divisor for Optimizer::step's grad_divisor: (norm + 1e-6) / max_norm
// where that is above 1 (clip_grad_norm_'s coefficient, inverted), else 1.
double clip_divisor(double norm, double max_norm);

}  // namespace trident::optim
