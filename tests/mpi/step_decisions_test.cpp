// A step's decisions (fp16 skip and scale, clipping, stopping on divergence) made on the device,
// as GPU ranks make them to avoid a host wait per step, against the same decisions made on the
// host after a copy: the same run bit for bit, in every layout. Both run here on the CPU over the
// same fused optimizer kernels (TRIDENT_TEST_STEP_DECISIONS), which LibTorch has from 2.4: the
// CUDA flavour's tests run this in CI; the Debian LibTorch 1.13 build skips it.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint_files.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"

using namespace trident;
using namespace trident::test_support;
namespace fs = std::filesystem;

namespace {

struct Decided {
  Trained trained;
  std::string diverged;  // Diverged's message, if the run stopped so
};

// `deck` trained with its step decisions made where `where` says (host | device). Not validated:
// fp16 on the CPU is refused to users (LibTorch 1.13 has no CPU fp16 autocast) but runs here.
Decided run_deciding(config::Deck deck, const std::string& where, const std::string& name) {
  setenv("TRIDENT_TEST_STEP_DECISIONS", where.c_str(), 1);
  deck.run.output_dir = dir_for(name + "_" + where, MPI_COMM_WORLD);
  Decided out;
  out.trained.output_dir = deck.run.output_dir;
  try {
    train::Trainer trainer(deck, MPI_COMM_WORLD);
    out.trained.result = trainer.run();
    out.trained.params = trainer.full_parameters();
  } catch (const Diverged& e) {
    out.diverged = e.what();
  }
  unsetenv("TRIDENT_TEST_STEP_DECISIONS");
  return out;
}

std::string final_checkpoint(const Trained& t) {
  char file[32];
  std::snprintf(file, sizeof(file), "step_%07lld.h5", static_cast<long long>(t.result.steps));
  return t.output_dir + "/checkpoints/" + file;
}

// The same logged losses and norms, parameters and final checkpoint (every dataset, and the
// optimizer's step count and fp16 state in its metadata).
void expect_same_run(const config::Deck& deck, const std::string& name) {
  const auto host = run_deciding(deck, "host", deck.run.name), device = run_deciding(deck, "device", deck.run.name);
  ASSERT_EQ(host.diverged, "") << name;
  ASSERT_EQ(device.diverged, "") << name;
  EXPECT_EQ(device.trained.result.logged_losses, host.trained.result.logged_losses) << name;
  EXPECT_EQ(device.trained.result.logged_grad_norms, host.trained.result.logged_grad_norms) << name;
  EXPECT_EQ(device.trained.result.train_loss, host.trained.result.train_loss) << name;
  ASSERT_EQ(device.trained.params.size(), host.trained.params.size());
  for (size_t i = 0; i < host.trained.params.size(); ++i)
    EXPECT_TRUE(torch::equal(device.trained.params[i].second, host.trained.params[i].second))
        << name << ": " << host.trained.params[i].first;
  expect_identical_checkpoints(final_checkpoint(host.trained), final_checkpoint(device.trained), name);
  if (world_rank() == 0) {
    const auto h = checkpoint::Reader(final_checkpoint(host.trained)).meta();
    const auto d = checkpoint::Reader(final_checkpoint(device.trained)).meta();
    EXPECT_EQ(d.optimizer_steps, h.optimizer_steps) << name;
    EXPECT_EQ(d.loss_scale, h.loss_scale) << name;
    EXPECT_EQ(d.loss_scale_good_steps, h.loss_scale_good_steps) << name;
    EXPECT_EQ(d.skipped_steps, h.skipped_steps) << name;
  }
}

config::Deck clipped_deck(const std::string& kind, const std::string& name) {
  auto deck = tiny_deck(kind, name);
  deck.run.max_steps = 6;
  deck.run.log_every = 4;          // the device's outcome is read at steps 3 (save), 4 (log), 6
  deck.checkpoint.every_steps = 3;
  deck.optim.clip_grad_norm = 0.05;  // small: most steps clip
  return deck;
}

bool fused_kernels() { return optim::fused_optimizers_built(); }

}  // namespace

TEST(StepDecisions, DeviceEqualsHostDataParallel) {
  if (!fused_kernels()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused optimizers";
  expect_same_run(clipped_deck("cnn", "sd_dp_adamw"), "sd_dp_adamw (cnn)");
  auto sgd = clipped_deck("mlp", "sd_dp_sgd");
  sgd.optim.name = "sgd";
  sgd.optim.momentum = 0.9;
  expect_same_run(sgd, "sd_dp_sgd");
}

TEST(StepDecisions, DeviceEqualsHostZeroAndPipeline) {
  if (!fused_kernels()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused optimizers";
  for (int zero : {1, 2, 3}) {
    auto deck = clipped_deck("cnn", "sd_zero" + std::to_string(zero));
    deck.parallel.zero = zero;
    expect_same_run(deck, deck.run.name + " (cnn)");
  }
  if (world_size() % 2 != 0) return;
  auto deck = clipped_deck("mlp", "sd_pp");
  deck.parallel.pp = 2;
  deck.parallel.zero = 1;
  expect_same_run(deck, "sd_pp");
}

// fp16 with an overflow injected at step 2: skipped alike, the same scale, window and count.
TEST(StepDecisions, Fp16OverflowSkippedAlike) {
  if (!fused_kernels()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused optimizers";
  auto deck = clipped_deck("mlp", "sd_fp16");
  deck.optim.precision = "fp16";
  setenv("TRIDENT_TEST_GRADIENT_OVERFLOW", "2", 1);
  expect_same_run(deck, "sd_fp16");
  unsetenv("TRIDENT_TEST_GRADIENT_OVERFLOW");
  if (world_rank() == 0) {
    const auto meta = checkpoint::Reader(dir_for("sd_fp16_device", MPI_COMM_WORLD) + "/checkpoints/step_0000006.h5").meta();
    EXPECT_EQ(meta.skipped_steps, 1);
    EXPECT_EQ(meta.optimizer_steps, 5);
    EXPECT_EQ(meta.loss_scale, 32768.0);
  }
}

// A non-finite norm at step 3 (fp32): the host stops at step 3; the device skips the update and
// every later one, and the run stops at the next read (step 4: log and save) naming step 3. Both
// leave the step-2 checkpoint only, the same file.
TEST(StepDecisions, DivergenceNamesTheSameStepAndSavesNothingAfter) {
  if (!fused_kernels()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused optimizers";
  auto deck = clipped_deck("mlp", "sd_diverged");
  deck.checkpoint.every_steps = 2;
  deck.run.fail_timeout_s = 0;  // no watchdog: the runs end by an exception, not collectively
  setenv("TRIDENT_TEST_GRADIENT_OVERFLOW", "3", 1);
  const auto host = run_deciding(deck, "host", "sd_diverged"), device = run_deciding(deck, "device", "sd_diverged");
  unsetenv("TRIDENT_TEST_GRADIENT_OVERFLOW");
  EXPECT_EQ(host.diverged.rfind("step 3: the gradient norm is inf", 0), 0u) << host.diverged;
  EXPECT_EQ(device.diverged.rfind("step 3: the gradient norm is inf", 0), 0u) << device.diverged;
  EXPECT_NE(device.diverged.find("not updated from that step on"), std::string::npos) << device.diverged;
  if (world_rank() != 0) return;
  for (const auto* run : {&host, &device}) {
    std::vector<std::string> files;
    for (const auto& f : fs::directory_iterator(run->trained.output_dir + "/checkpoints"))
      if (f.path().extension() == ".h5") files.push_back(f.path().filename().string());
    EXPECT_EQ(files, std::vector<std::string>{"step_0000002.h5"}) << run->trained.output_dir;
  }
  expect_identical_checkpoints(host.trained.output_dir + "/checkpoints/step_0000002.h5",
                               device.trained.output_dir + "/checkpoints/step_0000002.h5", "sd_diverged");
}
