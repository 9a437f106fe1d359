#include "model/loss.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "comm/cuda_runtime.hpp"
#include "kernels/cross_entropy.hpp"

namespace trident::model {

namespace {

class LowPrecisionCrossEntropy : public torch::autograd::Function<LowPrecisionCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& labels,
                            bool mean, int64_t rows) {
    const int64_t n = logits.size(0);
    at::Tensor log_sum_exp = at::empty({n}, logits.options().dtype(at::kFloat));
    for (int64_t first = 0; first < n; first += rows) {
      const int64_t count = std::min(rows, n - first);
      log_sum_exp.narrow(0, first, count).copy_(at::logsumexp(logits.narrow(0, first, count).to(at::kFloat), {1}));
    }
    const at::Tensor label_logit = logits.gather(1, labels.unsqueeze(1)).squeeze(1).to(at::kFloat);
    ctx->save_for_backward({logits, labels, log_sum_exp});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["rows"] = rows;
    const at::Tensor total = (log_sum_exp - label_logit).sum();  // fp32 accumulation
    return mean ? total / static_cast<double>(n) : total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const at::Tensor& labels = saved[1];
    const at::Tensor& log_sum_exp = saved[2];
    const int64_t n = logits.size(0);
    at::Tensor g = grad_outputs[0].to(at::kFloat);
    if (ctx->saved_data["mean"].toBool()) g = g / static_cast<double>(n);
    const int64_t rows = ctx->saved_data["rows"].toInt();
    at::Tensor grad = at::empty_like(logits);
    for (int64_t first = 0; first < n; first += rows) {
      const int64_t count = std::min(rows, n - first);
      // d loss / d logit = softmax - one_hot(label), times the incoming gradient.
      at::Tensor p = (logits.narrow(0, first, count).to(at::kFloat) - log_sum_exp.narrow(0, first, count).unsqueeze(1))
                         .exp_();
      p.scatter_add_(1, labels.narrow(0, first, count).unsqueeze(1), at::full({count, 1}, -1.0, p.options()));
      grad.narrow(0, first, count).copy_(p.mul_(g));
    }
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The same on the GPU in two fused kernels (kernels/cross_entropy.hpp): nothing but the logits,
// the labels and 4 bytes a row of log-sum-exp kept for backward, and no host synchronisation.
class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  static kernels::HalfType type_of(const at::Tensor& logits) {
    return logits.scalar_type() == at::kBFloat16 ? kernels::HalfType::bf16 : kernels::HalfType::fp16;
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits_in, const at::Tensor& labels_in,
                            bool mean) {
    const at::Tensor logits = logits_in.contiguous(), labels = labels_in.to(at::kLong).contiguous();
    const int64_t n = logits.size(0);
    at::Tensor log_sum_exp = at::empty({n}, logits.options().dtype(at::kFloat));
    at::Tensor row_loss = at::empty({n}, logits.options().dtype(at::kFloat));
    kernels::cross_entropy_forward(type_of(logits), logits.data_ptr(), labels.data_ptr<int64_t>(), n, logits.size(1),
                                   log_sum_exp.data_ptr<float>(), row_loss.data_ptr<float>(),
                                   comm::cuda_current_stream(logits.get_device()));
    ctx->save_for_backward({logits, labels, log_sum_exp});
    ctx->saved_data["mean"] = mean;
    const at::Tensor total = row_loss.sum();
    return mean ? total / static_cast<double>(n) : total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const int64_t n = logits.size(0);
    at::Tensor scale = grad_outputs[0].to(at::kFloat).reshape({1});
    if (ctx->saved_data["mean"].toBool()) scale = scale / static_cast<double>(n);
    scale = scale.contiguous();
    at::Tensor grad = at::empty_like(logits);
    kernels::cross_entropy_backward(type_of(logits), logits.data_ptr(), saved[1].data_ptr<int64_t>(),
                                    saved[2].data_ptr<float>(), scale.data_ptr<float>(), n, logits.size(1),
                                    grad.data_ptr(), comm::cuda_current_stream(logits.get_device()));
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_cross_entropy_applies(const at::Tensor& logits) {
  return kernels::cross_entropy_built() && logits.is_cuda() &&
         (logits.scalar_type() == at::kBFloat16 || logits.scalar_type() == at::kHalf);
}

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels, bool mean, int64_t slice_elements) {
  const at::Tensor rows = logits.flatten(0, -2), targets = labels.flatten();  // no-ops on [n, classes]
  if (fused_cross_entropy_applies(rows)) {
    // The kernels read the labels through a raw pointer: one per row, on the logits' device.
    TORCH_CHECK(targets.numel() == rows.size(0) && targets.device() == rows.device(), "cross_entropy: ",
                targets.numel(), " labels on ", targets.device(), " for ", rows.size(0), " rows of logits on ",
                rows.device());
    return FusedCrossEntropy::apply(rows, targets, mean);
  }
  if (logits.scalar_type() != at::kFloat && logits.scalar_type() != at::kDouble)
    return LowPrecisionCrossEntropy::apply(rows, targets, mean,
                                           std::max<int64_t>(1, slice_elements / std::max<int64_t>(1, rows.size(1))));
  namespace F = torch::nn::functional;
  auto options = F::CrossEntropyFuncOptions();
  if (!mean) options.reduction(torch::kSum);
  return F::cross_entropy(rows, targets, options);
}

}  // namespace trident::model
