#include "optim/optimizer.hpp"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>

// The fused AdamW kernel: on CUDA since LibTorch 2.0 and on the CPU since 2.4; used from 2.4 (one
// version test for both).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define TRIDENT_FUSED_ADAMW 1
#else
#define TRIDENT_FUSED_ADAMW 0
#endif

namespace trident::optim {

namespace {

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
  int64_t steps() const override { return t_; }
  void set_steps(int64_t steps) override { t_ = steps; }

  void step(at::Tensor& params, const at::Tensor& grads, double lr) override {
    allocate_state(params);
    ++t_;
#if TRIDENT_FUSED_ADAMW
    if (fused_ || params.is_cuda()) {
      // The same update in one kernel that reads and writes each element once. Its step count is
      // a tensor on the device (set, not incremented there: a restored count stays right).
      if (!step_.defined()) step_ = at::zeros({}, params.options());
      step_.fill_(static_cast<double>(t_));
      at::_fused_adamw_({params}, {grads}, {m_}, {v_}, {}, {step_}, lr, beta1_, beta2_, weight_decay_, eps_,
                        /*amsgrad=*/false, /*maximize=*/false);
      return;
    }
#endif
    if (weight_decay_ > 0) params.mul_(1.0 - lr * weight_decay_);
    m_.mul_(beta1_).add_(grads, 1.0 - beta1_);
    v_.mul_(beta2_).addcmul_(grads, grads, 1.0 - beta2_);
    const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
    const double bias2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
    at::Tensor denom = v_.sqrt().div_(std::sqrt(bias2)).add_(eps_);
    params.addcdiv_(m_, denom, -lr / bias1);
  }
  int64_t state_bytes() const override {
    return m_.defined() ? (m_.numel() + v_.numel()) * static_cast<int64_t>(m_.element_size()) : 0;
  }

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool fused_ = false;
  int64_t t_ = 0;
  at::Tensor m_, v_, step_;
};

// SGD with momentum (PyTorch's form: buf = momentum * buf + g; first step buf = g).
class Sgd final : public Optimizer {
 public:
  Sgd(double momentum, double weight_decay) : momentum_(momentum), weight_decay_(weight_decay) {}
  std::string name() const override { return "sgd"; }

  // A zero buffer gives the same first step as PyTorch's "buffer = g": 0 * momentum + g == g.
  void allocate_state(const at::Tensor& params) override {
    if (momentum_ > 0 && !buffer_.defined()) buffer_ = at::zeros_like(params);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() override {
    if (momentum_ > 0) return {{"momentum_buffer", buffer_}};
    return {};
  }
  int64_t steps() const override { return steps_; }
  void set_steps(int64_t steps) override { steps_ = steps; }

  void step(at::Tensor& params, const at::Tensor& grads, double lr) override {
    allocate_state(params);
    ++steps_;
    at::Tensor g = weight_decay_ > 0 ? grads.add(params, weight_decay_) : grads;
    if (momentum_ > 0) {
      buffer_.mul_(momentum_).add_(g);
      g = buffer_;
    }
    params.add_(g, -lr);
  }
  int64_t state_bytes() const override {
    return buffer_.defined() ? buffer_.numel() * static_cast<int64_t>(buffer_.element_size()) : 0;
  }

 private:
  double momentum_, weight_decay_;
  int64_t steps_ = 0;
  at::Tensor buffer_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const config::Deck& deck, bool fused) {
  const auto& o = deck.optim;
  if (o.name == "sgd") return std::make_unique<Sgd>(o.momentum, o.weight_decay);
  return std::make_unique<AdamW>(o.beta1, o.beta2, o.eps, o.weight_decay, fused);
}

bool fused_adamw_built() { return TRIDENT_FUSED_ADAMW != 0; }

double clip_by_global_norm(at::Tensor& grads, double squared_norm, double max_norm) {
  const double norm = std::sqrt(squared_norm);
  if (max_norm > 0) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0) grads.mul_(coefficient);
  }
  return norm;
}

}  // namespace trident::optim
