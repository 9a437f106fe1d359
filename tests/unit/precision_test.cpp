// Mixed precision pieces: the dynamic loss scaler's rules and autocast's scope on the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "optim/device_step.hpp"
#include "optim/optimizer.hpp"
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

// The step's decisions on the device (a GPU step's path) against the host's rules they replace:
// LossScaler for fp16's skip and scale, clip_divisor for clipping. Gradient divisor, scale, window
// and skip count bit for bit over steps with and without overflows, clipping and not; the
// divided gradients are clip_by_global_norm's within rounding.
TEST(DeviceStep, Fp16DecisionsEqualTheHostRules) {
  optim::LossScaler host(1024.0, 2.0, 0.5, 2), on_device_state(1024.0, 2.0, 0.5, 2);
  optim::DeviceStep device(torch::TensorOptions(), /*clip_norm=*/1.0, /*accumulation=*/2, &on_device_state);
  torch::manual_seed(5);
  const std::vector<bool> overflow{false, false, true, false, false, false, true, true, false};
  for (size_t i = 0; i < overflow.size(); ++i) {
    // Scaled gradients; every other step small enough not to clip.
    auto grads = torch::randn({64}) * host.scale() * (i % 2 ? 0.01 : 1.0);
    if (overflow[i]) grads[7] = INFINITY;
    auto clipped = grads.clone();
    const auto squared = grads.pow(2).sum().to(torch::kDouble);
    const double scale = host.scale();
    double squares = squared.item<double>(), norm = 0, divisor = 0;
    if (host.update(std::isfinite(squares))) {
      squares /= scale * scale;
      norm = optim::global_norm(squares);
      divisor = scale * optim::clip_divisor(norm, 1.0);
      clipped.div_(scale);
      optim::clip_by_global_norm(clipped, squares, 1.0);
    }
    EXPECT_EQ(device.loss_factor(0.25).item<float>(), static_cast<float>(0.25 * scale)) << "step " << i;
    const auto decided = device.decide(squared, torch::full({}, 3.0, torch::kDouble), static_cast<int64_t>(i + 1));
    EXPECT_EQ(decided.skip.item<float>(), overflow[i] ? 1.0f : 0.0f) << "step " << i;
    const auto reading = device.read();
    if (!overflow[i]) {
      EXPECT_EQ(decided.grad_divisor.item<float>(), static_cast<float>(divisor)) << "step " << i;
      EXPECT_EQ(decided.grad_divisor.item<float>() == static_cast<float>(scale), i % 2 == 1) << "clips unless small";
      EXPECT_TRUE(torch::allclose(grads / decided.grad_divisor, clipped, 1e-6, 0)) << "step " << i;
    }
    EXPECT_EQ(reading.last_norm, norm) << "step " << i;
    EXPECT_EQ(reading.last_loss, 1.5);
    EXPECT_EQ(reading.diverged_step, 0);
    EXPECT_EQ(on_device_state.scale(), host.scale()) << "step " << i;
    EXPECT_EQ(on_device_state.good_steps(), host.good_steps()) << "step " << i;
    EXPECT_EQ(on_device_state.skipped_steps(), host.skipped_steps()) << "step " << i;
  }
  EXPECT_EQ(host.skipped_steps(), 3);
  EXPECT_EQ(device.read().loss_sum, 1.5 * static_cast<double>(overflow.size()));
}

// fp32/bf16: the first non-finite norm is recorded with its step, norm and loss, and every
// update from it on is skipped (the host stops the run when it reads it).
TEST(DeviceStep, DivergenceIsRecordedAndSkipsEveryLaterUpdate) {
  optim::DeviceStep device(torch::TensorOptions(), /*clip_norm=*/0.0, /*accumulation=*/1, nullptr);
  EXPECT_FALSE(device.loss_factor(0.5).defined());
  for (int64_t step = 1; step <= 5; ++step) {
    auto grads = torch::ones({8});
    if (step == 3) grads[0] = NAN;
    const auto decided = device.decide(grads.pow(2).sum().to(torch::kDouble),
                                       torch::full({}, static_cast<double>(step), torch::kDouble), step);
    EXPECT_EQ(decided.skip.item<float>(), step >= 3 ? 1.0f : 0.0f) << "step " << step;
    if (step != 3) {
      EXPECT_EQ(decided.grad_divisor.item<float>(), 1.0f) << "clip_norm 0 leaves gradients alone";
    }
  }
  const auto reading = device.read();
  EXPECT_EQ(reading.diverged_step, 3);
  EXPECT_TRUE(std::isnan(reading.diverged_norm));
  EXPECT_EQ(reading.diverged_loss, 3.0);
  EXPECT_EQ(reading.last_norm, torch::scalar_tensor(8.0, torch::kDouble).sqrt().item<double>());
  EXPECT_NEAR(reading.last_norm, std::sqrt(8.0), 1e-15);
}
