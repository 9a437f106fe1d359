// model::cross_entropy: bf16/fp16 logits, read in fp32 slices without an fp32 copy of the whole
// tensor, give torch's cross-entropy of the same values in fp32, and its gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/loss.hpp"

using namespace trident;

namespace {

// Loss and gradient of ours on `logits` (low precision) against torch's on an fp32 copy.
void expect_matches_fp32_reference(const torch::Tensor& logits, const torch::Tensor& labels, bool mean,
                                   int64_t slice_elements) {
  auto ours_in = logits.clone().requires_grad_(true);
  const auto ours = model::cross_entropy(ours_in, labels, mean, slice_elements);
  ours.backward();

  auto reference_in = logits.to(torch::kFloat).requires_grad_(true);
  namespace F = torch::nn::functional;
  auto options = F::CrossEntropyFuncOptions();
  if (!mean) options.reduction(torch::kSum);
  const auto reference = F::cross_entropy(reference_in.flatten(0, -2), labels.flatten(), options);
  reference.backward();

  EXPECT_EQ(ours.scalar_type(), torch::kFloat);
  // The same fp32 arithmetic on the same inputs, summed in another order: fp32 rounding.
  EXPECT_NEAR(ours.item<double>(), reference.item<double>(), 1e-5 * std::abs(reference.item<double>()));
  ASSERT_EQ(ours_in.grad().scalar_type(), logits.scalar_type());
  // Our gradient is rounded once to the logits' type; torch's is fp32: one rounding apart.
  const auto expected = reference_in.grad().to(logits.scalar_type()).to(torch::kFloat);
  const auto got = ours_in.grad().to(torch::kFloat);
  const double tolerance = logits.scalar_type() == torch::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
  EXPECT_TRUE(torch::allclose(got, expected, tolerance, 1e-7))
      << "max difference " << (got - expected).abs().max().item<double>();
}

}  // namespace

TEST(CrossEntropy, Bf16LogitsInSlicesMatchFp32) {
  torch::manual_seed(0);
  const auto logits = (torch::randn({37, 11}) * 4).to(torch::kBFloat16);
  const auto labels = torch::randint(0, 11, {37});
  for (const bool mean : {true, false})
    for (const int64_t slice : {int64_t{1}, int64_t{11 * 5}, int64_t{1} << 25})  // a row, 5 rows, all at once
      expect_matches_fp32_reference(logits, labels, mean, slice);
}

TEST(CrossEntropy, GptShapedFp16Logits) {
  torch::manual_seed(1);
  const auto logits = (torch::randn({3, 8, 50}) * 3).to(torch::kHalf);  // [n, T, vocab]
  const auto labels = torch::randint(0, 50, {3, 8});
  expect_matches_fp32_reference(logits, labels, /*mean=*/true, 50 * 7);
}

// fp32 logits take torch's own cross_entropy: the fp32 path's numbers are unchanged.
TEST(CrossEntropy, Fp32IsTorchsCrossEntropy) {
  torch::manual_seed(2);
  const auto logits = torch::randn({9, 6}), labels = torch::randint(0, 6, {9});
  EXPECT_TRUE(torch::equal(model::cross_entropy(logits, labels, true),
                           torch::nn::functional::cross_entropy(logits, labels)));
}
