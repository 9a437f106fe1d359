// Mixed precision pieces: the dynamic loss scaler's rules and autocast's scope on the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "optim/precision.hpp"

using namespace trident;

TEST(LossScaler, AnOverflowSkipsTheStepAndHalvesTheScale) {
  optim::LossScaler scaler(1024.0, 2.0, 0.5, 3);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // The window of good steps restarts after an overflow: two more good steps do not grow it.
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(true));  // the third in a row
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.good_steps(), 0);
}

TEST(LossScaler, RepeatedOverflowsStopAtOne) {
  optim::LossScaler scaler(8.0, 2.0, 0.5, 2000);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_EQ(scaler.skipped_steps(), 10);
}

TEST(Autocast, Bf16MatmulsInsideTheScopeFp32Outside) {
  torch::manual_seed(0);
  torch::nn::Linear linear(64, 32);
  const auto x = torch::randn({8, 64});
  const auto reference = linear->forward(x);
  torch::Tensor inside;
  {
    optim::AutocastScope scope(optim::compute_type("bf16"), /*cuda=*/false);
    inside = linear->forward(x);
  }
  EXPECT_EQ(inside.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(linear->weight.scalar_type(), torch::kFloat);  // the master weights stay fp32
  // bf16 keeps 8 bits of mantissa: a relative error of order 2^-8 on sums of 64 products.
  EXPECT_LT((inside.to(torch::kFloat) - reference).abs().max().item<double>(),
            0.02 * reference.abs().max().item<double>());
  EXPECT_GT((inside.to(torch::kFloat) - reference).abs().max().item<double>(), 0.0);
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);  // off again after the scope
  {
    optim::AutocastScope off(optim::compute_type("fp32"), false);
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
  }
}
