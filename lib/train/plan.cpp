#include "train/plan.hpp"

#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>

#include "comm/cuda_runtime.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/layer_cut.hpp"

namespace trident::train {

model::InputSpec input_spec(const config::Deck& deck, const data::SplitReader& train_split) {
  const int64_t classes = train_split.tokens() ? std::max(deck.model.vocab, train_split.classes()) : train_split.classes();
  return {train_split.sample_shape(), classes, train_split.tokens()};
}

namespace {

// The dataset's sample shape when the file is there; else Fashion-MNIST's, or byte tokens.
model::InputSpec input_of(const config::Deck& deck, std::string& source) {
  const bool gpt = deck.model.kind == "gpt";
  if (std::filesystem::exists(deck.data.path)) {
    data::SplitReader reader(deck.data.path, "train", gpt ? deck.model.seq_len : 0);
    source = deck.data.path;
    return input_spec(deck, reader);
  }
  if (gpt) {
    const int64_t vocab = deck.model.vocab > 0 ? deck.model.vocab : 256;
    source = fmt::format("assumed {} tokens of a vocabulary of {} ({} not found)", deck.model.seq_len, vocab,
                         deck.data.path);
    return {{deck.model.seq_len}, vocab, true};
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
  const int64_t all_params = params;

  const auto dp = static_cast<int>(config::resolved_dp(deck, world));
  const int64_t micro = config::resolved_micro_batch(deck, world);
  const auto zero = static_cast<int>(deck.parallel.zero);
  const int64_t k = deck.optim.name == "adamw" ? 8 : (deck.optim.momentum > 0 ? 4 : 0);

  std::string out;
  out += fmt::format("layout: world {} = dp {} x pp {} | zero {} | rank r -> stage r / {}, dp rank r % {}\n", world, dp,
                     deck.parallel.pp, zero, dp, dp);
  out += fmt::format("batch: global {} = micro {}{} x dp {} x accumulation {}\n", deck.optim.global_batch, micro,
                     deck.optim.micro_batch == "auto" ? " (auto)" : "", dp, deck.optim.global_batch / (micro * dp));
  out += fmt::format("model {}: {} parameters in {} layers (input {})\n", deck.model.kind, all_params,
                     model->layers().size(), source);
  const auto layer_params = model::layer_parameter_counts(model);
  const auto shapes = model::layer_shapes(model, input);
  const int pp = static_cast<int>(deck.parallel.pp);
  const auto first = parallel::cut_layers(layer_params, pp, parallel::parse_boundaries(deck.parallel.boundaries));
  int64_t largest_stage = 0, largest_activation = 0;
  for (int s = 0; s < pp; ++s) {
    const int end = s + 1 < pp ? first[static_cast<size_t>(s) + 1] : static_cast<int>(layer_params.size());
    int64_t n = 0;
    std::string names;
    for (int l = first[static_cast<size_t>(s)]; l < end; ++l) {
      n += layer_params[static_cast<size_t>(l)];
      names += (names.empty() ? "" : ", ") + model->layers()[static_cast<size_t>(l)].name;
    }
    largest_stage = std::max(largest_stage, n);
    // What a stage keeps per micro-batch between its forward and backward: its output.
    int64_t activation = 4 * micro;
    for (auto d : shapes[static_cast<size_t>(end)]) activation *= d;
    largest_activation = std::max(largest_activation, activation);
    out += fmt::format("  stage {}: {:>12} parameters, {} of activations per micro-batch  [{}]\n", s, n, gib(activation),
                       names);
  }
  params = largest_stage;  // model state is per stage: the largest stage decides
  const int64_t part = (params + dp - 1) / dp;
  const int64_t grads = zero >= 2 ? 4 * part : 4 * params;
  const int64_t weights = zero >= 3 ? 4 * part : 4 * params;
  const int64_t optimizer = zero >= 1 ? k * part : k * params;
  out += fmt::format("model state per rank of the largest stage (fp32, {}): params {} + grads {} + optimizer {} = {}\n", deck.optim.name,
                     gib(weights), gib(grads), gib(optimizer), gib(weights + grads + optimizer));
  out += fmt::format("ZeRO paper's expectation for zero {}: {} per rank (zero 0 would be {})\n", zero,
                     gib(parallel::expected_state_bytes(zero, params, dp, k)),
                     gib(parallel::expected_state_bytes(0, params, dp, k)));
  const int m = static_cast<int>(deck.optim.global_batch / (micro * dp));
  out += fmt::format("pipeline bubble ({} micro-batches, {}): {:.3f} = (p - 1) / (m + p - 1)\n", m,
                     deck.parallel.schedule, pp > 1 ? parallel::expected_bubble_fraction(pp, m) : 0.0);
  // On a GPU all of this is device memory. Micro-batches in flight between forward and backward:
  // GPipe keeps all m, 1F1B at most pp (stage 0's count).
  const int64_t in_flight = deck.parallel.schedule == "gpipe" ? m : std::min(m, pp);
  const int64_t device_bytes = weights + grads + optimizer + in_flight * largest_activation;
  std::string gpu;
  if (const int gpus = comm::cuda_visible_devices(); gpus > 0)
    gpu = fmt::format(" of {} on this node's {}", gib(comm::cuda_total_memory_bytes(0)), comm::cuda_device_name(0));
  out += fmt::format("device memory per rank on a GPU: at least {} = model state {} + stage outputs of {} micro-batch(es) "
                     "in flight {}{} (the layers' inner activations and the allocator's cache come on top)\n",
                     gib(device_bytes), gib(weights + grads + optimizer), in_flight, gib(in_flight * largest_activation),
                     gpu);
  return out;
}

}  // namespace trident::train
