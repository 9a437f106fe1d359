// The layout plan (parallel/plan.hpp): the one place the layout's arithmetic lives, checked
// against independent computations: the ZeRO paper's totals, the stage modules' own flat
// buffers, the rank grid's inverse, the batch and the bubble formula.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "model/model.hpp"
#include "optim/flat_params.hpp"
#include "parallel/plan.hpp"

namespace {

using namespace trident;

config::Deck cnn_deck(int64_t pp) {
  config::Deck d;
  d.model.kind = "cnn";
  d.parallel.pp = pp;
  d.optim.global_batch = 32;
  d.optim.max_micro_batch = 4;
  return d;
}

// A made-up model: layer l has l + 1 parameters of shape {l + 1} and outputs {10 * (l + 1)}.
std::vector<model::LayerInfo> toy_layers(int count) {
  std::vector<model::LayerInfo> layers;
  for (int l = 0; l < count; ++l) {
    model::LayerInfo info;
    info.name = "layer" + std::to_string(l);
    info.parameters.push_back({info.name + ".w", {l + 1}});
    info.output_shape = {10 * (l + 1)};
    layers.push_back(info);
  }
  return layers;
}

}  // namespace

TEST(Plan, ZeroStateBytesFollowTheZeroPaper) {
  auto total = [](int zero, int64_t numel, int dp, int64_t k) {
    return parallel::zero_state_bytes(zero, numel, dp, k).total();
  };
  const int64_t n = 1000;
  EXPECT_EQ(total(0, n, 4, 8), 16 * n);
  EXPECT_EQ(total(1, n, 4, 8), 8 * n + 8 * n / 4);
  EXPECT_EQ(total(2, n, 4, 8), 4 * n + 12 * n / 4);
  EXPECT_EQ(total(3, n, 4, 8), 16 * n / 4);
  EXPECT_EQ(total(3, 10, 4, 8), 16 * 3);  // the largest partition, 3 of 10
}

TEST(Plan, RankGridIsStageMajorAndInvertible) {
  const parallel::RankGrid grid{3, 2};
  for (int r = 0; r < grid.world_size(); ++r) {
    EXPECT_EQ(grid.stage_of(r), r / 3);
    EXPECT_EQ(grid.rank_of(grid.stage_of(r), grid.dp_rank_of(r)), r);
  }
  EXPECT_EQ(grid.shape_text(), "world 6 = dp 3 x pp 2");
  EXPECT_EQ(grid.rank_map_text(), "rank r -> stage r / 3, dp rank r % 3");
}

TEST(Plan, BatchInFlightAndBubbleFollowTheDeck) {
  auto deck = cnn_deck(2);
  // world 4 = dp 2 x pp 2; auto micro-batch: the largest divisor of 32 / 2 that is <= 4.
  const parallel::Plan plan(deck, 4, toy_layers(4), {1});
  EXPECT_EQ(plan.dp(), 2);
  EXPECT_EQ(plan.micro_batch(), 4);
  EXPECT_TRUE(plan.micro_batch_auto());
  EXPECT_EQ(plan.accumulation(), 4);
  EXPECT_EQ(plan.micro_batches_in_flight(), 2);  // 1F1B: at most pp
  EXPECT_EQ(plan.micro_batches_in_flight(0), 2);  // stage s: pp - s
  EXPECT_EQ(plan.micro_batches_in_flight(1), 1);
  EXPECT_DOUBLE_EQ(plan.expected_bubble(), 1.0 / 5.0);
  deck.parallel.schedule = "gpipe";
  const parallel::Plan gpipe(deck, 4, toy_layers(4), {1});
  EXPECT_EQ(gpipe.micro_batches_in_flight(), 4);
  EXPECT_EQ(gpipe.micro_batches_in_flight(1), 4);  // every stage all m
  deck.parallel.pp = 1;
  EXPECT_EQ(parallel::Plan(deck, 4, toy_layers(4), {1}).expected_bubble(), 0.0);
}

// A stage's device memory: its model state, what its layers keep for each micro-batch it holds,
// and the largest of its recomputed layers' stored sets once.
TEST(Plan, DeviceBytesAddStateSavedActivationsAndOneRecomputation) {
  auto deck = cnn_deck(2);
  deck.parallel.boundaries = "2";
  auto layers = toy_layers(4);
  for (int l = 0; l < 4; ++l) layers[static_cast<size_t>(l)].saved = layers[static_cast<size_t>(l)].stored = {100 * (l + 1), 7};
  layers[1].saved = {5, 0};  // recomputed: its output alone
  layers[1].recomputed = true;
  const parallel::Plan plan(deck, 2, layers, {1});  // micro-batch 4, accumulation 8, 1F1B
  EXPECT_EQ(plan.saved_bytes(0), (100 * 4 + 7) + 5 * 4);
  EXPECT_EQ(plan.stored_bytes(0), (100 * 4 + 7) + (200 * 4 + 7));
  EXPECT_EQ(plan.recompute_bytes(0), 200 * 4 + 7);
  EXPECT_EQ(plan.recompute_bytes(1), 0);
  EXPECT_EQ(plan.saved_bytes(1), (300 * 4 + 7) + (400 * 4 + 7));
  // 1F1B: stage 0 holds 2 micro-batches, stage 1 one, with the fp32 input it received (layer 1's
  // output, 20 values a sample).
  EXPECT_EQ(plan.held_activation_bytes(0), 2 * plan.saved_bytes(0));
  EXPECT_EQ(plan.held_activation_bytes(1), plan.saved_bytes(1) + 4 * 4 * 20);
  EXPECT_EQ(plan.device_bytes(0), plan.state_bytes(0).total() + 2 * plan.saved_bytes(0) + plan.recompute_bytes(0));
  EXPECT_EQ(plan.device_bytes(1), plan.state_bytes(1).total() + plan.saved_bytes(1) + 4 * 4 * 20);
  deck.parallel.schedule = "gpipe";  // every micro-batch of the step
  EXPECT_EQ(parallel::Plan(deck, 2, layers, {1}).held_activation_bytes(1), 8 * (plan.saved_bytes(1) + 4 * 4 * 20));
}

TEST(Plan, StagesPlaceTheirParametersContiguously) {
  auto deck = cnn_deck(2);
  deck.parallel.boundaries = "3";
  const parallel::Plan plan(deck, 2, toy_layers(4), {1});
  EXPECT_EQ(plan.chunk_layers(0, 0), (std::pair<int, int>{0, 3}));
  EXPECT_EQ(plan.chunk_layers(1, 0), (std::pair<int, int>{3, 4}));
  EXPECT_EQ(plan.stage_parameters(0), 1 + 2 + 3);
  EXPECT_EQ(plan.stage_parameters(1), 4);
  EXPECT_EQ(plan.largest_stage(), 0);
  EXPECT_EQ(plan.chunk_input_shape(1, 0), (std::vector<int64_t>{30}));
  EXPECT_EQ(plan.chunk_output_shape(1, 0), (std::vector<int64_t>{40}));
  EXPECT_EQ(plan.output_bytes(0), 4 * plan.micro_batch() * 30);
  const auto& placed = plan.placed_parameters();
  ASSERT_EQ(placed.size(), 4u);
  EXPECT_EQ(placed[2].offset, 1 + 2);
  EXPECT_EQ(placed[3].stage, 1);
  EXPECT_EQ(placed[3].offset, 0);
  // Under ZeRO 2 over dp 2 the largest stage's rank holds 4 N of parameters and half the rest.
  deck.parallel.zero = 2;
  const auto bytes = parallel::Plan(deck, 4, toy_layers(4), {1}).state_bytes(0);
  EXPECT_EQ(bytes.params, 4 * 6);
  EXPECT_EQ(bytes.grads, 4 * 3);
  EXPECT_EQ(bytes.optimizer, 8 * 3);  // AdamW's two moments of its half
}

TEST(Plan, InterleavedChunksGoRoundTheRanks) {
  // Layers of 1, 2, 3, 4 parameters cut into pp 2 x v 2 chunks of one layer each: rank 0 holds
  // layers 0 and 2, rank 1 layers 1 and 3; each rank's buffer holds its chunks in order.
  auto deck = cnn_deck(2);
  deck.parallel.schedule = "interleaved";
  deck.parallel.virtual_stages = 2;
  const parallel::Plan plan(deck, 2, toy_layers(4), {1});
  EXPECT_EQ(plan.virtual_stages(), 2);
  EXPECT_EQ(plan.chunk_layers(0, 1), (std::pair<int, int>{2, 3}));
  EXPECT_EQ(plan.chunk_layers(1, 0), (std::pair<int, int>{1, 2}));
  EXPECT_EQ(plan.stage_layer_indices(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.stage_layer_indices(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(plan.stage_parameters(0), 1 + 3);
  EXPECT_EQ(plan.chunk_input_shape(0, 1), (std::vector<int64_t>{20}));  // what rank 1's first chunk hands back
  const auto& placed = plan.placed_parameters();  // model order
  ASSERT_EQ(placed.size(), 4u);
  EXPECT_EQ(std::make_pair(placed[2].stage, placed[2].offset), std::make_pair(0, int64_t{1}));
  EXPECT_EQ(std::make_pair(placed[3].stage, placed[3].offset), std::make_pair(1, int64_t{2}));
  EXPECT_EQ(plan.accumulation(), 8);
  EXPECT_NEAR(plan.expected_bubble(), 1.0 / (2 * 8 + 1), 1e-12);  // (p - 1) / (v m + p - 1)
  deck.optim.global_batch = 12;  // 3 micro-batches of 4 per step: not a multiple of pp
  try {
    parallel::Plan(deck, 2, toy_layers(4), {1});
    FAIL() << "m not a multiple of pp accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the pipeline stages"), std::string::npos) << e.what();
  }
}

TEST(Plan, BadLayoutsNameTheirKey) {
  auto deck = cnn_deck(2);
  try {
    parallel::Plan(deck, 3, toy_layers(4), {1});
    FAIL() << "dp x pp != world accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.dp"), std::string::npos) << e.what();
  }
  deck.parallel.boundaries = "5";
  try {
    parallel::Plan(deck, 2, toy_layers(4), {1});
    FAIL() << "a boundary past the last layer accepted";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.boundaries"), std::string::npos) << e.what();
  }
}

// The plan's placement of the real cnn at pp 2 is what each stage's own flat buffer holds: the
// same names, shapes and offsets, in the same order (checkpoints are written and read by it).
TEST(Plan, PlacementMatchesEachStagesFlatBuffer) {
  const auto deck = cnn_deck(2);
  const model::InputSpec input{{1, 28, 28}, 10};
  torch::manual_seed(0);
  auto whole = model::build(deck, input);
  const parallel::Plan plan(deck, 2, model::describe_layers(whole, input), input.sample_shape);
  int64_t all = 0;
  for (const auto& p : whole->parameters()) all += p.numel();
  EXPECT_EQ(plan.parameters(), all);
  size_t next = 0;
  for (int stage = 0; stage < 2; ++stage) {
    const auto [begin, end] = plan.chunk_layers(stage, 0);
    model::LayerStack part(std::vector<model::Layer>(whole->layers().begin() + begin, whole->layers().begin() + end));
    const optim::FlatParams flat(*part, torch::kCPU);
    const auto placed = plan.stage_parameters_placed(stage);
    ASSERT_EQ(placed.size(), flat.slots.size());
    for (size_t i = 0; i < placed.size(); ++i, ++next) {
      EXPECT_EQ(placed[i].name, flat.slots[i].name);
      EXPECT_EQ(placed[i].offset, flat.slots[i].offset);
      EXPECT_EQ(placed[i].shape, flat.slots[i].shape);
      EXPECT_EQ(placed[i].name, plan.placed_parameters()[next].name);  // model order overall
    }
    EXPECT_EQ(plan.stage_parameters(stage), flat.numel());
  }
  EXPECT_EQ(next, plan.placed_parameters().size());
  // The batch-norm statistics are the cnn's floating-point buffers, each on its layer's stage.
  int64_t floating_buffers = 0;
  for (const auto& b : whole->named_buffers()) floating_buffers += b.value().is_floating_point();
  EXPECT_EQ(static_cast<int64_t>(plan.placed_buffers().size()), floating_buffers);
}
