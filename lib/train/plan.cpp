#include "train/plan.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>

#include "data/dataset.hpp"
#include "model/model.hpp"
#include "parallel/grad_sync.hpp"

namespace trident::train {

namespace {

// The dataset's sample shape when the file is there, Fashion-MNIST's otherwise.
model::InputSpec input_of(const config::Deck& deck, std::string& source) {
  if (std::filesystem::exists(deck.data.path)) {
    data::SplitReader reader(deck.data.path, "train");
    source = deck.data.path;
    return {reader.sample_shape(), reader.classes()};
  }
  source = "assumed 1x28x28, 10 classes (" + deck.data.path + " not found)";
  return {{1, 28, 28}, 10};
}

std::string gib(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (b >= (1 << 20)) return fmt::format("{:.2f} MiB", b / (1 << 20));
  return fmt::format("{:.1f} KiB", b / 1024);
}

}  // namespace

std::string plan_text(const config::Deck& deck, int world) {
  std::string source;
  const auto input = input_of(deck, source);
  torch::manual_seed(0);
  auto model = model::build(deck, input);
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();

  const auto dp = static_cast<int>(config::resolved_dp(deck, world));
  const auto zero = static_cast<int>(deck.parallel.zero);
  const int64_t k = deck.optim.name == "adamw" ? 8 : (deck.optim.momentum > 0 ? 4 : 0);
  const int64_t part = (params + dp - 1) / dp;
  const int64_t grads = zero >= 2 ? 4 * part : 4 * params;
  const int64_t weights = zero >= 3 ? 4 * part : 4 * params;
  const int64_t optimizer = zero >= 1 ? k * part : k * params;

  std::string out;
  out += fmt::format("layout: world {} = dp {} x pp {} | zero {} | rank r -> stage r / {}, dp rank r % {}\n", world, dp,
                     deck.parallel.pp, zero, dp, dp);
  out += fmt::format("batch: global {} = micro {} x dp {} x accumulation {}\n", deck.optim.global_batch,
                     deck.optim.micro_batch, dp, deck.optim.global_batch / (deck.optim.micro_batch * dp));
  out += fmt::format("model {}: {} parameters in {} layers (input {})\n", deck.model.kind, params,
                     model->layers().size(), source);
  for (const auto& layer : model->layers()) {
    int64_t n = 0;
    for (const auto& p : layer.module->parameters()) n += p.numel();
    out += fmt::format("  {:<10} {:>12} parameters\n", layer.name, n);
  }
  out += fmt::format("model state per rank (fp32, {}): params {} + grads {} + optimizer {} = {}\n", deck.optim.name,
                     gib(weights), gib(grads), gib(optimizer), gib(weights + grads + optimizer));
  out += fmt::format("ZeRO paper's expectation for zero {}: {} per rank (zero 0 would be {})\n", zero,
                     gib(parallel::expected_state_bytes(zero, params, dp, k)),
                     gib(parallel::expected_state_bytes(0, params, dp, k)));
  out += fmt::format("pipeline bubble: {} (pp = 1)\n", 0.0);
  return out;
}

}  // namespace trident::train
