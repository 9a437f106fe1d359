#include "optim/optimizer.hpp"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "comm/cuda_runtime.hpp"
#include "core/error.hpp"
#include "kernels/adamw.hpp"

// The fused AdamW and SGD kernels: on CUDA since LibTorch 2.0 / 2.1 and on the CPU since 2.4; used
// from 2.4 (one version test for both).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define TRIDENT_FUSED_OPTIMIZERS 1
#else
#define TRIDENT_FUSED_OPTIMIZERS 0
#endif

namespace trident::optim {

namespace {

// An undefined tensor as the fused kernels' "none" (their grad_scale and found_inf).
[[maybe_unused]] std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// Whether step() runs the fused kernel: where the build has it, on CUDA parameters, or everywhere
// when asked (`fused`: tests compare the kernels on the CPU).
bool runs_fused(bool fused, const at::Tensor& params) {
  return fused_optimizers_built() && (fused || params.is_cuda());
}

// Steps taken (for AdamW's bias correction and the checkpoint). On the host, unless updates are
// skipped on the device (step_unless): then the count is a float scalar on the device too, as
// PyTorch keeps it for its fused kernels, and the host reads it only when asked (a checkpoint).
class StepCount {
 public:
  int64_t value() const { return on_device_ ? static_cast<int64_t>(device_.item<double>()) : host_; }
  void set(int64_t steps) {
    host_ = steps;
    on_device_ = false;
  }
  // A step decided on the host.
  void add_one() {
    host_ = value() + 1;
    on_device_ = false;
  }
  // The host's count as the device scalar a fused kernel reads.
  const at::Tensor& as_scalar(const at::TensorOptions& options) {
    return scalar(options).fill_(static_cast<double>(host_));
  }
  // A step decided on the device: +1 now, and -1 after the kernel where it skipped.
  const at::Tensor& add_one_on_device(const at::TensorOptions& options) {
    if (!on_device_) scalar(options).fill_(static_cast<double>(host_));
    on_device_ = true;
    return device_.add_(1);
  }
  void subtract_skip(const at::Tensor& skip) { device_.sub_(skip); }

 private:
  at::Tensor& scalar(const at::TensorOptions& options) {
    if (!device_.defined()) device_ = at::zeros({}, options.dtype(at::kFloat));
    return device_;
  }
  int64_t host_ = 0;
  at::Tensor device_;
  bool on_device_ = false;
};

// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
class AdamW final : public Optimizer {
 public:
  AdamW(double beta1, double beta2, double eps, double weight_decay, bool fused)
      : beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay), fused_(fused) {}
  std::string name() const override { return "adamw"; }

  void allocate_state(const at::Tensor& params) override {
    if (m_.defined()) return;
    m_ = at::zeros_like(params);
    v_ = at::zeros_like(params);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() override { return {{"exp_avg", m_}, {"exp_avg_sq", v_}}; }
  int64_t steps() const override { return steps_.value(); }
  void set_steps(int64_t steps) override { steps_.set(steps); }

  bool divides_gradients(const at::Tensor& params) const override { return runs_fused(fused_, params); }

  void step(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& grad_divisor) override {
    allocate_state(params);
    steps_.add_one();
    if (divides_gradients(params)) {
      // The same update in one kernel that reads and writes each element once.
      fused(params, grads, lr, steps_.as_scalar(params.options()), {}, grad_divisor);
      return;
    }
    TRIDENT_CHECK(!grad_divisor.defined(), "AdamW: a gradient divisor needs the fused kernel");
    const auto t = static_cast<double>(steps_.value());
    if (weight_decay_ > 0) params.mul_(1.0 - lr * weight_decay_);
    m_.mul_(beta1_).add_(grads, 1.0 - beta1_);
    v_.mul_(beta2_).addcmul_(grads, grads, 1.0 - beta2_);
    const double bias1 = 1.0 - std::pow(beta1_, t);
    const double bias2 = 1.0 - std::pow(beta2_, t);
    at::Tensor denom = v_.sqrt().div_(std::sqrt(bias2)).add_(eps_);
    params.addcdiv_(m_, denom, -lr / bias1);
  }

  void step_unless(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& skip,
                   const at::Tensor& grad_divisor) override {
    TRIDENT_CHECK(fused_optimizers_built(), "AdamW: skipping on the device needs the fused kernel (LibTorch >= 2.4)");
    allocate_state(params);
    fused(params, grads, lr, steps_.add_one_on_device(params.options()), skip, grad_divisor);
    steps_.subtract_skip(skip);
  }
  int64_t state_bytes() const override {
    return m_.defined() ? (m_.numel() + v_.numel()) * static_cast<int64_t>(m_.element_size()) : 0;
  }

 private:
  void fused(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& step, const at::Tensor& skip,
             const at::Tensor& grad_divisor) {
#if TRIDENT_FUSED_OPTIMIZERS
    if (own_kernel_applies(params, grads)) {
      const int device = params.get_device();
      const auto device_float = [](const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
      kernels::adamw_step(params.data_ptr<float>(), grads.data_ptr<float>(), m_.data_ptr<float>(), v_.data_ptr<float>(),
                          params.numel(), {lr, beta1_, beta2_, weight_decay_, eps_}, step.data_ptr<float>(),
                          device_float(grad_divisor), device_float(skip), device, comm::cuda_current_stream(device));
      return;
    }
    at::_fused_adamw_({params}, {grads}, {m_}, {v_}, {}, {step}, lr, beta1_, beta2_, weight_decay_, eps_,
                      /*amsgrad=*/false, /*maximize=*/false, optional(grad_divisor), optional(skip));
#else
    (void)params, (void)grads, (void)lr, (void)step, (void)skip, (void)grad_divisor;
#endif
  }

  // trident's own kernel (kernels/adamw.hpp) in place of at::_fused_adamw_ on flat fp32 CUDA
  // buffers of one size that start equally far from a 16-byte boundary (its vector path; the
  // moments are fresh allocations, so a ZeRO shard narrowed off the boundary goes to PyTorch's
  // kernel, which aligns per chunk, rather than to this one's element-by-element path).
  // TRIDENT_ADAMW_KERNEL=0 turns it off (read at each step: the gpu tests compare the two, and
  // benchmarks/gpt_gpu.sh's VARIANTS can time them).
  bool own_kernel_applies(const at::Tensor& params, const at::Tensor& grads) const {
    const char* off = std::getenv("TRIDENT_ADAMW_KERNEL");
    if ((off && std::string(off) == "0") || !kernels::adamw_built() || !params.is_cuda()) return false;
    const auto misalignment = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16; };
    const auto flat_float = [&](const at::Tensor& t) {
      return t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == params.numel() &&
             t.device() == params.device() && misalignment(t) == misalignment(params);
    };
    return flat_float(params) && flat_float(grads) && flat_float(m_) && flat_float(v_);
  }

  double beta1_, beta2_, eps_, weight_decay_;
  bool fused_ = false;
  StepCount steps_;
  at::Tensor m_, v_;
};

// SGD with momentum (PyTorch's form: buf = momentum * buf + g; first step buf = g).
class Sgd final : public Optimizer {
 public:
  Sgd(double momentum, double weight_decay, bool fused) : momentum_(momentum), weight_decay_(weight_decay), fused_(fused) {}
  std::string name() const override { return "sgd"; }

  // A zero buffer gives the same first step as PyTorch's "buffer = g": 0 * momentum + g == g.
  void allocate_state(const at::Tensor& params) override {
    if (momentum_ > 0 && !buffer_.defined()) buffer_ = at::zeros_like(params);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() override {
    if (momentum_ > 0) return {{"momentum_buffer", buffer_}};
    return {};
  }
  int64_t steps() const override { return steps_.value(); }
  void set_steps(int64_t steps) override { steps_.set(steps); }

  bool divides_gradients(const at::Tensor& params) const override { return runs_fused(fused_, params); }

  void step(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& grad_divisor) override {
    allocate_state(params);
    steps_.add_one();
    if (divides_gradients(params)) {
      fused(params, grads, lr, {}, grad_divisor);
      return;
    }
    TRIDENT_CHECK(!grad_divisor.defined(), "SGD: a gradient divisor needs the fused kernel");
    at::Tensor g = weight_decay_ > 0 ? grads.add(params, weight_decay_) : grads;
    if (momentum_ > 0) {
      buffer_.mul_(momentum_).add_(g);
      g = buffer_;
    }
    params.add_(g, -lr);
  }

  void step_unless(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& skip,
                   const at::Tensor& grad_divisor) override {
    TRIDENT_CHECK(fused_optimizers_built(), "SGD: skipping on the device needs the fused kernel (LibTorch >= 2.4)");
    allocate_state(params);
    steps_.add_one_on_device(params.options());
    fused(params, grads, lr, skip, grad_divisor);
    steps_.subtract_skip(skip);
  }
  int64_t state_bytes() const override {
    return buffer_.defined() ? buffer_.numel() * static_cast<int64_t>(buffer_.element_size()) : 0;
  }

 private:
  void fused(at::Tensor& params, const at::Tensor& grads, double lr, const at::Tensor& skip,
             const at::Tensor& grad_divisor) {
#if TRIDENT_FUSED_OPTIMIZERS
    // Without momentum the kernel gets no buffer; with it, the zeroed buffer makes the first step
    // buf = g as above, so is_first_step stays false.
    std::vector<at::Tensor> buffers;
    if (momentum_ > 0) buffers.push_back(buffer_);
    at::_fused_sgd_({params}, {grads}, buffers, weight_decay_, momentum_, lr, /*dampening=*/0.0, /*nesterov=*/false,
                    /*maximize=*/false, /*is_first_step=*/false, optional(grad_divisor), optional(skip));
#else
    (void)params, (void)grads, (void)lr, (void)skip, (void)grad_divisor;
#endif
  }

  double momentum_, weight_decay_;
  bool fused_ = false;
  StepCount steps_;
  at::Tensor buffer_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const config::Deck& deck, bool fused) {
  const auto& o = deck.optim;
  if (o.name == "sgd") return std::make_unique<Sgd>(o.momentum, o.weight_decay, fused);
  return std::make_unique<AdamW>(o.beta1, o.beta2, o.eps, o.weight_decay, fused);
}

bool fused_optimizers_built() { return TRIDENT_FUSED_OPTIMIZERS != 0; }

double global_norm(double squared_norm) {
  // LibTorch's sqrt, as optim/device_step.cpp's on a CPU tensor: from 2.x its fp64 sqrt on the
  // CPU is not always std::sqrt's correctly rounded one (sqrt(8) is 1 ulp below), and the two
  // paths must clip alike.
  return at::scalar_tensor(squared_norm, at::kDouble).sqrt().item<double>();
}

double clip_divisor(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double divisor = (norm + 1e-6) / max_norm;
  return divisor > 1.0 ? divisor : 1.0;
}

double clip_by_global_norm(at::Tensor& grads, double squared_norm, double max_norm) {
  const double norm = global_norm(squared_norm);
  if (max_norm > 0) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0) grads.mul_(coefficient);
  }
  return norm;
}

}  // namespace trident::optim
