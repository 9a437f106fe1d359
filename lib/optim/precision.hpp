#pragma once
// optim.precision: fp32 | bf16 | fp16. Mixed precision the way PyTorch AMP does it: the
// parameters stay fp32 (they are the master weights the optimizer updates, and the gradients
// arrive in fp32), while autocast runs matmuls and convolutions in bf16/fp16 during the forward.
// fp16's narrow exponent range needs dynamic loss scaling (LossScaler); bf16 has fp32's range.
#include <ATen/core/ATen_fwd.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace trident::optim {

// fp32 -> Float (autocast off), bf16 -> BFloat16, fp16 -> Half.
c10::ScalarType compute_type(const std::string& precision);

// The type autocast computes in on the CPU or CUDA now; Float where it is off.
c10::ScalarType active_autocast_type(bool cuda);

// Autocast for one forward (not the backward: autograd casts gradients back by itself) on the
// CPU or CUDA; Float = off. Clears autocast's cache of cast weights when the outermost scope
// ends, so the next step casts the updated weights.
class AutocastScope {
 public:
  AutocastScope(c10::ScalarType type, bool cuda);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false, cuda_ = false, was_enabled_ = false;
  c10::ScalarType was_type_ = c10::ScalarType::Float;
};

// Dynamic loss scaling (fp16): the loss is multiplied by scale() before backward; a step whose
// gradients hold Inf/NaN is skipped and the scale halved; after `window` good steps in a row
// the scale doubles. The same decisions on every rank (they see the same global norm).
class LossScaler {
 public:
  explicit LossScaler(double initial = 65536.0, double growth = 2.0, double backoff = 0.5, int64_t window = 2000);
  double scale() const { return scale_; }
  // Call once per step with whether the (scaled) gradients were finite; returns whether the
  // optimizer should apply this step.
  bool update(bool gradients_finite);
  int64_t skipped_steps() const { return skipped_; }
  // For checkpoints: the scale and the good steps since the last change.
  int64_t good_steps() const { return good_; }
  double growth() const { return growth_; }
  double backoff() const { return backoff_; }
  int64_t window() const { return window_; }
  void restore(double scale, int64_t good_steps, int64_t skipped_steps);

 private:
  double scale_, growth_, backoff_;
  int64_t window_, good_ = 0, skipped_ = 0;
};

}  // namespace trident::optim
