// A backward split into input and weight gradients (parallel/split_backward.hpp) gives what one
// whole backward gives: after B the input's gradient and no parameter's; after W every
// parameter's, and the input's not counted twice. Layers with their own backward formulas:
// linear, layer norm, GELU, convolution, batch norm.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "parallel/split_backward.hpp"

using trident::parallel::SplitBackward;

namespace {

struct Gradients {
  at::Tensor input;
  std::vector<at::Tensor> params;
};

// One whole backward, or B then W, of `model` at `x` with output gradient `dy`.
template <typename Model>
Gradients run(Model& model, const at::Tensor& x_value, const at::Tensor& dy, bool split, bool input_grad = true) {
  model->zero_grad();
  for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  at::Tensor x = x_value.clone().requires_grad_(input_grad);
  at::Tensor y = model->forward(x);
  if (!split) {
    y.backward(dy);
  } else {
    SplitBackward backward(y, dy, x);
    y = at::Tensor();  // only the split holds the graph now
    if (input_grad) {
      EXPECT_TRUE(x.grad().defined());
    }
    for (auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined()) << "B computed a parameter's gradient";
    const at::Tensor input_after_b = input_grad ? x.grad().clone() : at::Tensor();
    backward.weight_gradients();
    if (input_grad) {
      EXPECT_TRUE(at::equal(x.grad(), input_after_b)) << "W changed the input's gradient";
    }
  }
  Gradients g{input_grad ? x.grad().clone() : at::Tensor(), {}};
  for (auto& p : model->parameters()) g.params.push_back(p.grad().clone());
  return g;
}

template <typename Model>
void expect_split_equals_whole(Model& model, const at::Tensor& x, bool input_grad = true) {
  torch::manual_seed(1);
  const at::Tensor dy = at::randn_like(model->forward(x).detach());
  const Gradients whole = run(model, x, dy, false, input_grad), split = run(model, x, dy, true, input_grad);
  if (input_grad) {
    EXPECT_TRUE(at::allclose(split.input, whole.input, 1e-6, 1e-7));
  }
  ASSERT_EQ(split.params.size(), whole.params.size());
  for (size_t i = 0; i < whole.params.size(); ++i)
    EXPECT_TRUE(at::allclose(split.params[i], whole.params[i], 1e-6, 1e-7)) << "parameter " << i;
}

}  // namespace

TEST(SplitBackward, LinearLayerNormGeluEqualsWholeBackward) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(12, 16), torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})),
                              torch::nn::GELU(), torch::nn::Linear(16, 5));
  expect_split_equals_whole(model, at::randn({7, 12}));
}

TEST(SplitBackward, ConvolutionAndBatchNormEqualWholeBackward) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)), torch::nn::BatchNorm2d(4),
                              torch::nn::ReLU(), torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 2, 3)));
  model->eval();  // the running statistics stay put between the two runs
  expect_split_equals_whole(model, at::randn({2, 3, 8, 8}));
}

TEST(SplitBackward, WithoutAnInputGradientWIsTheWholeBackward) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
  expect_split_equals_whole(model, at::randn({4, 6}), /*input_grad=*/false);
}
