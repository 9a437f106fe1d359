// ZeRO changes where model state lives, not what is computed: zero 1, 2 and 3 give the same
// parameters after k steps as zero 0 (plain DDP) on the same ranks, with gradient accumulation,
// with clipping active, and with partitions of uneven size; and each rank's model-state bytes
// are the ZeRO paper's.
#include <fstream>
#include <nlohmann/json.hpp>

#include "train_helpers.hpp"

using namespace trident;
using namespace trident::test_support;

namespace {

void expect_zero_equals_ddp(config::Deck deck, int zero) {
  deck.parallel.zero = 0;
  const auto ddp = train_on(deck, MPI_COMM_WORLD, "zero0");
  deck.parallel.zero = zero;
  const auto sharded = train_on(deck, MPI_COMM_WORLD, "zero" + std::to_string(zero));
  ASSERT_EQ(sharded.params.size(), ddp.params.size());
  EXPECT_LE(max_relative_difference(sharded, ddp), 1e-5) << "zero " << zero << " vs zero 0, " << deck.model.kind;
  expect_same_gradient_norms(sharded, ddp, "zero " + std::to_string(zero) + " vs zero 0, " + deck.model.kind);
  EXPECT_LT(ddp.result.logged_losses.back().second, ddp.result.logged_losses.front().second);
  EXPECT_NEAR(sharded.result.test_accuracy, ddp.result.test_accuracy, 1e-12);  // evaluation works sharded
  if (zero == 3 && world_rank() == 0) {
    // Every layer but the first of a forward and the last of a backward finds its gather
    // already started by the layer before it.
    nlohmann::json report;
    std::ifstream(sharded.output_dir + "/report.json") >> report;
    const auto total = report["zero3_gathers"]["total"].get<int64_t>();
    const auto prefetched = report["zero3_gathers"]["prefetched"].get<int64_t>();
    EXPECT_GT(total, 0);
    EXPECT_GE(2 * prefetched, total) << prefetched << " of " << total << " gathers prefetched";
  }
}

// Accumulation (4 / dp micro-steps), clipping below every step's gradient norm, and mlp widths
// that make the parameter count (31*144+31 + 17*31+17 + 4*17+4 = 5116 + ...) split unevenly.
config::Deck hard_deck(const std::string& kind, const std::string& name) {
  auto deck = tiny_deck(kind, name);
  deck.model.hidden = "31,17";
  deck.optim.clip_grad_norm = 0.2;
  deck.parallel.bucket_mb = 0.002;  // a few KB: several buckets in flight
  return deck;
}

}  // namespace

TEST(ZeroEquivalence, Stage1) { expect_zero_equals_ddp(hard_deck("cnn", "z1_cnn"), 1); }
TEST(ZeroEquivalence, Stage2) { expect_zero_equals_ddp(hard_deck("cnn", "z2_cnn"), 2); }
TEST(ZeroEquivalence, Stage3) { expect_zero_equals_ddp(hard_deck("cnn", "z3_cnn"), 3); }
TEST(ZeroEquivalence, EveryStageMlpPlainSgd) {
  for (int zero : {1, 2, 3}) {
    auto deck = plain_sgd(hard_deck("mlp", "z" + std::to_string(zero) + "_mlp_plain_sgd"));
    expect_zero_equals_ddp(deck, zero);
  }
}
TEST(ZeroEquivalence, Stage2MlpSgd) {
  auto deck = hard_deck("mlp", "z2_mlp");
  deck.optim.name = "sgd";
  deck.optim.lr = 0.5;
  expect_zero_equals_ddp(deck, 2);
}
TEST(ZeroEquivalence, Stage3MlpSgd) {
  auto deck = hard_deck("mlp", "z3_mlp");
  deck.optim.name = "sgd";
  deck.optim.lr = 0.5;
  expect_zero_equals_ddp(deck, 3);
}

// A test split that does not divide by dp (129 samples: 65 + 64 at dp 2, 33 + 3 x 32 at dp 4)
// gives the replicas shares whose micro-batch chunks differ in number (9 and 8 of 8 samples).
// ZeRO-3 gathers every layer's parameters over the dp group in each forward, so every replica
// must run the same number of evaluation forwards: with one chunk more on one replica the ranks
// waited for each other at the first evaluation. It finishes, and evaluates as DDP does.
TEST(ZeroEquivalence, Stage3EvaluatesATestSplitThatDoesNotDivideByDp) {
  auto deck = tiny_deck("cnn", "z3_uneven_test");
  deck.data.path = synthetic_dataset(129);
  deck.run.max_steps = 2;
  deck.parallel.zero = 0;
  const auto ddp = train_on(deck, MPI_COMM_WORLD, "zero0");
  deck.parallel.zero = 3;
  const auto sharded = train_on(deck, MPI_COMM_WORLD, "zero3");
  EXPECT_NEAR(sharded.result.test_loss, ddp.result.test_loss, 1e-6 * ddp.result.test_loss);
  EXPECT_NEAR(sharded.result.test_accuracy, ddp.result.test_accuracy, 1.0 / 129 + 1e-9);
}

// report.json's model-state bytes per rank against the paper's formula for fp32 AdamW
// (K = 8): zero 1 (4+4)N + 8N/dp, zero 2 4N + 12N/dp, zero 3 16N/dp.
TEST(ZeroMemory, ModelStateBytesMatchTheFormula) {
  for (int zero : {0, 1, 2, 3}) {
    auto deck = tiny_deck("mlp", "memory");
    deck.model.hidden = "31,17";
    deck.run.max_steps = 1;
    deck.parallel.zero = zero;
    const auto run = train_on(deck, MPI_COMM_WORLD, "zero" + std::to_string(zero));
    if (world_rank() != 0) continue;  // rank 0 writes report.json (the max over ranks)
    nlohmann::json report;
    std::ifstream(run.output_dir + "/report.json") >> report;
    const auto& m = report["memory"];
    const int64_t n = report["parameters"].get<int64_t>(), dp = world_size();
    const int64_t measured = m["model_state_bytes"]["params"].get<int64_t>() +
                             m["model_state_bytes"]["grads"].get<int64_t>() +
                             m["model_state_bytes"]["optimizer"].get<int64_t>() +
                             m["model_state_bytes"]["master"].get<int64_t>();
    const int64_t part = (n + dp - 1) / dp;  // the largest partition
    const int64_t formula[] = {16 * n, 8 * n + 8 * part, 4 * n + 12 * part, 16 * part};
    EXPECT_EQ(m["expected_model_state_bytes"].get<int64_t>(), formula[zero]) << "zero " << zero;
    EXPECT_EQ(measured, formula[zero]) << "zero " << zero << " dp " << dp;
  }
}
