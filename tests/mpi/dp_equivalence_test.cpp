// Data parallelism changes nothing but speed: after k steps, dp = world gives the same
// parameters as one rank training the same global batch (the same micro-batches, accumulated),
// and gradient accumulation gives the same parameters as one large micro-batch.
#include <fstream>
#include <nlohmann/json.hpp>

#include "train_helpers.hpp"

using namespace trident;

namespace {

using namespace test_support;

void expect_dp_equals_one_rank(config::Deck deck) {
  const auto dp = train_on(deck, MPI_COMM_WORLD, "dp" + std::to_string(world_size()));
  const auto one = train_on(deck, MPI_COMM_SELF, "dp1");
  ASSERT_EQ(dp.params.size(), one.params.size());
  const double diff = max_relative_difference(dp, one);
  EXPECT_LE(diff, 1e-5) << "dp=" << world_size() << " vs dp=1, " << deck.model.kind;
  expect_same_gradient_norms(dp, one, "dp=" + std::to_string(world_size()) + " vs dp=1, " + deck.model.kind);
  // The model really moved: the comparison is not between two untouched initialisations.
  ASSERT_EQ(dp.result.logged_losses.size(), 5u);
  EXPECT_LT(dp.result.logged_losses.back().second, dp.result.logged_losses.front().second);
  // The logged loss is the global batch's mean on every layout.
  for (size_t i = 0; i < dp.result.logged_losses.size(); ++i)
    EXPECT_NEAR(dp.result.logged_losses[i].second, one.result.logged_losses[i].second,
                1e-5 * std::abs(one.result.logged_losses[i].second));
}

}  // namespace

TEST(DpEquivalence, CnnWithBatchNormAdamW) { expect_dp_equals_one_rank(tiny_deck("cnn", "cnn_adamw")); }

TEST(DpEquivalence, MlpSgdWithClippingActive) {
  auto deck = tiny_deck("mlp", "mlp_sgd_clip");
  deck.optim.name = "sgd";
  deck.optim.lr = 0.5;
  deck.optim.clip_grad_norm = 0.2;
  expect_dp_equals_one_rank(deck);
  // Clipping really acted on every step (the norms are those before clipping).
  const auto run = train_on(deck, MPI_COMM_WORLD, "norms");
  for (double norm : run.result.logged_grad_norms) EXPECT_GT(norm, deck.optim.clip_grad_norm);
}

TEST(DpEquivalence, MlpPlainSgd) { expect_dp_equals_one_rank(plain_sgd(tiny_deck("mlp", "mlp_plain_sgd"))); }

TEST(DpEquivalence, SmallBucketsGiveTheSameResult) {
  auto deck = tiny_deck("cnn", "cnn_small_buckets");
  deck.parallel.bucket_mb = 0.001;  // ~1 KB: one bucket per parameter or so, launched during backward
  expect_dp_equals_one_rank(deck);
}

TEST(Accumulation, MlpMicroBatchQuarterEqualsWholeBatch) {
  for (const auto& deck_of : {+[] { return tiny_deck("mlp", "mlp_accumulation"); },
                              +[] { return plain_sgd(tiny_deck("mlp", "mlp_accumulation_sgd")); }}) {
    auto deck = deck_of();
    deck.optim.micro_batch = "32";
    const auto whole = train_on(deck, MPI_COMM_SELF, "micro32");
    deck.optim.micro_batch = "8";
    const auto accumulated = train_on(deck, MPI_COMM_SELF, "micro8");
    EXPECT_LE(max_relative_difference(accumulated, whole), 1e-5) << deck.run.name;
    expect_same_gradient_norms(accumulated, whole, deck.run.name + ": 4 micro-batches of 8 vs 1 of 32");
  }
}

TEST(Determinism, SameSeedSameLossSequence) {
  auto deck = tiny_deck("cnn", "determinism");
  const auto first = train_on(deck, MPI_COMM_WORLD, "run1");
  const auto second = train_on(deck, MPI_COMM_WORLD, "run2");
  EXPECT_EQ(first.result.logged_losses, second.result.logged_losses);  // bit for bit
  deck.run.seed = 99;
  const auto other = train_on(deck, MPI_COMM_WORLD, "seed99");
  EXPECT_NE(first.result.logged_losses, other.result.logged_losses);
}

// run.cuda_graph asks for what only a GPU has: on the CPU it is ignored (a log line says why) and
// the run is the one without it, bit for bit; report.json says it was asked for and replayed
// nothing.
TEST(Determinism, CudaGraphIsIgnoredOnTheCpu) {
  auto deck = tiny_deck("cnn", "cuda_graph_on_cpu");
  const auto without = train_on(deck, MPI_COMM_WORLD, "without");
  deck.run.cuda_graph = true;
  const auto with = train_on(deck, MPI_COMM_WORLD, "with");
  EXPECT_EQ(with.result.micro_steps_replayed, 0);
  EXPECT_EQ(with.result.logged_losses, without.result.logged_losses);
  if (world_rank() == 0) {
    nlohmann::json report;
    std::ifstream(with.output_dir + "/report.json") >> report;
    EXPECT_EQ(report["cuda_graph"]["asked"], true);
    EXPECT_EQ(report["cuda_graph"]["replayed_micro_steps"], 0);
  }
}

// Evaluation runs the test split in chunks (the micro-batch by default, so a GPU holds one
// chunk's activations at a time): the chunk size changes the summation order only. Also, every
// replica holds the same batch-norm statistics (averaged every step), so evaluating again gives
// the same figures.
TEST(Evaluation, DoesNotDependOnTheChunkSize) {
  auto deck = test_support::tiny_deck("cnn", "eval_chunks");
  // Past chance whatever the initial weights (5 steps at the tiny deck's lr 1e-2 may leave it at
  // chance): an epoch at 1e-3.
  deck.optim.lr = 1e-3;
  deck.run.max_steps = 16;
  deck.run.output_dir = test_support::shared_scratch_dir() + "/eval_chunks";
  train::Trainer trainer(deck, MPI_COMM_WORLD);
  trainer.run();
  const auto by_micro_batch = trainer.evaluate();
  for (int64_t chunk : {1, 7, 1000}) {
    const auto other = trainer.evaluate(chunk);
    EXPECT_NEAR(other.first, by_micro_batch.first, 1e-6 * by_micro_batch.first) << "chunk " << chunk;
    // A near-tie between two logits may flip one prediction of the 128 samples, not more.
    EXPECT_NEAR(other.second, by_micro_batch.second, 1.0 / 128 + 1e-9) << "chunk " << chunk;
  }
  EXPECT_GT(by_micro_batch.second, 0.3);  // a trained model: 4 classes, chance is 0.25
}
