#include "train/plan_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "comm/node_gpu.hpp"
#include "core/error.hpp"
#include "model/describe_model.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/plan.hpp"

namespace trident::train {

model::InputSpec input_spec(const config::Deck& deck, const data::SplitFile& train_split) {
  const int64_t classes = train_split.tokens() ? std::max(deck.model.vocab, train_split.classes()) : train_split.classes();
  return {train_split.sample_shape(), classes, train_split.tokens()};
}

std::string vocab_problem(const config::Deck& deck, const data::SplitFile& train_split) {
  if (deck.model.vocab > 0 && deck.model.vocab < train_split.classes())
    return fmt::format("model.vocab = {} is smaller than the vocabulary of data.path {} (attribute 'vocab' = {})",
                       deck.model.vocab, deck.data.path, train_split.classes());
  return "";
}

std::string size_text(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (b >= (1 << 20)) return fmt::format("{:.2f} MiB", b / (1 << 20));
  return fmt::format("{:.1f} KiB", b / 1024);
}

namespace {

// The dataset's sample shape when the file is there; else Fashion-MNIST's, or byte tokens.
model::InputSpec input_of(const config::Deck& deck, std::string& source) {
  const bool gpt = deck.model.kind == "gpt";
  if (std::filesystem::exists(deck.data.path)) {
    data::SplitFile reader(deck.data.path, "train", gpt ? deck.model.seq_len : 0);
    if (const std::string problem = vocab_problem(deck, reader); !problem.empty()) fatal_all(problem);
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

// Every schedule for this pipeline: its bubble for equal op times (simulated from its op lists),
// its closed form, and the most micro-batches its busiest rank holds activations for (an
// interleaved chunk's count as 1 / v: it holds 1 / v of the stage's layers).
std::string schedule_table(int pp, int micro_batches, int deck_virtual_stages) {
  std::string out = fmt::format("  {:<16} {:>7} {:>8}  {:<25} {}\n", "schedule", "bubble", "formula", "",
                                "micro-batches held");
  for (const auto& name : parallel::schedule_names()) {
    const int v = name == "interleaved" ? std::max(2, deck_virtual_stages) : 1;
    const parallel::PipelineShape shape{pp, micro_batches, v};
    const std::string label = name == "interleaved" ? fmt::format("interleaved v={}", v) : name;
    if (const std::string why = parallel::schedule_constraint(name, shape); !why.empty()) {
      out += fmt::format("  {:<16} {}\n", label, why);
      continue;
    }
    const parallel::ScheduleFigures f = parallel::schedule_figures(name, shape);
    const std::string formula = (f.formula_text.rfind("<=", 0) == 0 ? "" : "= ") + f.formula_text;  // a bound says so
    out += fmt::format("  {:<16} {:>7.3f} {:>8.3f}  {:<25} {:.1f}\n", label, f.bubble, f.formula, formula,
                       f.peak_activations);
  }
  return out;
}

// The stage whose ranks need the most device memory.
int busiest_stage(const parallel::Plan& plan) {
  int busiest = 0;
  for (int s = 1; s < plan.pp(); ++s)
    if (plan.device_bytes(s) > plan.device_bytes(busiest)) busiest = s;
  return busiest;
}

}  // namespace

std::string device_fit_problem(int64_t need, int64_t gpu_bytes, const config::Deck& deck) {
  if (need <= gpu_bytes) return "";
  const bool can_recompute = deck.model.kind == "gpt" && !deck.model.recompute;
  return fmt::format("does not fit a GPU of {}: {} more. Lower optim.micro_batch (activations){}, raise "
                     "parallel.zero (model state) or parallel.pp (both)",
                     size_text(gpu_bytes), size_text(need - gpu_bytes), can_recompute ? ", set model.recompute = true" : "");
}

std::string plan_text(const config::Deck& deck, int world, int64_t gpu_bytes) {
  std::string source;
  const auto input = input_of(deck, source);
  const parallel::Plan plan(deck, world, model::describe_model(deck, input), input.sample_shape);
  const int dp = plan.dp(), pp = plan.pp();

  std::string out;
  out += fmt::format("layout: {} | zero {} | {}\n", plan.grid().shape_text(), plan.zero(), plan.grid().rank_map_text());
  out += fmt::format("batch: global {} = micro {}{} x dp {} x accumulation {}\n", plan.global_batch(),
                     plan.micro_batch(), plan.micro_batch_auto() ? " (auto)" : "", dp, plan.accumulation());
  out += fmt::format("model {}: {} parameters in {} layers (input {})\n", deck.model.kind, plan.parameters(),
                     plan.layers().size(), source);
  if (pp > 1)
    out += fmt::format("stages cut by {}{}\n", plan.cut_by(),
                       plan.cut_by() == "parameter count" && deck.parallel.balance == "time"
                           ? " here; trident train measures each layer at start-up and cuts by time (parallel.balance), "
                             "so its stages, and their memory below, may differ"
                           : "");
  for (int s = 0; s < pp; ++s) {
    std::string names;  // chunks apart by " | " (interleaved)
    for (int c = 0; c < plan.virtual_stages(); ++c) {
      const auto [begin, end] = plan.chunk_layers(s, c);
      for (int l = begin; l < end; ++l)
        names += (l == begin ? (c ? " | " : "") : ", ") + plan.layers()[static_cast<size_t>(l)].name;
    }
    out += fmt::format("  stage {}: {:>12} parameters, {} of activations per micro-batch  [{}]\n", s,
                       plan.stage_parameters(s), size_text(plan.saved_bytes(s)), names);
  }
  // Model state is per stage: the largest stage decides.
  const int largest = plan.largest_stage();
  const parallel::ModelStateBytes state = plan.state_bytes(largest);
  out += fmt::format("model state per rank of the largest stage (fp32, {}): params {} + grads {} + optimizer {} = {}\n",
                     deck.optim.name, size_text(state.params), size_text(state.grads), size_text(state.optimizer), size_text(state.total()));
  out += fmt::format("ZeRO paper's expectation for zero {}: {} per rank{}\n", plan.zero(), size_text(state.total()),
                     plan.zero() > 0
                         ? fmt::format(" (zero 0 would be {})", size_text(plan.state_bytes_without_zero(largest).total()))
                         : "");
  if (pp > 1) {  // no pipeline, no bubble
    out += fmt::format("pipeline bubble ({} micro-batches, {}): {:.3f}\n", plan.accumulation(), plan.schedule(),
                       plan.expected_bubble());
    out += schedule_table(pp, static_cast<int>(plan.accumulation()), plan.virtual_stages());
  }
  // On a GPU all of this is device memory: the model state, and what the layers keep for the
  // backward of each micro-batch in flight. The stage that needs the most decides.
  const int busiest = busiest_stage(plan);
  const int64_t in_flight = plan.micro_batches_in_flight(busiest);
  const parallel::ModelStateBytes busiest_state = plan.state_bytes(busiest);
  std::string gpu;
  if (gpu_bytes > 0) {
    gpu = fmt::format(" of {} (--gpu-memory)", size_text(gpu_bytes));
  } else if (const auto node_gpu = comm::first_visible_gpu()) {
    gpu = fmt::format(" of {} on this node's {}", size_text(node_gpu->total_bytes), node_gpu->name);
    gpu_bytes = node_gpu->total_bytes;
  }
  const std::string recompute =
      plan.recompute_bytes(busiest) > 0
          ? fmt::format(" + one block recomputed in its backward {}", size_text(plan.recompute_bytes(busiest)))
          : "";
  // The mlp and the cnn under bf16 / fp16 (autocast) are estimated at their fp32 sizes, more than
  // they keep: no lower bound then.
  const bool fp32_sizes_for_16_bit = deck.optim.precision != "fp32" && deck.model.kind != "gpt";
  out += fmt::format("device memory per rank on a GPU{}: {} {}{} = model state {} + activations of {} micro-batch(es) "
                     "in flight {}{} (the layers' saved tensors, estimated {}; the backward's gradients and the "
                     "allocator's cache come on top)\n",
                     pp > 1 ? fmt::format(" (stage {})", busiest) : "", fp32_sizes_for_16_bit ? "about" : "at least",
                     size_text(plan.device_bytes(busiest)), gpu, size_text(busiest_state.total()), in_flight,
                     size_text(plan.held_activation_bytes(busiest)), recompute,
                     fp32_sizes_for_16_bit ? "at fp32 sizes, above their " + deck.optim.precision + " ones"
                                           : "in " + deck.optim.precision);
  if (gpu_bytes > 0)
    if (const std::string problem = device_fit_problem(plan.device_bytes(busiest), gpu_bytes, deck); !problem.empty())
      out += problem + "\n";
  // What model.recompute changes, for a model with blocks worth recomputing.
  if (deck.model.kind == "gpt") {
    config::Deck other = deck;
    other.model.recompute = !deck.model.recompute;
    const parallel::Plan other_plan(other, world, model::describe_model(other, input), input.sample_shape);
    const int other_busiest = busiest_stage(other_plan);
    out += fmt::format("with model.recompute = {}: at least {}{}, activations {} per micro-batch (recomputation costs "
                       "about one more forward of each block)\n",
                       other.model.recompute ? "true" : "false", size_text(other_plan.device_bytes(other_busiest)),
                       pp > 1 ? fmt::format(" (stage {})", other_busiest) : "",
                       size_text(other_plan.saved_bytes(other_busiest)));
  }
  return out;
}

}  // namespace trident::train
