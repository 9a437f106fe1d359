// trident's flat optimizers against LibTorch's own torch::optim on the same parameters and
// gradients: an independent implementation of the same update rules.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/deck.hpp"
#include "optim/optimizer.hpp"
#include "optim/lr_schedule.hpp"

using namespace trident;

namespace {

void expect_matches_torch(config::Deck deck, torch::optim::Optimizer& reference, torch::Tensor reference_param,
                          bool fused = false) {
  auto ours = optim::make_optimizer(deck, fused);
  torch::Tensor params = reference_param.detach().clone();
  torch::manual_seed(3);
  for (int step = 0; step < 5; ++step) {
    const auto grad = torch::randn_like(params);
    reference_param.mutable_grad() = grad.clone();
    reference.step();
    ours->step(params, grad, deck.optim.lr);
    EXPECT_TRUE(torch::allclose(params, reference_param.detach(), 1e-6, 1e-6)) << "step " << step;
  }
}

}  // namespace

TEST(Optim, AdamWMatchesTorch) {
  config::Deck deck;
  deck.optim.lr = 1e-2;
  deck.optim.weight_decay = 0.1;
  auto p = torch::randn({257}).requires_grad_(true);
  torch::optim::AdamW reference({p}, torch::optim::AdamWOptions(1e-2).weight_decay(0.1).betas({0.9, 0.999}).eps(1e-8));
  expect_matches_torch(deck, reference, p);
}

// The fused kernel (what a GPU rank runs, on LibTorch >= 2) against torch::optim::AdamW too,
// here on the CPU where LibTorch >= 2.4 has it.
TEST(Optim, FusedAdamWMatchesTorch) {
  if (!optim::fused_optimizers_built()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused AdamW on the CPU";
  config::Deck deck;
  deck.optim.lr = 1e-2;
  deck.optim.weight_decay = 0.1;
  auto p = torch::randn({257}).requires_grad_(true);
  torch::optim::AdamW reference({p}, torch::optim::AdamWOptions(1e-2).weight_decay(0.1).betas({0.9, 0.999}).eps(1e-8));
  expect_matches_torch(deck, reference, p, /*fused=*/true);
}

static void expect_sgd_momentum_matches_torch(bool fused) {
  config::Deck deck;
  deck.optim.name = "sgd";
  deck.optim.lr = 0.05;
  deck.optim.momentum = 0.9;
  deck.optim.weight_decay = 1e-3;
  auto p = torch::randn({100}).requires_grad_(true);
  torch::optim::SGD reference({p}, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  expect_matches_torch(deck, reference, p, fused);
}

TEST(Optim, SgdMomentumMatchesTorch) { expect_sgd_momentum_matches_torch(/*fused=*/false); }

TEST(Optim, ClipByGlobalNormMatchesTorch) {
  auto a = torch::randn({30}).requires_grad_(true), b = torch::randn({7}).requires_grad_(true);
  auto flat = torch::randn({37}) * 3;
  a.mutable_grad() = flat.narrow(0, 0, 30).clone();
  b.mutable_grad() = flat.narrow(0, 30, 7).clone();
  const double torch_norm = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{a, b}, 1.0);
  const double norm = optim::clip_by_global_norm(flat, flat.pow(2).sum().item<double>(), 1.0);
  EXPECT_NEAR(norm, torch_norm, 1e-4);
  EXPECT_TRUE(torch::allclose(flat, torch::cat({a.grad(), b.grad()}), 1e-6, 1e-6));
}

TEST(Optim, ScheduleWarmupThenCosine) {
  optim::LrSchedule s{"cosine", 1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(109), 0.1, 1e-12);
  EXPECT_NEAR(s.at(10 + 99 / 2), 0.55, 0.01);
  optim::LrSchedule c{"constant", 0.5, 0.0, 0, 100};
  EXPECT_DOUBLE_EQ(c.at(77), 0.5);
}

// The fused SGD kernel (what a GPU rank runs, on LibTorch >= 2.4) against torch::optim::SGD.
TEST(Optim, FusedSgdMatchesTorch) {
  if (!optim::fused_optimizers_built()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused SGD on the CPU";
  expect_sgd_momentum_matches_torch(/*fused=*/true);
}

// step_unless: a skipped update leaves parameters, state and the step count as they were; an
// unskipped one is step() on the divided gradients bit for bit, for AdamW and SGD (the GPU's
// path, with the decision on the device and the unscaling and clipping in the kernel).
TEST(Optim, StepUnlessSkipsExactlyWhereFlagged) {
  if (!optim::fused_optimizers_built()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused optimizers";
  for (const std::string name : {"adamw", "sgd"}) {
    config::Deck deck;
    deck.optim.name = name;
    deck.optim.momentum = 0.9;
    deck.optim.weight_decay = 0.01;
    auto host = optim::make_optimizer(deck, /*fused=*/true), device = optim::make_optimizer(deck, /*fused=*/true);
    torch::manual_seed(3);
    auto p_host = torch::randn({300}), p_device = p_host.clone();
    const std::vector<bool> skips{false, true, false, true, true, false};
    for (size_t i = 0; i < skips.size(); ++i) {
      const auto g = torch::randn({300});
      const auto divisor = torch::full({}, 1.0 + 0.37 * static_cast<double>(i), torch::kFloat);
      if (!skips[i]) host->step(p_host, g / divisor, 1e-2);
      device->step_unless(p_device, g.clone(), 1e-2, torch::full({}, skips[i] ? 1.0 : 0.0), divisor);
      ASSERT_TRUE(torch::equal(p_host, p_device)) << name << " step " << i;
    }
    EXPECT_EQ(device->steps(), 3) << name;
    const auto host_state = host->state(), device_state = device->state();
    for (size_t k = 0; k < host_state.size(); ++k)
      EXPECT_TRUE(torch::equal(host_state[k].second, device_state[k].second)) << name << " " << host_state[k].first;
  }
}
