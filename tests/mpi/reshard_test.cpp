// Resharding (issue 6): a checkpoint written under one layout loads under any other. A chain of
// layouts trains one run in legs: the first trains from scratch, each next one resumes from the
// checkpoint the previous one ended with. For every leg:
//   - saved == in memory, exactly: the file's parameters and optimizer state are the writer's
//     own (full_parameters / full_optimizer_state after run(), each rank its stage);
//   - loaded == saved, exactly: right after construction from the file, before run(), the
//     reader's parameters and optimizer state are the file's;
//   - the trajectory: after the leg, parameters and optimizer state are within kLayoutTolerance
//     (relative, train_helpers.hpp), and the losses it logged within 1e-6, of one rank training the
//     same global batch uninterrupted.
// A layout of n ranks runs on world ranks [0, n); the others wait (without spinning).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "checkpoint/checkpoint.hpp"
#include "train_helpers.hpp"

using namespace trident;
using namespace trident::test_support;

namespace {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

struct Layout {
  int dp = 1, pp = 1, zero = 0;
  int ranks() const { return dp * pp; }
  std::string text() const { return fmt::format("dp{}xpp{} zero{}", dp, pp, zero); }
};

constexpr int64_t kSteps = 6;

// An MLP whose ZeRO partitions are uneven and fall inside tensors (hidden 31, 17), a global
// batch of 32 in micro-batches of 4: accumulation 8 / 4 / 2 at dp 1 / 2 / 4. Collective over
// the world (tiny_deck's dataset waits at a barrier): every rank calls it, before any split.
config::Deck reshard_deck() {
  auto deck = tiny_deck("mlp", "reshard");
  deck.model.hidden = "31,17";
  deck.optim.micro_batch = "4";
  return deck;
}

struct Snapshot {
  Named params, state;  // this rank's stage
  std::vector<std::pair<int64_t, double>> losses;
};

// One rank, never interrupted, `steps` steps of `base` (always reshard_deck(); run once per
// process for each count).
const Snapshot& uninterrupted(const config::Deck& base, int64_t steps) {
  static std::map<int64_t, Snapshot> done;
  auto it = done.find(steps);
  if (it != done.end()) return it->second;
  auto deck = base;
  deck.run.max_steps = steps;
  deck.run.output_dir =
      fmt::format("{}/reshard_uninterrupted_{}_r{}", shared_scratch_dir(), steps, world_rank());
  train::Trainer trainer(deck, MPI_COMM_SELF);
  Snapshot s;
  s.losses = trainer.run().logged_losses;
  s.params = trainer.full_parameters();
  s.state = trainer.full_optimizer_state();
  return done.emplace(steps, std::move(s)).first->second;
}

// MPI_Barrier on the world, polling gently: ranks outside a layout do not take the cores
// (two here) from those in it.
void wait_for_everyone() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  for (MPI_Test(&request, &done, MPI_STATUS_IGNORE); !done; MPI_Test(&request, &done, MPI_STATUS_IGNORE))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Exactly the tensors of `file` under `group` ("params", "optim"), matched by name.
void expect_equal_to_file(const checkpoint::Reader& file, const std::string& group, const Named& tensors,
                          const std::string& what) {
  for (const auto& [name, value] : tensors) {
    const auto stored = file.read_tensor("/" + group + "/" + name);
    EXPECT_TRUE(stored.numel() == value.numel() && torch::equal(stored, value.reshape({-1})))
        << what << ": " << group << "/" << name << " differs from " << file.path() << " (max |diff| "
        << (stored.numel() == value.numel() ? (stored - value.reshape({-1})).abs().max().item<double>() : -1.0)
        << ")";
  }
}

double max_relative(const Named& a, const Named& reference) {
  Trained x, y;
  x.params = a;
  y.params = reference;
  return max_relative_difference(x, y);
}

void expect_on_trajectory(const Snapshot& got, const Snapshot& ref, int64_t from_step, int64_t steps,
                          const std::string& what) {
  EXPECT_LE(max_relative(got.params, ref.params), kLayoutTolerance) << what << ": parameters after step " << steps;
  EXPECT_LE(max_relative(got.state, ref.state), kLayoutTolerance) << what << ": optimizer state after step " << steps;
  EXPECT_EQ(got.losses.size(), static_cast<size_t>(steps - from_step)) << what;
  for (const auto& [step, loss] : got.losses) {
    const auto expected = ref.losses.at(static_cast<size_t>(step - 1));
    ASSERT_EQ(expected.first, step);
    EXPECT_LE(std::abs(loss - expected.second), 1e-6 * std::abs(expected.second)) << what << ": loss of step " << step;
  }
}

std::string checkpoint_of(const std::string& output_dir, int64_t step) {
  return fmt::format("{}/checkpoints/step_{:07d}.h5", output_dir, step);
}

// One leg on `comm`: `layout` resumes from `from` ("" for a fresh start) at `first_step` and
// trains to `steps`, ending with a checkpoint there.
void run_leg(MPI_Comm comm, const config::Deck& base, const Layout& layout, const std::string& from,
             int64_t first_step, int64_t steps, const std::string& output_dir, const std::string& what) {
  auto deck = base;
  deck.run.max_steps = steps;  // ends with a checkpoint at `steps`
  deck.run.output_dir = output_dir;
  deck.parallel.dp = std::to_string(layout.dp);
  deck.parallel.pp = layout.pp;
  deck.parallel.zero = layout.zero;
  const auto errors = config::validate(deck, {layout.ranks(), false});
  EXPECT_TRUE(errors.empty()) << what << ": " << (errors.empty() ? "" : errors.front());
  train::Trainer trainer(deck, comm, from.empty() ? "never" : from);
  if (!from.empty()) {  // loaded == saved, before any step
    const auto params = trainer.full_parameters();
    const auto state = trainer.full_optimizer_state();
    EXPECT_EQ(state.size(), 2 * params.size()) << what << ": AdamW's exp_avg and exp_avg_sq";
    checkpoint::Reader file(from);
    EXPECT_EQ(file.meta().step, first_step) << what;
    expect_equal_to_file(file, "params", params, what + " as loaded");
    expect_equal_to_file(file, "optim", state, what + " as loaded");
  }
  Snapshot got;
  const auto result = trainer.run();
  EXPECT_EQ(result.first_step, first_step) << what;
  got.losses = result.logged_losses;
  got.params = trainer.full_parameters();
  got.state = trainer.full_optimizer_state();
  EXPECT_EQ(got.state.size(), 2 * got.params.size()) << what;
  {  // saved == in memory
    checkpoint::Reader file(checkpoint_of(output_dir, steps));
    EXPECT_EQ(file.meta().step, steps) << what;
    EXPECT_EQ(file.meta().dp, layout.dp) << what;
    EXPECT_EQ(file.meta().pp, layout.pp) << what;
    EXPECT_EQ(file.meta().zero, layout.zero) << what;
    expect_equal_to_file(file, "params", got.params, what + " as saved");
    expect_equal_to_file(file, "optim", got.state, what + " as saved");
  }
  expect_on_trajectory(got, uninterrupted(base, steps), first_step, steps, what);
}

// Trains `chain[0]` from scratch and each next layout from the checkpoint the one before ended
// with, in equal legs up to kSteps. Skips when the world cannot host every layout.
void expect_reshards(const std::string& name, const std::vector<Layout>& chain) {
  int needed = 0;
  for (const auto& l : chain) needed = std::max(needed, l.ranks());
  if (needed > world_size())
    GTEST_SKIP() << "needs " << needed << " ranks, the world has " << world_size();
  const auto legs = static_cast<int64_t>(chain.size());
  ASSERT_EQ(kSteps % legs, 0);
  const auto base = reshard_deck();  // on every rank, before any layout runs on some of them
  for (int64_t steps = kSteps / legs; steps <= kSteps; steps += kSteps / legs) uninterrupted(base, steps);

  std::string from;  // the checkpoint the leg resumes from
  for (int64_t leg = 0; leg < legs; ++leg) {
    const Layout& layout = chain[static_cast<size_t>(leg)];
    const int64_t first_step = leg * kSteps / legs, steps = (leg + 1) * kSteps / legs;
    const std::string output_dir = fmt::format("{}/{}_leg{}", shared_scratch_dir(), name, leg);
    const std::string what = fmt::format("{} leg {} ({}, steps {}..{}{})", name, leg, layout.text(), first_step,
                                         steps, from.empty() ? "" : ", resumed from " + from);
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() < layout.ranks() ? 0 : MPI_UNDEFINED, world_rank(), &comm);
    if (comm != MPI_COMM_NULL) {
      try {
        run_leg(comm, base, layout, from, first_step, steps, output_dir, what);
      } catch (const std::exception& e) {  // bad input: every rank alike (one rank's fault aborts the job)
        ADD_FAILURE() << what << ": " << e.what();
      }
      MPI_Comm_free(&comm);
    }
    wait_for_everyone();
    from = checkpoint_of(output_dir, steps);
  }
}

Layout dp(int replicas, int zero = 0) { return {replicas, 1, zero}; }
Layout pp2(int replicas = 1, int zero = 0) { return {replicas, 2, zero}; }

}  // namespace

// np 2
TEST(Reshard, DataParallel2To1) { expect_reshards("rs_dp2_dp1", {dp(2), dp(1)}); }
TEST(Reshard, DataParallel1To2) { expect_reshards("rs_dp1_dp2", {dp(1), dp(2)}); }
TEST(Reshard, Pipeline2To1To2) { expect_reshards("rs_pp2_pp1_pp2", {pp2(), dp(1), pp2()}); }
TEST(Reshard, Zero3To1To0) { expect_reshards("rs_zero3_zero1_zero0", {dp(2, 3), dp(2, 1), dp(1, 0)}); }
TEST(Reshard, Zero2ToPipeline) { expect_reshards("rs_zero2_pp2", {dp(2, 2), pp2()}); }
TEST(Reshard, PipelineToZero3) { expect_reshards("rs_pp2_zero3", {pp2(), dp(2, 3)}); }

// np 4
TEST(Reshard, DataParallel4To2To1) { expect_reshards("rs_dp4_dp2_dp1", {dp(4), dp(2), dp(1)}); }
TEST(Reshard, DataAndPipelineZero1ToZero3) { expect_reshards("rs_dp2pp2_zero1_dp4_zero3", {pp2(2, 1), dp(4, 3)}); }
TEST(Reshard, Zero3ToDataAndPipeline) { expect_reshards("rs_dp4_zero3_dp2pp2", {dp(4, 3), pp2(2)}); }
