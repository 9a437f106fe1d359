// trident's own CUDA kernels (lib/kernels) against float64 references computed on the CPU from
// the same inputs (label gpu; exit 77, skipped, where no GPU is visible). Fresh random inputs for
// every case, shapes that take the vectorised path and shapes that do not.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "comm/cuda_runtime.hpp"
#include "kernels/cross_entropy.hpp"
#include "model/loss.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (trident::comm::cuda_visible_devices() == 0) {
    std::puts("skipped: no GPU visible");
    return 77;
  }
  return RUN_ALL_TESTS();
}
