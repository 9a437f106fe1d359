#include "model/gpt.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/cuda_runtime.hpp"
#include "core/log.hpp"
#include "kernels/column_sums.hpp"
#include "kernels/gelu_matmul.hpp"
#include "kernels/layer_norm.hpp"
#include "model/model.hpp"
#include "optim/precision.hpp"

namespace trident::model {

at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(-2);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const at::Tensor future = at::ones({t, t}, q.options().dtype(at::kBool)).triu_(1);
  scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), v);
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  return causal_attention_explicit(q, k, v);
#endif
}

AttentionKeeps attention_keeps() {
  return TORCH_VERSION_MAJOR >= 2 ? AttentionKeeps::kLogSumExp : AttentionKeeps::kProbabilities;
}

double gpt_flops_per_token(int64_t matmul_parameters, int64_t layers, int64_t seq_len, int64_t d_model) {
  return 6.0 * static_cast<double>(matmul_parameters) +
         12.0 * static_cast<double>(layers) * static_cast<double>(seq_len) * static_cast<double>(d_model);
}

namespace {

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }
// `t`, or a copy of it where its start is not 16-byte aligned (a fresh tensor's is): for kernels and
// products that load 16 bytes at a time.
at::Tensor aligned16_or_copy(const at::Tensor& t) { return aligned16(t) ? t : t.clone(); }

// The 16-bit type of the mixed layers below, which carry it as a flag: bf16, or else fp16.
at::ScalarType half_scalar_type(bool bf16) { return bf16 ? at::kBFloat16 : at::kHalf; }
kernels::HalfType half_type(bool bf16) { return bf16 ? kernels::HalfType::bf16 : kernels::HalfType::fp16; }

// The kernels' backward is not itself differentiable: a second derivative (create_graph) would
// silently miss terms, so it is refused.
void no_double_backward(const char* layer) {
  TORCH_CHECK(!torch::autograd::GradMode::is_enabled(), "trident's fused ", layer,
              " on the GPU has no double backward (create_graph)");
}

// A linear layer's weight gradient g^T x in fp32, from its 16-bit output gradient g [rows, out]
// and input x: cuBLAS writes fp32 where this LibTorch lets it (mm's out_dtype, 2.9 on), else a
// 16-bit product cast up.
at::Tensor weight_gradient(const at::Tensor& g, const at::Tensor& x16) {
  const at::Tensor x2 = x16.reshape({-1, x16.size(-1)});
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  return at::mm(g.t(), x2, at::kFloat);
#else
  return g.t().mm(x2).to(at::kFloat);
#endif
}

// Its bias gradient, g's column sums in fp32 (kernels/column_sums.hpp) on the GPU.
at::Tensor bias_gradient(const at::Tensor& g, bool bf16) {
  if (!aligned16(g)) return g.sum(0, false, at::kFloat);  // the kernel's 16-byte loads need an aligned start
  const int64_t out = g.size(1);
  at::Tensor grad_bias = at::empty({out}, g.options().dtype(at::kFloat));
  const int device = g.get_device();
  at::Tensor workspace = at::empty({kernels::column_sums_workspace(g.size(0), out, device)}, grad_bias.options());
  kernels::column_sums(half_type(bf16), g.data_ptr(), g.size(0), out, grad_bias.data_ptr<float>(),
                       workspace.data_ptr<float>(), device, comm::cuda_current_stream(device));
  return grad_bias;
}

// Both gradients of a linear layer from its 16-bit output gradient g [rows, out] and input x16.
// With TRIDENT_BIAS_GRAD_IN_PRODUCT=1 the bias's comes out of the weight's product, summed in
// cuBLASLt's epilogue (kernels::weight_bias_grad_matmul), not in a pass of its own over g; where
// that product does not apply (said once), and by default, apart. Off by default until it has
// been measured and checked on a GPU (the gpu tests run both ways). Read at each call: tests
// switch it. `workspace`: cuBLASLt's, one the caller already holds on this stream, or none.
std::pair<at::Tensor, at::Tensor> weight_and_bias_gradients(const at::Tensor& g, const at::Tensor& x16, bool bf16,
                                                            at::Tensor workspace = {}) {
  const char* in_product = std::getenv("TRIDENT_BIAS_GRAD_IN_PRODUCT");
  if (in_product && std::string(in_product) == "1") {
    const int64_t rows = g.size(0), out = g.size(1), in = x16.size(-1);
    // Checked before allocating: the product's own check would come after.
    if (kernels::weight_bias_grad_matmul_supports(rows, in, out) && g.is_contiguous() && x16.is_contiguous() &&
        aligned16(g) && aligned16(x16)) {
      at::Tensor grad_weight = at::empty({out, in}, g.options().dtype(at::kFloat));
      at::Tensor grad_bias = at::empty({out}, grad_weight.options());
      if (!workspace.defined())
        workspace = at::empty({kernels::gelu_matmul_workspace_bytes()}, g.options().dtype(at::kByte));
      const int device = g.get_device();
      if (kernels::weight_bias_grad_matmul(half_type(bf16), g.data_ptr(), x16.data_ptr(), rows, in, out,
                                           grad_weight.data_ptr<float>(), grad_bias.data_ptr<float>(),
                                           workspace.data_ptr(), device, comm::cuda_current_stream(device)))
        return {grad_weight, grad_bias};
    }
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log::warn("TRIDENT_BIAS_GRAD_IN_PRODUCT=1: a linear layer's bias gradient ({} rows, {} -> {}) is summed apart: "
                "cuBLASLt's product with it does not apply there",
                rows, in, out);
  }
  return {weight_gradient(g, x16), bias_gradient(g, bf16)};
}

// x W^T + b on the GPU under bf16/fp16 autocast, with its backward written out (mixed_linear):
// the weight's gradient comes out of the matrix product in fp32 (no bf16 gradient that a cast
// then turns into fp32), and the bias's is summed into fp32 by trident's column-sum kernel
// (kernels/column_sums.hpp), not ATen's bf16 reduction and a cast.
class MixedLinearFunction : public torch::autograd::Function<MixedLinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, bool bf16) {
    const at::ScalarType type = half_scalar_type(bf16);
    const at::Tensor x16 = x.to(type), w16 = weight.to(type);
    ctx->save_for_backward({x16, w16});
    ctx->saved_data["bf16"] = bf16;
    return at::linear(x16, w16, bias.to(type));  // cuBLAS adds the bias in the product's epilogue
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x16 = saved[0], &w16 = saved[1];
    const bool bf16 = ctx->saved_data["bf16"].toBool();
    no_double_backward("linear");
    const at::Tensor g = grad_outputs[0].to(half_scalar_type(bf16)).contiguous().view({-1, w16.size(0)});
    const at::Tensor grad_x = ctx->needs_input_grad(0) ? g.mm(w16).view(x16.sizes()) : at::Tensor();
    at::Tensor grad_weight, grad_bias;
    if (ctx->needs_input_grad(1) && ctx->needs_input_grad(2)) {
      std::tie(grad_weight, grad_bias) = weight_and_bias_gradients(g, x16, bf16);
    } else {
      if (ctx->needs_input_grad(1)) grad_weight = weight_gradient(g, x16);
      if (ctx->needs_input_grad(2)) grad_bias = bias_gradient(g, bf16);
    }
    return {grad_x, grad_weight, grad_bias, at::Tensor()};
  }
};

// The MLP, gelu_tanh(x W_in^T + b_in) W_out^T + b_out, on the GPU under bf16/fp16 autocast
// (gelu_mlp), with the GELU in cuBLASLt's epilogues (kernels/gelu_matmul.hpp): forward, the first
// product writes the GELU's output and its input; backward, the product of the output's gradient
// and W_out writes the gradient of the GELU's input. One Function for both products because
// that backward product is the second layer's input gradient and the first's activation
// gradient at once. The weight and bias gradients as mixed_linear's. The hidden layer and the
// backward are shared with ResidualGeluMlpFunction (the output added to the residual stream).
struct MlpHidden {
  at::Tensor x16, w_in16, pre, activation, w_out16, workspace;
};

// The first product (and GELU) of the MLP, its inputs cast to the 16-bit type, all saved for
// mlp_backward.
MlpHidden mlp_hidden(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_in,
                     const at::Tensor& b_in, const at::Tensor& w_out, bool bf16) {
  const at::ScalarType type = half_scalar_type(bf16);
  const int64_t width = w_in.size(1), hidden = w_in.size(0), rows = x.numel() / width;
  MlpHidden h;
  h.x16 = aligned16_or_copy(x.to(type).contiguous());
  h.w_in16 = w_in.to(type);
  h.w_out16 = w_out.to(type);
  h.pre = at::empty({rows, hidden}, h.x16.options());
  h.activation = at::empty_like(h.pre);
  const int device = h.x16.get_device();
  h.workspace = at::empty({kernels::gelu_matmul_workspace_bytes()}, h.x16.options().dtype(at::kByte));
  kernels::bias_gelu_matmul(half_type(bf16), h.x16.data_ptr(), h.w_in16.data_ptr(), b_in.to(type).data_ptr(), rows,
                            width, hidden, h.activation.data_ptr(), h.pre.data_ptr(), h.workspace.data_ptr(), device,
                            comm::cuda_current_stream(device));
  ctx->save_for_backward({h.x16, h.w_in16, h.pre, h.activation, h.w_out16});
  ctx->saved_data["bf16"] = bf16;
  return h;
}

// {grad_x, grad_w_in, grad_b_in, grad_w_out, grad_b_out} from the gradient of the MLP's output;
// grad_x where the Function's input `x_input` (x's place among its inputs) needs one.
torch::autograd::variable_list mlp_backward(torch::autograd::AutogradContext* ctx, const at::Tensor& grad_output,
                                            size_t x_input) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor &x16 = saved[0], &w_in16 = saved[1], &pre = saved[2], &activation = saved[3], &w_out16 = saved[4];
  const bool bf16 = ctx->saved_data["bf16"].toBool();
  no_double_backward("MLP");
  const at::Tensor g = aligned16_or_copy(grad_output.to(half_scalar_type(bf16)).contiguous().view({-1, w_out16.size(0)}));
  const int64_t rows = pre.size(0), hidden = pre.size(1);
  const at::Tensor grad_pre = at::empty_like(pre);
  const int device = g.get_device();
  const at::Tensor workspace = at::empty({kernels::gelu_matmul_workspace_bytes()}, g.options().dtype(at::kByte));
  kernels::gelu_grad_matmul(half_type(bf16), g.data_ptr(), w_out16.data_ptr(), pre.data_ptr(), rows, g.size(1), hidden,
                            grad_pre.data_ptr(), workspace.data_ptr(), device, comm::cuda_current_stream(device));
  const at::Tensor grad_x = ctx->needs_input_grad(x_input) ? grad_pre.mm(w_in16).view(x16.sizes()) : at::Tensor();
  const auto [grad_w_in, grad_b_in] = weight_and_bias_gradients(grad_pre, x16, bf16, workspace);
  const auto [grad_w_out, grad_b_out] = weight_and_bias_gradients(g, activation, bf16, workspace);
  return {grad_x, grad_w_in, grad_b_in, grad_w_out, grad_b_out};
}

std::vector<int64_t> mlp_output_sizes(const at::Tensor& x, const at::Tensor& w_out) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = w_out.size(0);
  return sizes;
}

class GeluMlpFunction : public torch::autograd::Function<GeluMlpFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_in,
                            const at::Tensor& b_in, const at::Tensor& w_out, const at::Tensor& b_out, bool bf16) {
    const MlpHidden h = mlp_hidden(ctx, x, w_in, b_in, w_out, bf16);
    return at::linear(h.activation, h.w_out16, b_out.to(half_scalar_type(bf16))).view(mlp_output_sizes(x, w_out));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto grads = mlp_backward(ctx, grad_outputs[0], /*x_input=*/0);
    grads.emplace_back();  // bf16
    return grads;
  }
};

// residual + MLP(x) in fp32 (residual_gelu_mlp): the second product adds the fp32 bias and the
// residual in its epilogue and writes fp32 (kernels::residual_bias_matmul), where the MLP's
// 16-bit output would be added to the stream in a pass of its own. The residual's gradient is the
// output's, passed on.
class ResidualGeluMlpFunction : public torch::autograd::Function<ResidualGeluMlpFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& residual, const at::Tensor& x,
                            const at::Tensor& w_in, const at::Tensor& b_in, const at::Tensor& w_out,
                            const at::Tensor& b_out, bool bf16) {
    const MlpHidden h = mlp_hidden(ctx, x, w_in, b_in, w_out, bf16);
    const at::Tensor y = at::empty_like(residual), bias = aligned16_or_copy(b_out.contiguous());
    const int device = y.get_device();
    kernels::residual_bias_matmul(half_type(bf16), h.activation.data_ptr(), h.w_out16.data_ptr(),
                                  bias.data_ptr<float>(), residual.data_ptr<float>(), h.activation.size(0),
                                  h.activation.size(1), w_out.size(0), y.data_ptr<float>(), h.workspace.data_ptr(),
                                  device, comm::cuda_current_stream(device));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto grads = mlp_backward(ctx, grad_outputs[0], /*x_input=*/1);
    grads.insert(grads.begin(), grad_outputs[0]);  // the residual's
    grads.emplace_back();                          // bf16
    return grads;
  }
};

// The type of CUDA autocast where `x` is a CUDA tensor and autocast runs in bf16 or fp16 there;
// Float otherwise.
at::ScalarType mixed_type(const at::Tensor& x) {
  if (!x.is_cuda()) return at::kFloat;
  const at::ScalarType type = optim::active_autocast_type(true);
  return type == at::kBFloat16 || type == at::kHalf ? type : at::kFloat;
}

// The two kernels of kernels/layer_norm.hpp on tensors. Forward: LayerNorm of fp32 rows `x`
// (plus a 16-bit `branch` where one is given, the sum then written to `sum`) into `y` in the
// 16-bit type, with each row's mean and 1 / std for backward.
struct LayerNormForward {
  at::Tensor y, mean, rstd;
};
LayerNormForward layer_norm_kernel_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                           double eps, bool bf16, const at::Tensor& branch = {},
                                           const at::Tensor& sum = {}) {
  const int64_t width = x.size(-1), rows = x.numel() / width;
  LayerNormForward out{at::empty(x.sizes(), x.options().dtype(half_scalar_type(bf16))), at::empty({rows}, x.options()),
                       at::empty({rows}, x.options())};
  kernels::layer_norm_forward(half_type(bf16), x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                              rows, width, static_cast<float>(eps), out.y.data_ptr(), out.mean.data_ptr<float>(),
                              out.rstd.data_ptr<float>(), comm::cuda_current_stream(x.get_device()),
                              branch.defined() ? branch.data_ptr() : nullptr,
                              sum.defined() ? sum.data_ptr<float>() : nullptr);
  return out;
}

// Backward from `saved` = {rows normalised (fp32), weight, mean, rstd}: {grad_x, grad_weight,
// grad_bias}, and grad_x again in the 16-bit type where `half_grad_x`. `grad_residual` (fp32, or
// undefined where there is none: a plain LayerNorm): the gradient reaching the rows by the
// residual path, added into grad_x.
torch::autograd::variable_list layer_norm_kernel_backward(const torch::autograd::variable_list& saved,
                                                          const at::Tensor& grad_output, bool bf16,
                                                          const at::Tensor& grad_residual, bool half_grad_x) {
  const at::Tensor &x = saved[0], &weight = saved[1];
  // y's type: a no-op, unless a consumer was fp32. (Never undefined: autograd hands an unused
  // output's gradient over as zeros, the Functions leaving materialize_grads on.)
  at::Tensor grad_y = grad_output.to(half_scalar_type(bf16)).contiguous();
  if (reinterpret_cast<uintptr_t>(grad_y.data_ptr()) % 8 != 0) grad_y = grad_y.clone();  // 8-byte loads
  at::Tensor residual;
  if (grad_residual.defined()) {
    residual = aligned16_or_copy(grad_residual.to(at::kFloat).contiguous());
  }
  const int64_t width = x.size(-1), rows = x.numel() / width;
  const int device = x.get_device();
  at::Tensor grad_x = at::empty_like(x), grad_weight = at::empty_like(weight), grad_bias = at::empty_like(weight);
  at::Tensor grad_x16 = half_grad_x ? at::empty(x.sizes(), x.options().dtype(half_scalar_type(bf16))) : at::Tensor();
  at::Tensor workspace =
      at::empty({kernels::layer_norm_backward_workspace(half_type(bf16), rows, width, device)}, x.options());
  kernels::layer_norm_backward(half_type(bf16), grad_y.data_ptr(), x.data_ptr<float>(), saved[2].data_ptr<float>(),
                               saved[3].data_ptr<float>(), weight.data_ptr<float>(), rows, width,
                               grad_x.data_ptr<float>(), grad_weight.data_ptr<float>(), grad_bias.data_ptr<float>(),
                               workspace.data_ptr<float>(), device, comm::cuda_current_stream(device),
                               residual.defined() ? residual.data_ptr<float>() : nullptr,
                               half_grad_x ? grad_x16.data_ptr() : nullptr);
  return {grad_x, grad_weight, grad_bias, grad_x16};
}

// LayerNorm of the fp32 residual stream straight into autocast's 16-bit type, on the GPU in two
// kernels (kernels/layer_norm.hpp). Keeps the input (fp32) and 8 bytes a row for backward.
class MixedLayerNormFunction : public torch::autograd::Function<MixedLayerNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, bool bf16) {
    const LayerNormForward out = layer_norm_kernel_forward(x, weight, bias, eps, bf16);
    ctx->save_for_backward({x, weight, out.mean, out.rstd});
    ctx->saved_data["bf16"] = bf16;
    return out.y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    no_double_backward("LayerNorm");
    const auto grads = layer_norm_kernel_backward(ctx->get_saved_variables(), grad_outputs[0],
                                                  ctx->saved_data["bf16"].toBool(), {}, false);
    return {grads[0], grads[1], grads[2], at::Tensor(), at::Tensor()};
  }
};

// The residual stream's step into a LayerNorm: h = x + branch (a 16-bit layer output), and
// y = LayerNorm(h) in the 16-bit type: {h, y}. On the GPU in the LayerNorm's two kernels, so
// that the residual add's forward is no pass of its own, and in backward the two gradients
// reaching h (through y, and along the stream) are added in the LayerNorm's backward pass rather
// than by autograd's engine in another, the branch's 16-bit copy of the sum written there too
// rather than cast by the engine (benchmarks/README.md: 2.5 ms of a 38 ms GPT-2 small step on
// the H100, in 24 adds forward and 24 backward). Same bits as the add and mixed_layer_norm.
class ResidualLayerNormFunction : public torch::autograd::Function<ResidualLayerNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& branch, const at::Tensor& weight,
                                                const at::Tensor& bias, double eps, bool bf16) {
    const at::Tensor h = at::empty_like(x);
    const LayerNormForward out = layer_norm_kernel_forward(x, weight, bias, eps, bf16, branch, h);
    ctx->save_for_backward({h, weight, out.mean, out.rstd});
    ctx->saved_data["bf16"] = bf16;
    return {h, out.y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    no_double_backward("residual LayerNorm");
    const auto grads = layer_norm_kernel_backward(ctx->get_saved_variables(), grad_outputs[1],
                                                  ctx->saved_data["bf16"].toBool(), grad_outputs[0], true);
    return {grads[0], grads[3], grads[1], grads[2], at::Tensor(), at::Tensor()};
  }
};

// The same without a branch: {x, LayerNorm(x)}, x returned as autograd returns an unmodified
// input (a view of it whose gradient comes back through this node), so that the gradient along
// the stream is added into the LayerNorm's input gradient in its backward pass. (A C++ autograd
// Function takes no undefined tensor argument: hence a class of its own.)
class StreamLayerNormFunction : public torch::autograd::Function<StreamLayerNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& weight, const at::Tensor& bias, double eps,
                                                bool bf16) {
    const LayerNormForward out = layer_norm_kernel_forward(x, weight, bias, eps, bf16);
    ctx->save_for_backward({x, weight, out.mean, out.rstd});
    ctx->saved_data["bf16"] = bf16;
    return {x, out.y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    no_double_backward("residual LayerNorm");
    const auto grads = layer_norm_kernel_backward(ctx->get_saved_variables(), grad_outputs[1],
                                                  ctx->saved_data["bf16"].toBool(), grad_outputs[0], false);
    return {grads[0], grads[1], grads[2], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool mixed_linear_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return mixed_type(x) != at::kFloat && x.dim() >= 2 && weight.dim() == 2 && bias.defined() &&
         weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat && bias.numel() == weight.size(0) &&
         kernels::column_sums_supports(weight.size(0));
}

at::Tensor mixed_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!mixed_linear_applies(x, weight, bias)) return at::linear(x, weight, bias);
  return MixedLinearFunction::apply(x, weight, bias, mixed_type(x) == at::kBFloat16);
}

bool gelu_mlp_applies(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& b_in, const at::Tensor& w_out,
                      const at::Tensor& b_out) {
  return mixed_linear_applies(x, w_in, b_in) && mixed_linear_applies(x, w_out, b_out) && x.size(-1) == w_in.size(1) &&
         w_out.size(1) == w_in.size(0) && w_in.device() == x.device() && w_out.device() == x.device() &&
         kernels::gelu_matmul_supports(x.numel() / x.size(-1), w_in.size(1), w_in.size(0));
}

at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& b_in, const at::Tensor& w_out,
                    const at::Tensor& b_out) {
  if (!gelu_mlp_applies(x, w_in, b_in, w_out, b_out))
    return mixed_linear(at::gelu(mixed_linear(x, w_in, b_in), "tanh"), w_out, b_out);
  return GeluMlpFunction::apply(x, w_in, b_in, w_out, b_out, mixed_type(x) == at::kBFloat16);
}

static bool residual_in_product_wanted() {
  const char* off = std::getenv("TRIDENT_MLP_RESIDUAL_IN_PRODUCT");
  return !off || std::string(off) != "0";
}

bool residual_gelu_mlp_applies(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& w_in,
                               const at::Tensor& b_in, const at::Tensor& w_out, const at::Tensor& b_out) {
  return residual_in_product_wanted() && gelu_mlp_applies(x, w_in, b_in, w_out, b_out) &&
         residual.scalar_type() == at::kFloat && residual.is_contiguous() && aligned16(residual) &&
         residual.sizes() == at::IntArrayRef(mlp_output_sizes(x, w_out)) && residual.device() == x.device();
}

at::Tensor residual_gelu_mlp(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& w_in,
                             const at::Tensor& b_in, const at::Tensor& w_out, const at::Tensor& b_out) {
  if (!residual_gelu_mlp_applies(residual, x, w_in, b_in, w_out, b_out))
    return residual + gelu_mlp(x, w_in, b_in, w_out, b_out);
  return ResidualGeluMlpFunction::apply(residual, x, w_in, b_in, w_out, b_out, mixed_type(x) == at::kBFloat16);
}

bool mixed_layer_norm_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (x.scalar_type() != at::kFloat || !x.is_contiguous() || x.dim() < 1 || mixed_type(x) == at::kFloat) return false;
  return kernels::layer_norm_supports(x.size(-1)) &&
         weight.defined() && bias.defined() && weight.scalar_type() == at::kFloat &&
         bias.scalar_type() == at::kFloat && weight.numel() == x.size(-1) && bias.numel() == x.size(-1) &&
         weight.is_contiguous() && bias.is_contiguous() && weight.device() == x.device() &&
         bias.device() == x.device() && aligned16(x) && aligned16(weight) && aligned16(bias);
}

at::Tensor mixed_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (!mixed_layer_norm_applies(x, weight, bias)) return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  return MixedLayerNormFunction::apply(x, weight, bias, eps, mixed_type(x) == at::kBFloat16);
}

bool residual_layer_norm_applies(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                 const at::Tensor& bias) {
  if (!mixed_layer_norm_applies(x, weight, bias)) return false;
  return !branch.defined() ||
         (branch.scalar_type() == mixed_type(x) && branch.sizes() == x.sizes() && branch.is_contiguous() &&
          branch.device() == x.device() && reinterpret_cast<uintptr_t>(branch.data_ptr()) % 8 == 0);
}

std::pair<at::Tensor, at::Tensor> residual_layer_norm(const at::Tensor& x, const at::Tensor& branch,
                                                      const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (!residual_layer_norm_applies(x, branch, weight, bias)) {
    const at::Tensor h = branch.defined() ? x + branch : x;
    return {h, mixed_layer_norm(h, weight, bias, eps)};
  }
  const bool bf16 = mixed_type(x) == at::kBFloat16;
  const auto outputs = branch.defined() ? ResidualLayerNormFunction::apply(x, branch, weight, bias, eps, bf16)
                                        : StreamLayerNormFunction::apply(x, weight, bias, eps, bf16);
  return {outputs[0], outputs[1]};
}

namespace {

// torch::nn::LayerNorm (the same parameters and names, so the same checkpoints) whose forward is
// mixed_layer_norm: on the GPU under bf16/fp16 autocast it normalises fp32 rows straight into the
// 16-bit type the next matrix product reads. ATen's layer_norm would return fp32 there (autocast
// runs it in fp32), which the product then casts in a kernel of its own.
class MixedLayerNormImpl : public torch::nn::LayerNormImpl {
 public:
  explicit MixedLayerNormImpl(int64_t width) : torch::nn::LayerNormImpl(torch::nn::LayerNormOptions({width})) {}
  torch::Tensor forward(const torch::Tensor& x) { return mixed_layer_norm(x, weight, bias, options.eps()); }
  // {x + branch (x where branch is undefined), this LayerNorm of it}: residual_layer_norm.
  std::pair<torch::Tensor, torch::Tensor> after_residual(const torch::Tensor& x, const torch::Tensor& branch) {
    return residual_layer_norm(x, branch, weight, bias, options.eps());
  }
};
TORCH_MODULE(MixedLayerNorm);

// torch::nn::Linear and torch::nn::Embedding as the GPT uses them (the same parameters and
// names, so the same checkpoints), with their parameters left as allocated: build_gpt draws the
// initial weights itself, and LibTorch's constructors drew a first set (Kaiming uniform, N(0, 1))
// that it overwrote at once, a pass of random numbers over every weight for nothing.
class ProjectionImpl : public torch::nn::Module {
 public:
  ProjectionImpl(int64_t in, int64_t out, bool with_bias = true)
      : weight(register_parameter("weight", torch::empty({out, in}))) {
    if (with_bias) bias = register_parameter("bias", torch::empty({out}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight, bias); }
  torch::Tensor weight, bias;
};
TORCH_MODULE(Projection);

class TableImpl : public torch::nn::Module {
 public:
  TableImpl(int64_t rows, int64_t width) : weight(register_parameter("weight", torch::empty({rows, width}))) {}
  torch::Tensor forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }
  torch::Tensor weight;
};
TORCH_MODULE(Table);

// Token ids [batch, T] -> token embedding + position embedding [batch, T, d_model].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab, int64_t seq_len, int64_t d_model)
      : token(register_module("token", Table(vocab, d_model))),
        position(register_module("position", Table(seq_len, d_model))) {}
  torch::Tensor forward(const torch::Tensor& tokens) {
    const auto positions = torch::arange(tokens.size(1), tokens.options().dtype(torch::kLong));
    return token(tokens) + position(positions);
  }
  Table token, position;
};
TORCH_MODULE(Embedding);

// One pre-LayerNorm transformer block: x + attention(norm(x)), then x + mlp(norm(x)), the MLP
// 4 d_model wide with tanh-approximated GELU (GPT-2's).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t d_model, int64_t heads)
      : heads_(heads),
        attn_norm(register_module("attn_norm", MixedLayerNorm(d_model))),
        qkv(register_module("qkv", Projection(d_model, 3 * d_model))),
        attn_out(register_module("attn_out", Projection(d_model, d_model))),
        mlp_norm(register_module("mlp_norm", MixedLayerNorm(d_model))),
        mlp_in(register_module("mlp_in", Projection(d_model, 4 * d_model))),
        mlp_out(register_module("mlp_out", Projection(4 * d_model, d_model))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    // Both LayerNorms through residual_layer_norm (the attention's output added to the stream in
    // the MLP's): on the GPU each LayerNorm's backward adds the gradient coming along the stream
    // into its own, where autograd's engine would add the two in a pass of its own.
    // [b, t, 3d] -> q, k, v [b, heads, t, head_dim], views of the projection. unbind along the
    // [b, t, 3, heads, head_dim] axis of the three: its backward stacks the three gradients
    // straight into the projection's layout in one copy (three selects would each fill a zero
    // tensor and add into it; unbinding a permuted view would need a second copy back).
    const auto [residual, attn_in] = attn_norm->after_residual(x, {});
    const auto qkv_heads = mixed_linear(attn_in, qkv->weight, qkv->bias).view({b, t, 3, heads_, d / heads_}).unbind(2);
    const auto y = causal_attention(qkv_heads[0].transpose(1, 2), qkv_heads[1].transpose(1, 2),
                                    qkv_heads[2].transpose(1, 2))
                       .transpose(1, 2)
                       .reshape({b, t, d});
    const auto [h, mlp_x] = mlp_norm->after_residual(residual, mixed_linear(y, attn_out->weight, attn_out->bias));
    return residual_gelu_mlp(h, mlp_x, mlp_in->weight, mlp_in->bias, mlp_out->weight, mlp_out->bias);
  }

 private:
  int64_t heads_;

 public:
  MixedLayerNorm attn_norm;
  Projection qkv, attn_out;
  MixedLayerNorm mlp_norm;
  Projection mlp_in, mlp_out;
};
TORCH_MODULE(Block);

}  // namespace

// embed, block1..blockL, head (final LayerNorm + untied linear to the vocabulary): L + 2
// layers for a pipeline to cut. Logits [batch, T, vocab].
void build_gpt(const config::Deck& deck, const InputSpec& input, const LayerSink& emit) {
  const auto& m = deck.model;
  const int64_t vocab = input.classes, d = m.d_model;
  // GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the projections that add into
  // the residual stream scaled by 1/sqrt(2L) so its variance does not grow with depth. Each
  // layer is initialised as it is made, from the generator seeded for it (model.hpp).
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(m.layers));
  const int64_t t = input.sample_shape.at(0);
  const auto initialised = [&](torch::nn::Sequential module) {
    torch::NoGradGuard no_grad;
    for (const auto& p : module->named_parameters()) {
      const auto& key = p.key();
      if (key.find("norm.") != std::string::npos) continue;  // LayerNorm keeps ones and zeros
      if (key.size() >= 4 && key.compare(key.size() - 4, 4, "bias") == 0) {
        p.value().zero_();
      } else {
        const bool residual = key.find("attn_out.") != std::string::npos || key.find("mlp_out.") != std::string::npos;
        p.value().normal_(0.0, residual ? residual_std : 0.02);
      }
    }
    return module;
  };
  emit("embed", {t, d}, /*recomputable=*/false, [&](bool draw_weights) {
    torch::nn::Sequential embed;
    embed->push_back("embedding", Embedding(vocab, m.seq_len, d));
    return draw_weights ? initialised(embed) : embed;
  });
  for (int64_t l = 1; l <= m.layers; ++l) {
    emit("block" + std::to_string(l), {t, d}, /*recomputable=*/true, [&](bool draw_weights) {
      torch::nn::Sequential block;
      block->push_back("block", Block(d, m.heads));
      return draw_weights ? initialised(block) : block;
    });
  }
  emit("head", {t, vocab}, /*recomputable=*/false, [&](bool draw_weights) {
    torch::nn::Sequential head;
    head->push_back("norm", MixedLayerNorm(d));
    head->push_back("linear", Projection(d, vocab, /*with_bias=*/false));
    return draw_weights ? initialised(head) : head;
  });
}

}  // namespace trident::model
