// Pipelining changes nothing but where layers run: after k steps, pp = 2 (and dp = 2 x pp = 2)
// gives every stage the same parameters as one rank training the whole model on the same global
// batch, under every schedule, with explicit or balanced cuts, and combined with ZeRO. zb-h1
// splits each backward in two (parallel/split_backward.hpp): the parameters' gradients must come
// out as a whole backward's, through the same hooks, with the weight gradients deferred.
// interleaved gives each rank two chunks of the layer list and sends activations round the ranks.
#include "train_helpers.hpp"

using namespace trident;
using namespace trident::test_support;

namespace {

void expect_pipeline_equals_one_rank(config::Deck deck, const std::string& tag) {
  if (world_size() < 2 || world_size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  deck.parallel.pp = 2;
  const auto piped = train_on(deck, MPI_COMM_WORLD, tag + "_pp2");
  auto reference_deck = deck;
  reference_deck.parallel.pp = 1;
  reference_deck.parallel.zero = 0;
  reference_deck.parallel.boundaries = "";
  reference_deck.parallel.schedule = "1f1b";
  reference_deck.parallel.virtual_stages = 1;
  const auto one = train_on(reference_deck, MPI_COMM_SELF, tag + "_pp1");
  ASSERT_FALSE(piped.params.empty());
  ASSERT_LT(piped.params.size(), one.params.size());  // a stage holds part of the model
  EXPECT_LE(max_relative_difference(piped, one), kLayoutTolerance) << tag;
  expect_same_gradient_norms(piped, one, tag + ": pp 2 vs one rank");
  ASSERT_EQ(piped.result.logged_losses.size(), one.result.logged_losses.size());
  for (size_t i = 0; i < one.result.logged_losses.size(); ++i)
    EXPECT_NEAR(piped.result.logged_losses[i].second, one.result.logged_losses[i].second,
                1e-5 * std::abs(one.result.logged_losses[i].second));
  // Evaluation agrees too, except for batch-norm running statistics under dp > 1: each replica
  // tracks its own micro-batches and they are averaged, as in any DDP.
  if (deck.model.kind == "mlp" || world_size() == 2) {
    EXPECT_NEAR(piped.result.test_accuracy, one.result.test_accuracy, 1e-12);
  }
}

}  // namespace

TEST(PipelineEquivalence, CnnOneFOneB) {
  auto deck = tiny_deck("cnn", "pp_cnn_1f1b");
  deck.parallel.schedule = "1f1b";
  expect_pipeline_equals_one_rank(deck, "cnn_1f1b");
}

TEST(PipelineEquivalence, CnnGPipeExplicitCut) {
  auto deck = tiny_deck("cnn", "pp_cnn_gpipe");
  deck.parallel.schedule = "gpipe";
  deck.parallel.boundaries = "1";
  expect_pipeline_equals_one_rank(deck, "cnn_gpipe");
}

TEST(PipelineEquivalence, MlpWithClippingAcrossStages) {
  auto deck = tiny_deck("mlp", "pp_mlp_clip");
  deck.optim.name = "sgd";
  deck.optim.lr = 0.5;
  deck.optim.clip_grad_norm = 0.2;  // the norm is summed over both stages
  expect_pipeline_equals_one_rank(deck, "mlp_clip");
}

// Unclipped plain SGD under every schedule: the updates are the gradients themselves, so each
// micro-batch's share of the loss (1 / (micro-batches x dp)) shows in the parameters.
TEST(PipelineEquivalence, MlpPlainSgdEverySchedule) {
  for (const std::string schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    auto deck = plain_sgd(tiny_deck("mlp", "pp_plain_sgd_" + schedule));
    deck.model.hidden = "31,17,13";
    deck.parallel.schedule = schedule;
    deck.parallel.virtual_stages = schedule == "interleaved" ? 2 : 1;
    expect_pipeline_equals_one_rank(deck, "plain_sgd_" + schedule);
  }
}

// An mlp (uneven ZeRO partitions: hidden 31, 17, ...) under `schedule` with each ZeRO stage,
// clipped by the norm summed over the partitions and the stages.
static void expect_every_zero_stage(const std::string& schedule, std::vector<int> zeros, const std::string& hidden,
                             int virtual_stages = 1) {
  for (int zero : zeros) {
    const std::string tag = schedule + "_zero" + std::to_string(zero);
    auto deck = tiny_deck("mlp", "pp_" + tag);
    deck.model.hidden = hidden;
    deck.parallel.zero = zero;
    deck.parallel.schedule = schedule;
    deck.parallel.virtual_stages = virtual_stages;
    deck.optim.clip_grad_norm = 0.2;
    expect_pipeline_equals_one_rank(deck, tag);
  }
}

TEST(PipelineEquivalence, WithZeroStages) { expect_every_zero_stage("1f1b", {1, 2, 3}, "31,17"); }

TEST(PipelineEquivalence, CnnZeroBubbleSplitBackward) {
  auto deck = tiny_deck("cnn", "pp_cnn_zbh1");  // convolutions and batch norm, split
  deck.parallel.schedule = "zb-h1";
  expect_pipeline_equals_one_rank(deck, "cnn_zbh1");
}

// ZeRO-3 re-gathers a layer and its gradient buffer for each deferred weight gradient.
TEST(PipelineEquivalence, ZeroBubbleWithZeroStages) { expect_every_zero_stage("zb-h1", {0, 1, 2, 3}, "31,17"); }

TEST(PipelineEquivalence, GPipeWithZeroStages) { expect_every_zero_stage("gpipe", {1, 2, 3}, "31,17"); }

// Four layers in pp 2 x v 2 chunks: rank 0 runs fc1 and fc3, rank 1 fc2 and the head.
TEST(PipelineEquivalence, InterleavedWithZeroStages) { expect_every_zero_stage("interleaved", {0, 1, 2, 3}, "31,17,13", 2); }
