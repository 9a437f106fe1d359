#include "optim/device_step.hpp"

#include <ATen/ATen.h>

#include <vector>

#include "optim/precision.hpp"

namespace trident::optim {

DeviceStep::DeviceStep(const at::TensorOptions& device, double clip_norm, int64_t accumulation, LossScaler* scaler)
    : scaler_(scaler), clip_norm_(clip_norm), accumulation_(accumulation) {
  const auto fp64 = device.dtype(at::kDouble);
  const auto int64 = device.dtype(at::kLong);
  if (scaler_) {
    scale_ = at::full({}, scaler_->scale(), fp64);
    good_ = at::full({}, scaler_->good_steps(), int64);
    skipped_ = at::full({}, scaler_->skipped_steps(), int64);
  }
  last_loss_ = at::zeros({}, fp64);
  last_norm_ = at::zeros({}, fp64);
  loss_sum_ = at::zeros({}, fp64);
  diverged_step_ = at::zeros({}, int64);
  diverged_norm_ = at::zeros({}, fp64);
  diverged_loss_ = at::zeros({}, fp64);
}

// Rounded to fp32 once, as the host path's double factor is when it multiplies the fp32 loss.
at::Tensor DeviceStep::loss_factor(double base) const { return scaler_ ? (scale_ * base).to(at::kFloat) : at::Tensor(); }

DeviceDecision DeviceStep::decide(const at::Tensor& squared_norm, const at::Tensor& summed_loss, int64_t step) {
  last_loss_ = summed_loss.to(at::kDouble) / static_cast<double>(accumulation_);
  loss_sum_.add_(last_loss_);
  const at::Tensor not_finite = squared_norm.isfinite().logical_not();
  at::Tensor squares = squared_norm, skip, unscale;
  if (scaler_) {
    // LossScaler::update with the same numbers: on an overflow the scale backs off (not below
    // 1) and the window restarts; otherwise, after `window` good steps in a row, it grows. The
    // gradients are unscaled by the scale this step used (part of the divisor).
    const at::Tensor used = scale_.clone();
    const at::Tensor good = (good_ + 1).masked_fill_(not_finite, 0);
    const at::Tensor grow = good.ge(scaler_->window());
    scale_ = at::where(not_finite, (used * scaler_->backoff()).clamp_min_(1.0),
                       at::where(grow, used * scaler_->growth(), used));
    good_ = good.masked_fill_(grow, 0);
    skipped_.add_(not_finite.to(at::kLong));
    unscale = used;
    squares = (squared_norm / (used * used)).masked_fill_(not_finite, 0);  // a skipped step logs norm 0
    skip = not_finite;
  } else {
    // The first non-finite norm is kept for the host's message; from it on nothing is updated.
    const at::Tensor first = not_finite.logical_and(diverged_step_.eq(0));
    diverged_step_.masked_fill_(first, step);
    diverged_norm_ = at::where(first, squared_norm.sqrt(), diverged_norm_);
    diverged_loss_ = at::where(first, last_loss_, diverged_loss_);
    skip = diverged_step_.ne(0);
  }
  last_norm_ = squares.sqrt();
  // clip_divisor's, then times the fp16 scale, in fp64 as on the host; ÷ 1 changes no bit.
  at::Tensor divisor = clip_norm_ > 0 ? ((last_norm_ + 1e-6) / clip_norm_).clamp_min_(1.0) : at::ones_like(last_norm_);
  if (unscale.defined()) divisor = unscale * divisor;
  return {skip.to(at::kFloat), divisor.to(at::kFloat)};
}

DeviceStepReading DeviceStep::read() {
  std::vector<at::Tensor> scalars{last_loss_, last_norm_, loss_sum_, diverged_step_.to(at::kDouble), diverged_norm_,
                                  diverged_loss_};
  if (scaler_) scalars.insert(scalars.end(), {scale_, good_.to(at::kDouble), skipped_.to(at::kDouble)});
  const at::Tensor fp64 = at::stack(scalars).cpu();  // the one copy
  const double* v = fp64.data_ptr<double>();
  DeviceStepReading r;
  r.last_loss = v[0];
  r.last_norm = v[1];
  r.loss_sum = v[2];
  r.diverged_step = static_cast<int64_t>(v[3]);
  r.diverged_norm = v[4];
  r.diverged_loss = v[5];
  if (scaler_) {
    r.skipped_steps = static_cast<int64_t>(v[8]);
    scaler_->restore(v[6], static_cast<int64_t>(v[7]), r.skipped_steps);
  }
  return r;
}

void DeviceStep::reset_loss_sum() { loss_sum_.zero_(); }

}  // namespace trident::optim
