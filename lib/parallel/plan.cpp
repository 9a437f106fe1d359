#include "parallel/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "parallel/layer_cut.hpp"
#include "parallel/pipeline_schedule.hpp"

namespace trident::parallel {

std::string RankGrid::shape_text() const { return fmt::format("world {} = dp {} x pp {}", world_size(), dp, pp); }

std::string RankGrid::rank_map_text() const { return fmt::format("rank r -> stage r / {}, dp rank r % {}", dp, dp); }

RankGrid RankGrid::of(const config::Deck& deck, int world_size) {
  const auto pp = static_cast<int>(deck.parallel.pp);
  const auto dp = static_cast<int>(config::resolved_dp(deck, world_size));
  if (pp < 1 || dp < 1 || dp * pp != world_size)
    fatal_all(fmt::format("parallel.dp: dp({}) x pp({}) = {} != world size {}", dp, pp, dp * pp, world_size));
  return {dp, pp};
}

ModelStateBytes zero_state_bytes(int zero, int64_t numel, int dp, int64_t optimizer_bytes_per_param) {
  const int64_t part = (numel + dp - 1) / dp;  // partitions differ by at most one element
  ModelStateBytes b;
  b.params = 4 * (zero >= 3 ? part : numel);
  b.grads = 4 * (zero >= 2 ? part : numel);
  b.optimizer = optimizer_bytes_per_param * (zero >= 1 ? part : numel);
  return b;
}

// A function-try-block: the layout's errors (the grid, the batch, the cut) come from the initialisers
// and the body alike, and each is pointed at the deck line or --set that gave the key it names.
Plan::Plan(const config::Deck& deck, int world_size, std::vector<model::LayerInfo> layers,
           std::vector<int64_t> input_shape) try
    : grid_(RankGrid::of(deck, world_size)),
      zero_(static_cast<int>(deck.parallel.zero)),
      schedule_(deck.parallel.schedule),
      virtual_stages_(static_cast<int>(deck.parallel.virtual_stages)),
      global_batch_(deck.optim.global_batch),
      micro_batch_(config::resolved_micro_batch(deck, world_size)),
      micro_batch_auto_(deck.optim.micro_batch == "auto"),
      layers_(std::move(layers)) {
  if (micro_batch_ < 1 || global_batch_ % (micro_batch_ * grid_.dp) != 0)
    fatal_all(fmt::format("optim.global_batch: {} is not divisible by micro_batch({}) x dp({})", global_batch_,
                          micro_batch_, grid_.dp));
  accumulation_ = global_batch_ / (micro_batch_ * grid_.dp);
  if (const std::string why = schedule_constraint(schedule_, {grid_.pp, static_cast<int>(accumulation_), virtual_stages_});
      !why.empty())
    fatal_all(fmt::format("parallel.schedule: {}; micro-batches per step = optim.global_batch / (optim.micro_batch x dp) "
                          "= {} / ({} x {})",
                          why, global_batch_, micro_batch_, grid_.dp));
  optimizer_bytes_per_param_ = deck.optim.name == "adamw" ? 8 : (deck.optim.momentum > 0 ? 4 : 0);

  shapes_.push_back(std::move(input_shape));
  // The automatic cut balances parameter counts, or measured time (in ns) when every layer has one.
  const bool timed = deck.parallel.balance == "time" && !layers_.empty() &&
                     std::all_of(layers_.begin(), layers_.end(), [](const auto& l) { return l.seconds > 0; });
  std::vector<int64_t> layer_weights;
  for (const auto& layer : layers_) {
    shapes_.push_back(layer.output_shape);
    layer_weights.push_back(timed ? std::llround(layer.seconds * 1e9) : layer.parameter_count());
  }
  const std::vector<int64_t> boundaries = parse_boundaries(deck.parallel.boundaries);
  if (virtual_stages_ > 1 && static_cast<int>(layers_.size()) < grid_.pp * virtual_stages_)
    fatal_all(fmt::format("parallel.virtual_stages: pp({}) x v({}) = {} chunks, but the model has only {} layers", grid_.pp,
                          virtual_stages_, grid_.pp * virtual_stages_, layers_.size()));
  first_layer_ = cut_layers(layer_weights, grid_.pp * virtual_stages_, boundaries,
                            virtual_stages_ > 1 ? fmt::format("parallel.pp = {} x parallel.virtual_stages = {}: {} chunks",
                                                              grid_.pp, virtual_stages_, grid_.pp * virtual_stages_)
                                                : "");
  cut_by_ = !boundaries.empty() ? "parallel.boundaries" : timed ? "measured time" : "parameter count";

  // Each parameter's place in its stage's flat buffer: the stage's layers' parameters in order
  // (a stage's chunks come in model order, so walking the model in order fills each buffer in order).
  std::vector<int64_t> offset(static_cast<size_t>(grid_.pp), 0);
  for (size_t vs = 0; vs < first_layer_.size(); ++vs) {
    const int stage = static_cast<int>(vs) % grid_.pp;
    const auto [begin, end] = chunk_layers(stage, static_cast<int>(vs) / grid_.pp);
    for (int l = begin; l < end; ++l) {
      for (const auto& p : layers_[static_cast<size_t>(l)].parameters) {
        placed_parameters_.push_back({p.name, p.shape, stage, offset[static_cast<size_t>(stage)], p.numel()});
        offset[static_cast<size_t>(stage)] += p.numel();
      }
      for (const auto& b : layers_[static_cast<size_t>(l)].buffers)
        placed_buffers_.push_back({b.name, b.shape, stage, 0, b.numel()});
    }
  }
} catch (const BadInput& e) {
  throw BadInput(config::locate(deck, e.what()));
}

int64_t Plan::parameters() const {
  int64_t n = 0;
  for (const auto& layer : layers_) n += layer.parameter_count();
  return n;
}

std::pair<int, int> Plan::chunk_layers(int stage, int chunk) const {
  const auto vs = static_cast<size_t>(chunk * grid_.pp + stage);
  return {first_layer_[vs], vs + 1 < first_layer_.size() ? first_layer_[vs + 1] : static_cast<int>(layers_.size())};
}

std::vector<int> Plan::stage_layer_indices(int stage) const {
  std::vector<int> indices;
  for (int chunk = 0; chunk < virtual_stages_; ++chunk) {
    const auto [begin, end] = chunk_layers(stage, chunk);
    for (int l = begin; l < end; ++l) indices.push_back(l);
  }
  return indices;
}

int64_t Plan::stage_parameters(int stage) const {
  int64_t n = 0;
  for (int l : stage_layer_indices(stage)) n += layers_[static_cast<size_t>(l)].parameter_count();
  return n;
}

double Plan::stage_seconds(int stage) const {
  double seconds = 0;
  for (int l : stage_layer_indices(stage)) seconds += layers_[static_cast<size_t>(l)].seconds;
  return seconds;
}

int Plan::largest_stage() const {
  int largest = 0;
  for (int s = 1; s < grid_.pp; ++s)
    if (stage_parameters(s) > stage_parameters(largest)) largest = s;
  return largest;
}

const std::vector<int64_t>& Plan::chunk_input_shape(int stage, int chunk) const {
  return shapes_[static_cast<size_t>(chunk_layers(stage, chunk).first)];
}

const std::vector<int64_t>& Plan::chunk_output_shape(int stage, int chunk) const {
  return shapes_[static_cast<size_t>(chunk_layers(stage, chunk).second)];
}

int64_t Plan::output_bytes(int stage) const {
  int64_t total = 0;
  for (int chunk = 0; chunk < virtual_stages_; ++chunk) {
    int64_t bytes = 4 * micro_batch_;
    for (int64_t d : chunk_output_shape(stage, chunk)) bytes *= d;
    total += bytes;
  }
  return total;
}

int64_t Plan::saved_bytes(int stage) const {
  int64_t total = 0;
  for (int l : stage_layer_indices(stage)) total += layers_[static_cast<size_t>(l)].saved.of(micro_batch_);
  return total;
}

int64_t Plan::stored_bytes(int stage) const {
  int64_t total = 0;
  for (int l : stage_layer_indices(stage)) total += layers_[static_cast<size_t>(l)].stored.of(micro_batch_);
  return total;
}

int64_t Plan::recompute_bytes(int stage) const {
  int64_t largest = 0;
  for (int l : stage_layer_indices(stage)) {
    const model::LayerInfo& layer = layers_[static_cast<size_t>(l)];
    if (layer.recomputed) largest = std::max(largest, layer.stored.of(micro_batch_));
  }
  return largest;
}

int64_t Plan::held_activation_bytes(int stage) const {
  // One micro-batch of each chunk: its layers' saved tensors and, past the first virtual stage,
  // the fp32 input it received, which its backward reads.
  std::vector<int64_t> chunk_bytes;
  for (int chunk = 0; chunk < virtual_stages_; ++chunk) {
    const auto [begin, end] = chunk_layers(stage, chunk);
    int64_t bytes = 0;
    for (int l = begin; l < end; ++l) bytes += layers_[static_cast<size_t>(l)].saved.of(micro_batch_);
    if (chunk * grid_.pp + stage > 0) {
      int64_t input = 4 * micro_batch_;
      for (int64_t d : chunk_input_shape(stage, chunk)) input *= d;
      bytes += input;
    }
    chunk_bytes.push_back(bytes);
  }
  return peak_held(make_schedule(schedule_, {grid_.pp, static_cast<int>(accumulation_), virtual_stages_}, stage),
                   [&](int chunk) { return chunk_bytes.at(static_cast<size_t>(chunk)); });
}

int64_t Plan::device_bytes(int stage) const {
  return state_bytes(stage).total() + held_activation_bytes(stage) + recompute_bytes(stage);
}

// Both from the schedule's own op lists (parallel/pipeline_schedule.hpp), equal op times assumed.
int64_t Plan::micro_batches_in_flight() const {
  const ScheduleFigures f = schedule_figures(schedule_, {grid_.pp, static_cast<int>(accumulation_), virtual_stages_});
  return static_cast<int64_t>(std::ceil(f.peak_activations));
}

int64_t Plan::micro_batches_in_flight(int stage) const {
  const int64_t pairs =  // (micro-batch, chunk)
      peak_held(make_schedule(schedule_, {grid_.pp, static_cast<int>(accumulation_), virtual_stages_}, stage),
                [](int) { return 1; });
  return (pairs + virtual_stages_ - 1) / virtual_stages_;
}

double Plan::expected_bubble() const {
  return grid_.pp > 1 ? schedule_figures(schedule_, {grid_.pp, static_cast<int>(accumulation_), virtual_stages_}).bubble : 0.0;
}

ModelStateBytes Plan::state_bytes(int stage) const {
  return zero_state_bytes(zero_, stage_parameters(stage), grid_.dp, optimizer_bytes_per_param_);
}

ModelStateBytes Plan::state_bytes_without_zero(int stage) const {
  return zero_state_bytes(0, stage_parameters(stage), grid_.dp, optimizer_bytes_per_param_);
}

std::vector<PlacedTensor> Plan::stage_parameters_placed(int stage) const {
  std::vector<PlacedTensor> mine;
  for (const auto& t : placed_parameters_)
    if (t.stage == stage) mine.push_back(t);
  return mine;
}

}  // namespace trident::parallel
