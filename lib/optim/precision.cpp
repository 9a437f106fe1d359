#include "optim/precision.hpp"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <algorithm>

namespace trident::optim {

c10::ScalarType compute_type(const std::string& precision) {
  if (precision == "bf16") return c10::ScalarType::BFloat16;
  if (precision == "fp16") return c10::ScalarType::Half;
  return c10::ScalarType::Float;
}

// LibTorch 2.4 replaced the per-device setters by ones taking the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
namespace {
at::DeviceType device_of(bool cuda) { return cuda ? at::kCUDA : at::kCPU; }
bool autocast_enabled(bool cuda) { return at::autocast::is_autocast_enabled(device_of(cuda)); }
void set_autocast(bool cuda, bool on) { at::autocast::set_autocast_enabled(device_of(cuda), on); }
c10::ScalarType autocast_type(bool cuda) { return at::autocast::get_autocast_dtype(device_of(cuda)); }
void set_autocast_type(bool cuda, c10::ScalarType t) { at::autocast::set_autocast_dtype(device_of(cuda), t); }
}  // namespace
#else
namespace {
bool autocast_enabled(bool cuda) { return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
void set_autocast(bool cuda, bool on) { cuda ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on); }
c10::ScalarType autocast_type(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast_type(bool cuda, c10::ScalarType t) {
  cuda ? at::autocast::set_autocast_gpu_dtype(t) : at::autocast::set_autocast_cpu_dtype(t);
}
}  // namespace
#endif

c10::ScalarType active_autocast_type(bool cuda) {
  return autocast_enabled(cuda) ? autocast_type(cuda) : c10::ScalarType::Float;
}

AutocastScope::AutocastScope(c10::ScalarType type, bool cuda) : active_(type != c10::ScalarType::Float), cuda_(cuda) {
  if (!active_) return;
  was_enabled_ = autocast_enabled(cuda_);
  was_type_ = autocast_type(cuda_);
  set_autocast_type(cuda_, type);
  set_autocast(cuda_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(cuda_, was_enabled_);
  set_autocast_type(cuda_, was_type_);
}

LossScaler::LossScaler(double initial, double growth, double backoff, int64_t window)
    : scale_(initial), growth_(growth), backoff_(backoff), window_(window) {}

bool LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    // Below 1 the scale would shrink the gradients it is meant to protect from underflow.
    scale_ = std::max(1.0, scale_ * backoff_);
    good_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_ >= window_) {
    scale_ *= growth_;
    good_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int64_t good_steps, int64_t skipped_steps) {
  scale_ = scale;
  good_ = good_steps;
  skipped_ = skipped_steps;
}

}  // namespace trident::optim
