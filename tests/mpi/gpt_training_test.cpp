// The GPT trains on a real text corpus (the loss falls well below that of guessing among 256
// bytes), and data parallelism, pipelining and ZeRO-3 change nothing but where it runs.
#include <cmath>

#include "checkpoint_files.hpp"
#include "model/recompute.hpp"
#include "train_helpers.hpp"

using namespace trident;
using namespace trident::test_support;

namespace {

config::Deck tiny_gpt_deck(const std::string& name) {
  config::Deck d;
  d.run.name = name;
  d.run.max_steps = 4;
  d.run.log_every = 1;
  d.run.threads = 1;
  d.data.path = text_corpus_dataset();
  d.model.kind = "gpt";
  d.model.layers = 2;
  d.model.heads = 2;
  d.model.d_model = 32;
  d.model.seq_len = 32;
  d.optim.global_batch = 16;
  d.optim.micro_batch = "4";
  d.optim.lr = 3e-3;
  // AdamW's update is about lr x sign(g) for |g| << eps: with the default eps = 1e-8 rounding
  // differences in the order of summation on gradients near zero become lr-sized parameter
  // differences. A larger eps keeps those elements' updates proportional to g.
  d.optim.eps = 1e-6;
  return d;
}

// Parameters within `tolerance` of each tensor's largest value; the losses and gradient norms
// within 1e-5 (what a lost, doubled or undivided micro-batch changes by 25% or more).
void expect_same_training(const Trained& layout, const Trained& one, const std::string& what,
                          double tolerance = 1e-5) {
  ASSERT_FALSE(layout.params.empty());
  EXPECT_LE(max_relative_difference(layout, one), tolerance) << what;
  ASSERT_EQ(layout.result.logged_losses.size(), one.result.logged_losses.size());
  for (size_t i = 0; i < one.result.logged_losses.size(); ++i)
    EXPECT_NEAR(layout.result.logged_losses[i].second, one.result.logged_losses[i].second,
                1e-5 * one.result.logged_losses[i].second)
        << what << ", step " << one.result.logged_losses[i].first;
}

}  // namespace

// README: "the GPT computes the same step whatever the micro-batch" (4 accumulated micro-batches
// of 4 against one of 16, as Accumulation checks the mlp).
TEST(GptTraining, AccumulatedMicroBatchesEqualOneBatch) {
  if (world_size() > 1) GTEST_SKIP() << "one rank against itself: np 1 covers it";
  auto deck = tiny_gpt_deck("gpt_accumulation");
  deck.optim.micro_batch = "16";
  const auto whole = train_on(deck, MPI_COMM_SELF, "micro16");
  deck.optim.micro_batch = "4";
  const auto accumulated = train_on(deck, MPI_COMM_SELF, "micro4");
  // 3e-5: 1.14e-5 on an AMD EPYC VM (2026-11-27; OpenBLAS's kernels for it sum a micro-batch of 4
  // and one of 16 in other orders, and AdamW turns those roundings of gradients near eps into
  // parameter differences), under 1e-5 on the machines CI had run it on before.
  expect_same_training(accumulated, whole, "gpt: 4 micro-batches of 4 vs 1 of 16", 3e-5);
  expect_same_gradient_norms(accumulated, whole, "gpt: 4 micro-batches of 4 vs 1 of 16");
}

TEST(GptTraining, LossFallsOnTheTextCorpus) {
  if (world_size() > 2) GTEST_SKIP() << "a single-rank run; np 1 and 2 cover it";
  auto deck = tiny_gpt_deck("gpt_learns");
  deck.run.max_steps = 60;
  deck.run.log_every = 10;
  deck.model.d_model = 64;
  const auto run = train_on(deck, MPI_COMM_SELF, "alone");
  ASSERT_EQ(run.result.logged_losses.size(), 6u);
  // From ln 256 = 5.55 at the start, still above 2.8 at step 10; by step 60 a byte-level model
  // has learnt the letter frequencies and common pairs: under 3.5 nats (measured ~2.8).
  EXPECT_GT(run.result.logged_losses.front().second, 2.8);
  EXPECT_LT(run.result.logged_losses.back().second, 3.5);
  EXPECT_LT(run.result.logged_losses.back().second, run.result.logged_losses.front().second - 0.3);
  EXPECT_LT(run.result.test_loss, 3.5);
  EXPECT_GT(run.result.test_accuracy, 0.1);  // next-byte accuracy; 1/256 by chance
}

TEST(GptEquivalence, DataParallelEqualsOneRank) {
  if (world_size() > 2) GTEST_SKIP() << "np 2 covers it (np 4 oversubscribes the CI machine)";
  const auto deck = tiny_gpt_deck("gpt_dp");
  expect_same_training(train_on(deck, MPI_COMM_WORLD, "dp"), train_on(deck, MPI_COMM_SELF, "one"), "gpt dp");
}

TEST(GptEquivalence, PipelineAndZero3EqualOneRank) {
  if (world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  auto deck = tiny_gpt_deck("gpt_pp");
  const auto one = train_on(deck, MPI_COMM_SELF, "one");
  deck.parallel.pp = 2;  // [embed, block1] | [block2, head]
  deck.parallel.schedule = "1f1b";
  expect_same_training(train_on(deck, MPI_COMM_WORLD, "pp2"), one, "gpt pp=2");
  deck.parallel.schedule = "zb-h1";  // attention, layer norms and linears with split backwards
  deck.run.name = "gpt_pp_zbh1";
  expect_same_training(train_on(deck, MPI_COMM_WORLD, "pp2_zbh1"), one, "gpt pp=2 zb-h1");
  deck.parallel.zero = 3;  // layer norms' weight gradients read their layer's gathered parameters
  deck.run.name = "gpt_pp_zbh1_zero3";
  expect_same_training(train_on(deck, MPI_COMM_WORLD, "pp2_zbh1_zero3"), one, "gpt pp=2 zb-h1 zero 3");
  deck.parallel.zero = 0;
  deck.parallel.schedule = "interleaved";  // [embed] [block2] on rank 0, [block1] [head] on rank 1
  deck.parallel.virtual_stages = 2;
  deck.run.name = "gpt_pp_interleaved";
  expect_same_training(train_on(deck, MPI_COMM_WORLD, "pp2_interleaved"), one, "gpt pp=2 interleaved v=2");
  deck.parallel.pp = 1;
  deck.parallel.schedule = "1f1b";
  deck.parallel.virtual_stages = 1;
  deck.parallel.zero = 3;
  deck.run.name = "gpt_zero3";
  expect_same_training(train_on(deck, MPI_COMM_WORLD, "zero3"), one, "gpt zero 3");
}

// model.recompute changes what a step keeps between forward and backward, not what it computes:
// the same losses and parameters as the stored blocks' run of the same layout, bit for bit, where
// the blocks' parameters or backward move: one rank in fp32 and bf16; at np 2 DDP (its buckets
// launched by the parameters' accumulators, which the recomputation's inner backward does not
// run), ZeRO-3 (each block gathered again before its backward, by a hook on the recomputed
// output), and pipelines with several micro-batches in flight (1f1b, gpipe with ZeRO-1, zb-h1 with
// ZeRO-3, whose split backward recomputes a block for its input gradient and again, its layer
// gathered anew, for its weight gradients, interleaved in bf16).
TEST(GptTraining, RecomputedBlocksTrainAsStoredOnes) {
  if (world_size() > 2) GTEST_SKIP() << "np 1 and 2 cover it";
  struct Layout {
    std::string name;
    int64_t pp, zero;
    std::string schedule;
    int64_t virtual_stages;
    std::string precision;
  };
  std::vector<Layout> layouts{{"one", 1, 0, "1f1b", 1, "fp32"}, {"one_bf16", 1, 0, "1f1b", 1, "bf16"}};
  if (world_size() == 2)
    layouts = {{"dp2", 1, 0, "1f1b", 1, "fp32"},
               {"dp2_zero3", 1, 3, "1f1b", 1, "fp32"},
               {"pp2_1f1b", 2, 0, "1f1b", 1, "fp32"},
               {"pp2_gpipe_zero1", 2, 1, "gpipe", 1, "fp32"},
               {"pp2_zbh1_zero3", 2, 3, "zb-h1", 1, "fp32"},
               {"pp2_interleaved_bf16", 2, 0, "interleaved", 2, "bf16"}};
  for (const auto& layout : layouts) {
    auto deck = tiny_gpt_deck("gpt_recompute_" + layout.name);
    deck.parallel.pp = layout.pp;
    deck.parallel.zero = layout.zero;
    deck.parallel.schedule = layout.schedule;
    deck.parallel.virtual_stages = layout.virtual_stages;
    deck.optim.precision = layout.precision;
    const int64_t before = model::recomputations();
    const auto stored = train_on(deck, MPI_COMM_WORLD, "stored");
    EXPECT_EQ(model::recomputations(), before) << layout.name;
    deck.model.recompute = true;
    const auto recomputed = train_on(deck, MPI_COMM_WORLD, "recomputed");
    EXPECT_GT(model::recomputations(), before) << layout.name << ": no block was recomputed";
    ASSERT_FALSE(stored.params.empty());
    EXPECT_EQ(max_relative_difference(recomputed, stored), 0.0) << layout.name;
    ASSERT_EQ(recomputed.result.logged_losses.size(), stored.result.logged_losses.size()) << layout.name;
    for (size_t i = 0; i < stored.result.logged_losses.size(); ++i)
      EXPECT_EQ(recomputed.result.logged_losses[i].second, stored.result.logged_losses[i].second)
          << layout.name << ", log " << i;
  }
}

// bf16 autocast with fp32 master weights follows the fp32 run closely: at every logged step the
// loss is within 0.05 nats (about 1.5%; measured 0.01-0.03 over 60 steps of the fortunes deck),
// yet not identical (the matmuls really ran in bf16).
TEST(GptPrecision, Bf16TracksFp32) {
  if (world_size() > 2) GTEST_SKIP() << "np 1 and 2 cover it";
  auto deck = tiny_gpt_deck("gpt_fp32");
  deck.run.max_steps = 40;
  deck.run.log_every = 10;
  deck.model.d_model = 64;
  const auto fp32 = train_on(deck, MPI_COMM_WORLD, "fp32");
  deck.run.name = "gpt_bf16";
  deck.optim.precision = "bf16";
  const auto bf16 = train_on(deck, MPI_COMM_WORLD, "bf16");
  ASSERT_EQ(bf16.result.logged_losses.size(), 4u);
  double largest = 0;
  for (size_t i = 0; i < 4; ++i) {
    const double gap = std::abs(bf16.result.logged_losses[i].second - fp32.result.logged_losses[i].second);
    EXPECT_LT(gap, 0.05) << "step " << fp32.result.logged_losses[i].first;
    largest = std::max(largest, gap);
  }
  EXPECT_GT(largest, 0.0);
  EXPECT_NEAR(bf16.result.test_loss, fp32.result.test_loss, 0.03 * fp32.result.test_loss);
  // The master weights are fp32 whatever the compute type.
  for (const auto& [name, value] : bf16.params) EXPECT_EQ(value.scalar_type(), torch::kFloat) << name;
}

// Mixed precision composes with ZeRO and the pipeline: bf16 under ZeRO-3, and bf16 with pp = 2,
// train like bf16 with plain DDP. Not to fp32's 1e-5: the layouts sum gradients in different
// orders, and a last-bit difference in an fp32 master weight can round its bf16 copy the other
// way at the next step (2^-8 relative), which moves that element by an Adam step. How many such
// flips there are depends on the CPU's bf16 kernels: the largest, relative to its tensor's
// largest weight, measured 0.0106 (ZeRO-3 against DDP, LibTorch 2.11) and 0.034 (LibTorch 1.13,
// 2026-11-27) on AMD EPYC VMs. So the check is on the whole difference (2-norm over every
// parameter), against the same parameters' movement in one step (DDP after 3 steps against 4), measured
// here: 2.4e-4 against 2.5e-2 on that VM. A tenth of one step's movement still fails a layout that
// lost or double-counted a gradient; the largest single element only has to stay under 0.1.
TEST(GptPrecision, Bf16WithZero3AndPipelineTrainsLikeBf16Ddp) {
  if (world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  auto deck = tiny_gpt_deck("gpt_bf16_ddp");
  deck.optim.precision = "bf16";
  const auto ddp = train_on(deck, MPI_COMM_WORLD, "ddp");
  auto three = deck;
  three.run.name = "gpt_bf16_ddp_3_steps";
  three.run.max_steps = 3;
  const auto after_three = train_on(three, MPI_COMM_WORLD, "three");
  for (const auto& [zero, pp] : {std::pair<int, int>{3, 1}, {0, 2}}) {
    deck.run.name = "gpt_bf16_zero" + std::to_string(zero) + "_pp" + std::to_string(pp);
    deck.parallel.zero = zero;
    deck.parallel.pp = pp;
    const auto other = train_on(deck, MPI_COMM_WORLD, "layout");
    ASSERT_FALSE(other.params.empty());
    // One step's movement of the same parameters (a pipeline rank holds its stage's only).
    Trained same_three = after_three;
    same_three.params.clear();
    for (const auto& [name, value] : after_three.params)
      if (std::any_of(other.params.begin(), other.params.end(), [&](const auto& p) { return p.first == name; }))
        same_three.params.emplace_back(name, value);
    const double one_step = relative_norm_difference(same_three, ddp);
    ASSERT_GT(one_step, 0.0) << deck.run.name;
    EXPECT_LE(relative_norm_difference(other, ddp), one_step / 10) << deck.run.name;
    EXPECT_LE(max_relative_difference(other, ddp), 0.1) << deck.run.name;
    ASSERT_EQ(other.result.logged_losses.size(), ddp.result.logged_losses.size());
    for (size_t i = 0; i < ddp.result.logged_losses.size(); ++i)
      EXPECT_NEAR(other.result.logged_losses[i].second, ddp.result.logged_losses[i].second,
                  2e-3 * ddp.result.logged_losses[i].second)
          << deck.run.name << ", step " << i + 1;
  }
}

// A GPT checkpoint (pp = 2 when there are 2 ranks; and under ZeRO-3, whose ranks build only
// their partitions) resumes bit for bit: 3 steps, stop, resume, 3 more steps give the losses and
// parameters of 6 steps straight. (A resumed GPT draws no initial weights: the checkpoint gives
// every parameter, which this compares.)
TEST(GptCheckpoint, ResumeIsBitExact) {
  if (world_size() > 2) GTEST_SKIP() << "np 1 and 2 cover it";
  for (const int zero : {0, 3}) {
    const std::string name = "gpt_resume_zero" + std::to_string(zero);
    auto deck = tiny_gpt_deck(name);
    deck.run.max_steps = 6;
    deck.parallel.zero = zero;
    if (world_size() == 2 && zero == 0) deck.parallel.pp = 2;
    const auto straight = train_on(deck, MPI_COMM_WORLD, "straight_" + name);
    deck.run.output_dir = shared_scratch_dir() + "/" + name + "_stopped";
    auto first = deck;
    first.run.max_steps = 3;
    train::Trainer(first, MPI_COMM_WORLD, "never").run();
    train::Trainer resumed(deck, MPI_COMM_WORLD, "auto");
    const auto result = resumed.run();
    EXPECT_EQ(result.first_step, 3);
    ASSERT_EQ(result.logged_losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(result.logged_losses[i], straight.result.logged_losses[i + 3]) << name;
    const auto params = resumed.full_parameters();
    ASSERT_EQ(params.size(), straight.params.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[i].second, straight.params[i].second)) << name << " " << params[i].first;
    // Every tensor of the final files, AdamW's moments and each rank's RNG state included.
    expect_identical_checkpoints(straight.output_dir + "/checkpoints/step_0000006.h5",
                                 deck.run.output_dir + "/checkpoints/step_0000006.h5", name + " resumed at step 3");
  }
}
