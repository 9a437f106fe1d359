// trident's own CUDA kernels (lib/kernels) against float64 references computed on the CPU from
// the same inputs (label gpu; exit 77, skipped, where no GPU is visible). Fresh random inputs for
// every case, shapes that take the vectorised path and shapes that do not. And the node's GPU as
// `trident plan` names it (from the driver) against the CUDA runtime's answer.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/cuda_runtime.hpp"
#include "comm/node_gpu.hpp"
#include "config/deck.hpp"
#include "kernels/adamw.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/gelu_matmul.hpp"
#include "model/describe_model.hpp"
#include "model/gpt.hpp"
#include "model/loss.hpp"
#include "optim/optimizer.hpp"
#include "optim/precision.hpp"
#include "scoped_env.hpp"
#include "../saved_bytes.hpp"

namespace {

struct Case {
  int64_t rows, classes;
  at::ScalarType type;
  bool mean;
  int64_t offset;  // elements before the logits in their buffer: 1 makes them unaligned
};

std::string describe(const Case& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.classes) + " " + c10::toString(c.type) +
         (c.mean ? " mean" : " sum") + (c.offset ? " unaligned" : "");
}

// TRIDENT_BIAS_GRAD_IN_PRODUCT=1 (linear layers' bias gradients summed in the weight gradient's
// product, model/gpt.cpp) for this object's life, or unset; counts the products that did so.
class BiasGradInProduct {
 public:
  explicit BiasGradInProduct(bool on)
      : on_(on), before_(trident::kernels::weight_bias_grad_matmuls()),
        setting_("TRIDENT_BIAS_GRAD_IN_PRODUCT", on ? std::optional<std::string>("1") : std::nullopt) {}
  int64_t products() const { return trident::kernels::weight_bias_grad_matmuls() - before_; }
  std::string name() const { return on_ ? ", bias gradient in the product" : ""; }

 private:
  bool on_;
  int64_t before_;
  ScopedEnv setting_;
};

// ||a - b|| / ||b||.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / b.to(at::kDouble).norm().item<double>();
}

// The loss and the logits' gradient (with an incoming gradient of 0.75) of model::cross_entropy
// on the GPU, against float64 on the CPU: the loss within 1e-5 relative (fp32 sums of fp32
// exponentials), the gradient within 1e-2 (it is stored in bf16/fp16: ~4e-3 rounding).
TEST(CudaKernels, FusedCrossEntropyMatchesFloat64) {
  const Case cases[] = {
      {64, 50304, at::kBFloat16, true, 0},  {33, 1000, at::kBFloat16, false, 0}, {7, 8, at::kHalf, true, 0},
      {5, 37, at::kBFloat16, true, 0},      {17, 4096, at::kHalf, false, 0},     {9, 1024, at::kBFloat16, true, 1},
      {1, 50304, at::kBFloat16, true, 0},
  };
  for (const Case& c : cases) {
    const auto cuda = at::TensorOptions().device(at::kCUDA);
    const at::Tensor buffer = (at::randn({c.rows * c.classes + c.offset}, cuda) * 4).to(c.type);
    const at::Tensor logits =
        buffer.narrow(0, c.offset, c.rows * c.classes).view({c.rows, c.classes}).detach().requires_grad_(true);
    const at::Tensor labels = at::randint(c.classes, {c.rows}, cuda.dtype(at::kLong));
    ASSERT_TRUE(trident::model::fused_cross_entropy_applies(logits)) << describe(c);
    const at::Tensor loss = trident::model::cross_entropy(logits, labels, c.mean);
    loss.backward(at::full({}, 0.75, cuda));

    const at::Tensor x = logits.detach().cpu().to(at::kDouble).requires_grad_(true);
    const at::Tensor y = labels.cpu();
    at::Tensor reference = (at::logsumexp(x, {1}) - x.gather(1, y.unsqueeze(1)).squeeze(1)).sum();
    if (c.mean) reference = reference / static_cast<double>(c.rows);
    reference.backward(at::full({}, 0.75, at::kDouble));

    EXPECT_EQ(loss.scalar_type(), at::kFloat) << describe(c);
    EXPECT_LT(std::abs(loss.item<double>() - reference.item<double>()), 1e-5 * std::abs(reference.item<double>()))
        << describe(c);
    ASSERT_TRUE(logits.grad().defined()) << describe(c);
    EXPECT_EQ(logits.grad().scalar_type(), c.type) << describe(c);
    EXPECT_TRUE(logits.grad().isfinite().all().item<bool>()) << describe(c);
    EXPECT_LT(relative_error(logits.grad().cpu(), x.grad()), 1e-2) << describe(c);
  }
}

// A label outside the vocabulary is a NaN loss, not a read out of bounds.
TEST(CudaKernels, FusedCrossEntropyLabelOutOfRangeIsNan) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor logits = at::randn({4, 64}, cuda).to(at::kBFloat16);
  const at::Tensor labels = at::tensor({1, 2, 64, 3}, at::kLong).to(at::kCUDA);
  EXPECT_TRUE(std::isnan(trident::model::cross_entropy(logits, labels, true).item<double>()));
}

// A NaN logit anywhere in a row makes the loss NaN (a diverged model must not log a finite
// loss), on the vectorised path and the scalar one, wherever it falls among a thread's elements.
TEST(CudaKernels, FusedCrossEntropyNanLogitGivesNanLoss) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const int64_t classes : {int64_t{50304}, int64_t{37}, int64_t{1000}})
    for (const int64_t at_column : {int64_t{0}, int64_t{3}, classes - 1}) {
      at::Tensor logits = at::randn({4, classes}, cuda).to(at::kBFloat16);
      logits[2][at_column] = std::numeric_limits<float>::quiet_NaN();
      const at::Tensor labels = at::randint(classes, {4}, cuda.dtype(at::kLong));
      EXPECT_TRUE(std::isnan(trident::model::cross_entropy(logits, labels, true).item<double>()))
          << classes << " classes, NaN at column " << at_column;
    }
}

// The GPT's LayerNorm under CUDA autocast (fp32 rows into bf16/fp16, kernels/layer_norm.hpp):
// output, input gradient and weight and bias gradients against float64 on the CPU from the same
// inputs. The output within 1e-2 relative (it is stored in bf16: ~4e-3 rounding; fp16 ~5e-4),
// the gradients within 1e-4 (fp32 arithmetic on the same 16-bit incoming gradient). Rows that fill
// several blocks per warp and rows that leave warps idle; every supported width class.
TEST(CudaKernels, MixedLayerNormMatchesFloat64) {
  struct LayerNormCase {
    int64_t rows, width;
    at::ScalarType type;
  };
  const LayerNormCase cases[] = {
      {16384, 768, at::kBFloat16}, {7, 128, at::kBFloat16}, {1000, 1024, at::kHalf},
      {33, 384, at::kHalf},        {1, 896, at::kBFloat16}, {4099, 256, at::kBFloat16},
  };
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& c : cases) {
    const std::string name = std::to_string(c.rows) + "x" + std::to_string(c.width) + " " + c10::toString(c.type);
    const at::Tensor x = (at::randn({c.rows, c.width}, cuda) * 3 + 1).requires_grad_(true);
    const at::Tensor weight = (at::randn({c.width}, cuda) + 1).requires_grad_(true);
    const at::Tensor bias = at::randn({c.width}, cuda).requires_grad_(true);
    const at::Tensor grad_y = at::randn({c.rows, c.width}, cuda).to(c.type);
    at::Tensor y;
    {
      trident::optim::AutocastScope autocast(c.type, /*cuda=*/true);
      ASSERT_TRUE(trident::model::mixed_layer_norm_applies(x, weight, bias)) << name;
      y = trident::model::mixed_layer_norm(x, weight, bias, 1e-5);
    }
    EXPECT_EQ(y.scalar_type(), c.type) << name;
    y.backward(grad_y);

    const auto on_cpu = [](const at::Tensor& t) { return t.detach().cpu().to(at::kDouble).requires_grad_(true); };
    const at::Tensor rx = on_cpu(x), rw = on_cpu(weight), rb = on_cpu(bias);
    const at::Tensor ry = at::layer_norm(rx, {c.width}, rw, rb, 1e-5);
    ry.backward(grad_y.cpu().to(at::kDouble));
    EXPECT_LT(relative_error(y.cpu(), ry.detach()), 1e-2) << name;
    EXPECT_LT(relative_error(x.grad().cpu(), rx.grad()), 1e-4) << name;
    EXPECT_LT(relative_error(weight.grad().cpu(), rw.grad()), 1e-4) << name;
    EXPECT_LT(relative_error(bias.grad().cpu(), rb.grad()), 1e-4) << name;

    // The same inputs give the same bits (the weight gradient's sums run in a fixed order).
    const at::Tensor first = weight.grad().clone();
    weight.grad().zero_();
    {
      trident::optim::AutocastScope autocast(c.type, /*cuda=*/true);
      trident::model::mixed_layer_norm(x, weight, bias, 1e-5).backward(grad_y);
    }
    EXPECT_TRUE(at::equal(weight.grad(), first)) << name;
  }
}

// The GPT's linear layers under CUDA autocast (kernels/column_sums.hpp for the bias gradient, the
// weight gradient straight out of the product in fp32): output and gradients against float64 on
// the CPU from the same 16-bit operands the GPU multiplies (x and W rounded to the autocast type).
// The output and the input gradient are stored in 16 bits (within 1e-2 relative); the weight and
// bias gradients are fp32 sums of exact products of 16-bit numbers (within 1e-3 and 1e-4). fp32
// and 16-bit inputs, bias widths of one slab and of many, rows that leave slabs short. Both ways
// of the bias gradient: the column sums apart, and summed in the weight gradient's product
// (TRIDENT_BIAS_GRAD_IN_PRODUCT=1), which must then have taken that path.
TEST(CudaKernels, MixedLinearMatchesFloat64) {
  struct LinearCase {
    int64_t rows, in, out;
    at::ScalarType type, input;
  };
  const LinearCase cases[] = {
      {4096, 768, 2304, at::kBFloat16, at::kBFloat16}, {4096, 3072, 768, at::kBFloat16, at::kBFloat16},
      {1000, 256, 1024, at::kHalf, at::kFloat},        {37, 64, 8, at::kBFloat16, at::kFloat},
      {1, 128, 264, at::kBFloat16, at::kBFloat16},
  };
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const bool in_product : {false, true})
  for (const auto& c : cases) {
    const BiasGradInProduct mode(in_product);
    const std::string name = std::to_string(c.rows) + "x" + std::to_string(c.in) + "->" + std::to_string(c.out) + " " +
                             c10::toString(c.type) + " from " + c10::toString(c.input) + mode.name();
    const at::Tensor x = at::randn({1, c.rows, c.in}, cuda).to(c.input).requires_grad_(true);
    const at::Tensor weight = (at::randn({c.out, c.in}, cuda) * 0.05).requires_grad_(true);
    const at::Tensor bias = at::randn({c.out}, cuda).requires_grad_(true);
    const at::Tensor grad_y = at::randn({1, c.rows, c.out}, cuda).to(c.type);
    at::Tensor y;
    {
      trident::optim::AutocastScope autocast(c.type, /*cuda=*/true);
      ASSERT_TRUE(trident::model::mixed_linear_applies(x, weight, bias)) << name;
      y = trident::model::mixed_linear(x, weight, bias);
    }
    EXPECT_EQ(y.scalar_type(), c.type) << name;
    y.backward(grad_y);
    EXPECT_EQ(mode.products(), in_product && c.rows >= 2 ? 1 : 0) << name;  // k = 1 stays apart
    ASSERT_TRUE(x.grad().defined() && weight.grad().defined() && bias.grad().defined()) << name;
    EXPECT_EQ(x.grad().scalar_type(), c.input) << name;

    const auto as_used = [&](const at::Tensor& t) {  // the operand the GPU multiplies, in float64
      return t.detach().to(c.type).cpu().to(at::kDouble).requires_grad_(true);
    };
    const at::Tensor rx = as_used(x), rw = as_used(weight);
    const at::Tensor rb = bias.detach().cpu().to(at::kDouble).requires_grad_(true);
    const at::Tensor ry = at::linear(rx, rw, rb);
    ry.backward(grad_y.cpu().to(at::kDouble));
    EXPECT_LT(relative_error(y.cpu(), ry.detach()), 1e-2) << name;
    EXPECT_LT(relative_error(x.grad().cpu(), rx.grad()), 1e-2) << name;
    EXPECT_LT(relative_error(weight.grad().cpu(), rw.grad()), 1e-3) << name;
    EXPECT_LT(relative_error(bias.grad().cpu(), rb.grad()), 1e-4) << name;
  }
}

// Each input's gradient on the GPU within `tolerance` relative of its float64 reference's.
void expect_gradients_near(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& references,
                           double tolerance, const std::string& name) {
  ASSERT_EQ(inputs.size(), references.size()) << name;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(inputs[i].grad().defined()) << name << ", input " << i;
    EXPECT_LT(relative_error(inputs[i].grad().cpu(), references[i].grad()), tolerance) << name << ", input " << i;
  }
}

// The MLP shapes of GeluMlpMatchesFloat64 and ResidualGeluMlpMatchesFloat64: GPT-2 small's, one in
// fp16 from fp32 input, and one too small for cuBLASLt's larger tiles.
struct MlpCase {
  int64_t rows, width, hidden;
  at::ScalarType type, input;
};
const MlpCase kMlpCases[] = {
    {4096, 768, 3072, at::kBFloat16, at::kBFloat16},
    {1000, 256, 1024, at::kHalf, at::kFloat},
    {24, 64, 32, at::kBFloat16, at::kBFloat16},
};

// The GPT's MLP with its GELU in cuBLASLt's epilogues (model::gelu_mlp, kernels/gelu_matmul.hpp)
// against float64 on the CPU from the same 16-bit operands (x, the weights and the biases rounded
// to the autocast type): gelu_tanh(x W_in^T + b_in) W_out^T + b_out and the gradients of all
// five. The GPU rounds the GELU's input and output, and the gradient of its input, to 16 bits on
// the way (~4e-3 each): the output and every gradient within 2e-2 relative. An error in the
// epilogues' layouts (a transposed operand, the bias along the wrong axis, the wrong GELU)
// gives errors of order 1. Both ways of the bias gradients, as MixedLinearMatchesFloat64.
TEST(CudaKernels, GeluMlpMatchesFloat64) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const bool in_product : {false, true})
  for (const auto& c : kMlpCases) {
    const BiasGradInProduct mode(in_product);
    const std::string name = std::to_string(c.rows) + "x" + std::to_string(c.width) + "->" +
                             std::to_string(c.hidden) + " " + c10::toString(c.type) + " from " +
                             c10::toString(c.input) + mode.name();
    const at::Tensor x = at::randn({2, c.rows / 2, c.width}, cuda).to(c.input).requires_grad_(true);
    const at::Tensor w_in = (at::randn({c.hidden, c.width}, cuda) * 0.05).requires_grad_(true);
    const at::Tensor b_in = (at::randn({c.hidden}, cuda) * 0.5).requires_grad_(true);
    const at::Tensor w_out = (at::randn({c.width, c.hidden}, cuda) * 0.05).requires_grad_(true);
    const at::Tensor b_out = at::randn({c.width}, cuda).requires_grad_(true);
    const at::Tensor grad_y = at::randn({2, c.rows / 2, c.width}, cuda).to(c.type);
    at::Tensor y;
    {
      trident::optim::AutocastScope autocast(c.type, /*cuda=*/true);
      ASSERT_TRUE(trident::model::gelu_mlp_applies(x, w_in, b_in, w_out, b_out)) << name;
      y = trident::model::gelu_mlp(x, w_in, b_in, w_out, b_out);
    }
    EXPECT_EQ(y.scalar_type(), c.type) << name;
    EXPECT_EQ(y.sizes(), x.sizes()) << name;
    y.backward(grad_y);
    EXPECT_EQ(mode.products(), in_product ? 2 : 0) << name;

    const auto as_used = [&](const at::Tensor& t) {  // the operand the GPU multiplies, in float64
      return t.detach().to(c.type).cpu().to(at::kDouble).requires_grad_(true);
    };
    const at::Tensor rx = as_used(x), rw_in = as_used(w_in), rb_in = as_used(b_in), rw_out = as_used(w_out),
                     rb_out = as_used(b_out);
    const at::Tensor ry = at::linear(at::gelu(at::linear(rx, rw_in, rb_in), "tanh"), rw_out, rb_out);
    ry.backward(grad_y.cpu().to(at::kDouble));
    EXPECT_LT(relative_error(y.cpu(), ry.detach()), 2e-2) << name;
    expect_gradients_near({x, w_in, b_in, w_out, b_out}, {rx, rw_in, rb_in, rw_out, rb_out}, 2e-2, name);
    EXPECT_EQ(x.grad().scalar_type(), c.input) << name;
    EXPECT_EQ(w_in.grad().scalar_type(), at::kFloat) << name;
  }
}

// residual + MLP(x) out of the MLP's second product (model::residual_gelu_mlp: the residual and
// the fp32 bias added in cuBLASLt's epilogue, fp32 written) against float64 from the same 16-bit
// operands and the fp32 bias: the MLP's part of the output (y - residual) and every gradient within
// 2e-2 relative, as GeluMlpMatchesFloat64; the residual's gradient is the output's, exactly. With
// TRIDENT_MLP_RESIDUAL_IN_PRODUCT=0 it does not apply (the add, as before).
TEST(CudaKernels, ResidualGeluMlpMatchesFloat64) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& c : kMlpCases) {
    const std::string name = std::to_string(c.rows) + "x" + std::to_string(c.width) + "->" +
                             std::to_string(c.hidden) + " " + c10::toString(c.type) + " from " + c10::toString(c.input);
    const at::Tensor residual = at::randn({2, c.rows / 2, c.width}, cuda).requires_grad_(true);
    const at::Tensor x = at::randn({2, c.rows / 2, c.width}, cuda).to(c.input).requires_grad_(true);
    const at::Tensor w_in = (at::randn({c.hidden, c.width}, cuda) * 0.05).requires_grad_(true);
    const at::Tensor b_in = (at::randn({c.hidden}, cuda) * 0.5).requires_grad_(true);
    const at::Tensor w_out = (at::randn({c.width, c.hidden}, cuda) * 0.05).requires_grad_(true);
    const at::Tensor b_out = at::randn({c.width}, cuda).requires_grad_(true);
    const at::Tensor grad_y = at::randn({2, c.rows / 2, c.width}, cuda);
    at::Tensor y;
    const int64_t before = trident::kernels::residual_bias_matmuls();
    {
      trident::optim::AutocastScope autocast(c.type, /*cuda=*/true);
      {
        const ScopedEnv off("TRIDENT_MLP_RESIDUAL_IN_PRODUCT", std::string("0"));
        EXPECT_FALSE(trident::model::residual_gelu_mlp_applies(residual, x, w_in, b_in, w_out, b_out)) << name;
      }
      const ScopedEnv by_default("TRIDENT_MLP_RESIDUAL_IN_PRODUCT", std::nullopt);
      ASSERT_TRUE(trident::model::residual_gelu_mlp_applies(residual, x, w_in, b_in, w_out, b_out)) << name;
      y = trident::model::residual_gelu_mlp(residual, x, w_in, b_in, w_out, b_out);
    }
    EXPECT_EQ(trident::kernels::residual_bias_matmuls() - before, 1) << name;
    EXPECT_EQ(y.scalar_type(), at::kFloat) << name;
    EXPECT_EQ(y.sizes(), residual.sizes()) << name;
    y.backward(grad_y);

    const auto as_used = [&](const at::Tensor& t) {  // the operand the GPU multiplies, in float64
      return t.detach().to(c.type).cpu().to(at::kDouble).requires_grad_(true);
    };
    const auto as_float64 = [](const at::Tensor& t) { return t.detach().cpu().to(at::kDouble).requires_grad_(true); };
    const at::Tensor rres = as_float64(residual), rx = as_used(x), rw_in = as_used(w_in), rb_in = as_used(b_in),
                     rw_out = as_used(w_out), rb_out = as_float64(b_out);
    const at::Tensor rmlp = at::linear(at::gelu(at::linear(rx, rw_in, rb_in), "tanh"), rw_out, rb_out);
    const at::Tensor ry = rres + rmlp;
    ry.backward(grad_y.cpu().to(at::kDouble));
    EXPECT_LT(relative_error(y.detach().cpu().to(at::kDouble) - rres.detach(), rmlp.detach()), 2e-2) << name;
    EXPECT_TRUE(at::equal(residual.grad(), grad_y)) << name;
    expect_gradients_near({x, w_in, b_in, w_out, b_out}, {rx, rw_in, rb_in, rw_out, rb_out}, 2e-2, name);
    EXPECT_EQ(x.grad().scalar_type(), c.input) << name;
  }
  // A residual that needs no gradient (a frozen stream): x's gradient still comes back.
  const at::Tensor residual = at::randn({2, 12, 64}, cuda);
  const at::Tensor x = at::randn({2, 12, 64}, cuda).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor w_in = at::randn({32, 64}, cuda) * 0.05, b_in = at::randn({32}, cuda);
  const at::Tensor w_out = at::randn({64, 32}, cuda) * 0.05, b_out = at::randn({64}, cuda);
  at::Tensor y;
  {
    trident::optim::AutocastScope autocast(at::kBFloat16, /*cuda=*/true);
    ASSERT_TRUE(trident::model::residual_gelu_mlp_applies(residual, x, w_in, b_in, w_out, b_out));
    y = trident::model::residual_gelu_mlp(residual, x, w_in, b_in, w_out, b_out);
  }
  y.sum().backward();
  ASSERT_TRUE(x.grad().defined()) << "the residual needs no gradient";
  EXPECT_GT(x.grad().abs().sum().item<double>(), 0);
}

// The residual add fused into the LayerNorm's kernels (model::residual_layer_norm) gives the bits
// of the add and mixed_layer_norm apart, forward and backward: h = x + branch in fp32, the 16-bit
// LayerNorm of it, and the gradients of x, the 16-bit branch, the weight and the bias from
// incoming gradients of both h and the LayerNorm's output (the two that autograd's engine would
// add). Without a branch h is x, and x's gradient is the two gradients' sum. Every element
// compared exactly: both ways add the same two fp32 numbers once and round them once.
TEST(CudaKernels, ResidualLayerNormGivesTheBitsOfTheAddAndTheLayerNorm) {
  struct ResidualCase {
    int64_t rows, width;
    at::ScalarType type;
    bool branch;
  };
  const ResidualCase cases[] = {
      {16384, 768, at::kBFloat16, true}, {16384, 768, at::kBFloat16, false}, {33, 384, at::kHalf, true},
      {7, 1024, at::kBFloat16, true},    {4099, 128, at::kHalf, false},
  };
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& c : cases) {
    const std::string name = std::to_string(c.rows) + "x" + std::to_string(c.width) + " " + c10::toString(c.type) +
                             (c.branch ? " with a branch" : " without a branch");
    const auto leaf = [](const at::Tensor& t) { return t.detach().clone().requires_grad_(true); };
    const at::Tensor x = leaf(at::randn({2, c.rows, c.width}, cuda) * 3 + 1);
    const at::Tensor branch = c.branch ? leaf(at::randn({2, c.rows, c.width}, cuda).to(c.type)) : at::Tensor();
    const at::Tensor weight = leaf(at::randn({c.width}, cuda) + 1), bias = leaf(at::randn({c.width}, cuda));
    const at::Tensor grad_h = at::randn({2, c.rows, c.width}, cuda);
    const at::Tensor grad_y = at::randn({2, c.rows, c.width}, cuda).to(c.type);

    at::Tensor h, y;
    {
      trident::optim::AutocastScope autocast(c.type, /*cuda=*/true);
      ASSERT_TRUE(trident::model::residual_layer_norm_applies(x, branch, weight, bias)) << name;
      std::tie(h, y) = trident::model::residual_layer_norm(x, branch, weight, bias, 1e-5);
    }
    torch::autograd::backward({h, y}, {grad_h, grad_y});

    const at::Tensor rx = leaf(x), rbranch = c.branch ? leaf(branch) : at::Tensor();
    const at::Tensor rweight = leaf(weight), rbias = leaf(bias);
    at::Tensor rh, ry;
    {
      trident::optim::AutocastScope autocast(c.type, /*cuda=*/true);
      rh = c.branch ? rx + rbranch : rx;
      ry = trident::model::mixed_layer_norm(rh, rweight, rbias, 1e-5);
    }
    if (c.branch) {
      torch::autograd::backward({rh, ry}, {grad_h, grad_y});
    } else {
      ry.backward(grad_y);
      rx.mutable_grad() = rx.grad() + grad_h;
    }
    EXPECT_EQ(h.scalar_type(), at::kFloat) << name;
    EXPECT_EQ(y.scalar_type(), c.type) << name;
    EXPECT_TRUE(at::equal(h, rh)) << name;
    EXPECT_TRUE(at::equal(y, ry)) << name;
    const auto max_difference = [](const at::Tensor& a, const at::Tensor& b) {
      return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
    };
    ASSERT_TRUE(x.grad().defined() && weight.grad().defined() && bias.grad().defined()) << name;
    EXPECT_TRUE(at::equal(x.grad(), rx.grad())) << name << ": " << max_difference(x.grad(), rx.grad());
    EXPECT_TRUE(at::equal(weight.grad(), rweight.grad())) << name;
    EXPECT_TRUE(at::equal(bias.grad(), rbias.grad())) << name;
    if (c.branch) {
      ASSERT_TRUE(branch.grad().defined()) << name;
      EXPECT_EQ(branch.grad().scalar_type(), c.type) << name;
      EXPECT_TRUE(at::equal(branch.grad(), rbranch.grad()))
          << name << ": " << max_difference(branch.grad(), rbranch.grad());
    }
  }
}

// Where the kernels do not apply (a LayerNorm width that is not a multiple of 128, a bias width
// that is not a multiple of 8, no autocast, the CPU), ATen's layer_norm, linear and gelu run.
TEST(CudaKernels, MixedLayersFallBackToAten) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor w96 = at::ones({96}, cuda), b96 = at::zeros({96}, cuda);
  const at::Tensor w128 = at::ones({128}, cuda), b128 = at::zeros({128}, cuda);
  {
    trident::optim::AutocastScope autocast(at::kBFloat16, /*cuda=*/true);
    EXPECT_FALSE(trident::model::mixed_layer_norm_applies(at::randn({4, 96}, cuda), w96, b96));
    EXPECT_EQ(trident::model::mixed_layer_norm(at::randn({4, 96}, cuda), w96, b96, 1e-5).scalar_type(), at::kFloat);
    EXPECT_FALSE(trident::model::mixed_layer_norm_applies(at::randn({4, 128}), w128.cpu(), b128.cpu()));
    const at::Tensor x128 = at::randn({4, 128}, cuda);
    EXPECT_FALSE(trident::model::residual_layer_norm_applies(x128, at::randn({4, 128}, cuda), w128, b128))
        << "an fp32 branch";
    EXPECT_FALSE(trident::model::residual_layer_norm_applies(
        x128, at::randn({4 * 128 + 1}, cuda).to(at::kBFloat16).narrow(0, 1, 4 * 128).view({4, 128}), w128, b128))
        << "a branch 2 bytes off 8";
    const at::Tensor fp32_branch = at::randn({4, 128}, cuda);
    const auto [h, y] = trident::model::residual_layer_norm(x128, fp32_branch, w128, b128, 1e-5);
    EXPECT_TRUE(at::equal(h, x128 + fp32_branch)) << "the add apart";
    EXPECT_TRUE(at::equal(y, trident::model::mixed_layer_norm(h, w128, b128, 1e-5))) << "then the LayerNorm";
    const at::Tensor x = at::randn({4, 16}, cuda), w12 = at::randn({12, 16}, cuda), b12 = at::randn({12}, cuda);
    EXPECT_FALSE(trident::model::mixed_linear_applies(x, w12, b12));
    EXPECT_TRUE(trident::model::mixed_linear(x, w12, b12).isfinite().all().item<bool>());
    EXPECT_FALSE(trident::model::mixed_linear_applies(x.cpu(), w12.narrow(0, 0, 8).cpu(), b12.narrow(0, 0, 8).cpu()));
  }
  EXPECT_FALSE(trident::model::mixed_linear_applies(at::randn({4, 16}, cuda), at::randn({8, 16}, cuda),
                                                    at::randn({8}, cuda)))
      << "no autocast";
  EXPECT_FALSE(trident::model::mixed_layer_norm_applies(at::randn({4, 128}, cuda), w128, b128)) << "no autocast";
  EXPECT_EQ(trident::model::mixed_layer_norm(at::randn({4, 128}, cuda), w128, b128, 1e-5).scalar_type(), at::kFloat);
  // The MLP without autocast: the fp32 composition, the same bits.
  const at::Tensor x16 = at::randn({4, 16}, cuda), w_in = at::randn({32, 16}, cuda), b_in = at::randn({32}, cuda);
  const at::Tensor w_out = at::randn({16, 32}, cuda), b_out = at::randn({16}, cuda);
  EXPECT_FALSE(trident::model::gelu_mlp_applies(x16, w_in, b_in, w_out, b_out)) << "no autocast";
  EXPECT_TRUE(at::equal(trident::model::gelu_mlp(x16, w_in, b_in, w_out, b_out),
                        at::linear(at::gelu(at::linear(x16, w_in, b_in), "tanh"), w_out, b_out)));
}

// AdamW on flat CUDA buffers with trident's kernel (the default) against PyTorch's fused one
// (at::_fused_adamw_, TRIDENT_ADAMW_KERNEL=0), through optim::Optimizer as training calls it: the
// same parameters, moments and divided gradients after three steps, within 1e-6 relative (the
// same formula; the compilers may contract it into other fused multiply-adds, and LibTorch 2.11's
// kernel seems to take 1 - beta2 in float, 2.4e-7 relative off at this beta2 of 0.95: see
// Gpu.AdamWKernelTrainsAsPyTorchsFused). Lengths that
// leave a tail after the 16-byte vectors, weight decay, a gradient divisor, and a step skipped on
// the device; parameters and gradients off the 16-byte boundary where the moments are on it go to
// PyTorch's kernel (the same results, no launch of this one).
TEST(CudaKernels, AdamWKernelStepsAsPyTorchsFused) {
  ASSERT_TRUE(trident::kernels::adamw_built());
  struct AdamWCase {
    int64_t n, offset;
    bool divide, skip_second;
  };
  const AdamWCase cases[] = {{4099, 0, false, false}, {(1 << 20) + 3, 0, true, false}, {1000, 0, true, true},
                             {3, 0, false, true},     {1000, 1, true, false}};
  trident::config::Deck deck;
  deck.optim.lr = 3e-3;
  deck.optim.weight_decay = 0.1;
  deck.optim.beta2 = 0.95;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& c : cases) {
    const std::string name = std::to_string(c.n) + " at offset " + std::to_string(c.offset) +
                             (c.divide ? ", divided" : "") + (c.skip_second ? ", second step skipped" : "");
    const at::Tensor start = at::randn({c.n}, cuda) * 0.02;
    std::vector<at::Tensor> grads;
    for (int s = 0; s < 3; ++s) grads.push_back(at::randn({c.n}, cuda) * (s + 1));
    struct Result {
      at::Tensor params, exp_avg, exp_avg_sq, last_grads;
      int64_t launches, steps;
    };
    const auto train = [&](bool own) {
      const ScopedEnv kernel("TRIDENT_ADAMW_KERNEL", own ? std::nullopt : std::optional<std::string>("0"));
      const int64_t before = trident::kernels::adamw_steps();
      auto optimizer = trident::optim::make_optimizer(deck);
      at::Tensor params = at::empty({c.n + c.offset}, cuda).narrow(0, c.offset, c.n).copy_(start);
      at::Tensor g;
      for (int s = 0; s < 3; ++s) {
        g = at::empty({c.n + c.offset}, cuda).narrow(0, c.offset, c.n).copy_(grads[s]);
        const at::Tensor divisor = c.divide ? at::full({}, 4.0, cuda) : at::Tensor();
        if (c.skip_second)
          optimizer->step_unless(params, g, deck.optim.lr, at::full({}, s == 1 ? 1.0 : 0.0, cuda), divisor);
        else
          optimizer->step(params, g, deck.optim.lr, divisor);
      }
      const auto state = optimizer->state();
      return Result{params.cpu(), state.at(0).second.cpu(), state.at(1).second.cpu(), g.cpu(),
                    trident::kernels::adamw_steps() - before, optimizer->steps()};
    };
    const Result own = train(true), fused = train(false);
    EXPECT_EQ(own.launches, c.offset == 0 ? 3 : 0) << name;  // off the boundary: PyTorch's kernel
    EXPECT_EQ(fused.launches, 0) << name;
    EXPECT_EQ(own.steps, c.skip_second ? 2 : 3) << name;
    EXPECT_EQ(own.steps, fused.steps) << name;
    EXPECT_FALSE(at::equal(own.params, start.cpu())) << name;
    EXPECT_LT(relative_error(own.params, fused.params), 1e-6) << name;
    EXPECT_LT(relative_error(own.exp_avg, fused.exp_avg), 1e-6) << name;
    EXPECT_LT(relative_error(own.exp_avg_sq, fused.exp_avg_sq), 1e-6) << name;
    EXPECT_LT(relative_error(own.last_grads, fused.last_grads), 1e-6) << name;  // divided in place, or left
    if (c.divide) {
      EXPECT_LT(relative_error(own.last_grads * 4, grads[2].cpu()), 1e-6) << name;
    }
  }
}

// kernels::adamw_step called directly on four buffers that start 1, 2 or 3 floats past a 16-byte
// boundary (a head element by element, 16-byte vectors, a tail) and on buffers of different
// alignments (every element one at a time), against at::_fused_adamw_ on copies: one step with a
// gradient divisor within 1e-6 relative, then a step flagged to skip, which leaves all four
// buffers as they were.
TEST(CudaKernels, AdamWKernelSplitsUnalignedBuffers) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const int64_t n = 4099;
  const trident::kernels::AdamWSettings settings{3e-3, 0.9, 0.95, 0.1, 1e-8};
  for (const int64_t offset : {1, 2, 3, -1}) {  // -1: the parameters at 1, the rest at 0
    const std::string name = offset < 0 ? "parameters off the others' alignment" : "offset " + std::to_string(offset);
    const auto buffer = [&](int64_t at_offset, const at::Tensor& values) {
      return at::empty({n + 3}, cuda).narrow(0, at_offset, n).copy_(values);
    };
    const at::Tensor p0 = at::randn({n}, cuda) * 0.02, g0 = at::randn({n}, cuda), m0 = at::randn({n}, cuda) * 0.1,
                     v0 = at::rand({n}, cuda) * 0.01;
    const int64_t first = offset < 0 ? 1 : offset, rest = offset < 0 ? 0 : offset;
    at::Tensor p = buffer(first, p0), g = buffer(rest, g0), m = buffer(rest, m0), v = buffer(rest, v0);
    at::Tensor rp = p0.clone(), rg = g0.clone(), rm = m0.clone(), rv = v0.clone();
    const at::Tensor step = at::full({}, 3.0, cuda), divisor = at::full({}, 2.0, cuda);
    const int64_t before = trident::kernels::adamw_steps();
    trident::kernels::adamw_step(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n,
                                 settings, step.data_ptr<float>(), divisor.data_ptr<float>(), nullptr, 0,
                                 trident::comm::cuda_current_stream(0));
    at::_fused_adamw_({rp}, {rg}, {rm}, {rv}, {}, {step}, settings.lr, settings.beta1, settings.beta2,
                      settings.weight_decay, settings.eps, /*amsgrad=*/false, /*maximize=*/false, divisor,
                      std::nullopt);
    EXPECT_EQ(trident::kernels::adamw_steps() - before, 1) << name;
    EXPECT_LT(relative_error(p.cpu(), rp.cpu()), 1e-6) << name;
    EXPECT_LT(relative_error(g.cpu(), rg.cpu()), 1e-6) << name;
    EXPECT_LT(relative_error(m.cpu(), rm.cpu()), 1e-6) << name;
    EXPECT_LT(relative_error(v.cpu(), rv.cpu()), 1e-6) << name;
    EXPECT_FALSE(at::equal(p, p0)) << name;
    const at::Tensor kept[] = {p.clone(), g.clone(), m.clone(), v.clone()};
    const at::Tensor skip = at::full({}, 1.0, cuda);
    trident::kernels::adamw_step(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n,
                                 settings, step.data_ptr<float>(), divisor.data_ptr<float>(), skip.data_ptr<float>(), 0,
                                 trident::comm::cuda_current_stream(0));
    const at::Tensor now[] = {p, g, m, v};
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(at::equal(now[i], kept[i])) << name << ", buffer " << i << " after a skip";
  }
}

// `trident plan` asks the driver (dlopen, comm/node_gpu.cpp) what the training asks the CUDA
// runtime: the same first visible device, its name and memory.
TEST(NodeGpu, DriverNamesTheDeviceTheRuntimeSees) {
  const auto gpu = trident::comm::first_visible_gpu();
  ASSERT_TRUE(gpu.has_value()) << "the driver named no GPU where the runtime sees "
                               << trident::comm::cuda_visible_devices();
  EXPECT_EQ(gpu->name, trident::comm::cuda_device_name(0));
  EXPECT_EQ(gpu->total_bytes, trident::comm::cuda_total_memory_bytes(0));
}

// `trident plan`'s estimate of what each GPT layer keeps for its backward on a GPU
// (LayerInfo::saved) against the caching allocator's bytes after its forward
// (tests/saved_bytes.hpp): bf16 and fp16 (trident's fused layers, 16-bit weight copies), fp32
// (LibTorch's layers, the memory-efficient attention), and recomputed blocks. Within 1% and 8 KiB
// a layer: the allocator rounds each block up to 512 bytes, and the attention keeps two small
// random-number state tensors the estimate leaves out.
TEST(GpuMemory, PlanEstimatesWhatTheLayersKeep) {
  if (TORCH_VERSION_MAJOR < 2) GTEST_SKIP() << "LibTorch 1.x's attention keeps the T x T probabilities";
  trident::config::Deck deck;
  deck.model.kind = "gpt";
  deck.model.layers = 2;
  deck.model.heads = 4;
  deck.model.d_model = 128;
  deck.model.seq_len = 128;
  const trident::model::InputSpec input{{128}, 512, true};
  const int64_t micro_batch = 4;
  for (const std::string precision : {"bf16", "fp16", "fp32"})
    for (const bool recompute : {false, true}) {
      deck.optim.precision = precision;
      deck.model.recompute = recompute;
      const auto described = trident::model::describe_model(deck, input);
      const auto measured = trident::measure::measured_saved_bytes(deck, input, micro_batch, torch::Device(torch::kCUDA, 0));
      ASSERT_EQ(measured.size(), described.size());
      for (size_t l = 0; l < described.size(); ++l) {
        const double estimate = static_cast<double>(described[l].saved.of(micro_batch));
        EXPECT_NEAR(static_cast<double>(measured[l]), estimate, 0.01 * estimate + 8192)
            << precision << (recompute ? ", recomputed" : "") << ", layer " << described[l].name;
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (trident::comm::cuda_visible_devices() == 0) {
    std::puts("skipped: no GPU visible");
    return 77;
  }
  return RUN_ALL_TESTS();
}
