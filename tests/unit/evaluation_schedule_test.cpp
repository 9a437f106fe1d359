// When a run evaluates its test split (train/evaluation_schedule): the epochs' evaluations and
// run.eval_every_steps' within them, and how many of each are still ahead, which the progress
// line's ETA counts in.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "train/evaluation_schedule.hpp"

using namespace trident::train;

namespace {
// The steps of a run's evaluations, walked through the way the trainer's loops reach them: each
// epoch's steps, every_steps' boundaries inside it, then its last step.
struct Walked {
  std::vector<int64_t> within, ends;
};
Walked walk(int64_t every, int64_t per_epoch, int64_t total) {
  Walked w;
  for (int64_t epoch_first = 0; epoch_first < total; epoch_first += per_epoch) {
    const int64_t end = std::min(total, epoch_first + per_epoch);
    for (int64_t step = epoch_first + 1; step < end; ++step)
      if (every > 0 && step % every == 0) w.within.push_back(step);
    w.ends.push_back(end);
  }
  return w;
}
int64_t count_from(const std::vector<int64_t>& steps, int64_t steps_done) {
  return std::count_if(steps.begin(), steps.end(), [&](int64_t s) { return s >= steps_done; });
}
}  // namespace

TEST(EvaluationSchedule, FortySteps16AnEpochEvery6) {
  // tests/cli/periodic_evaluation.sh's run: evaluations at 6,12,18,24,30,36 within the epochs
  // and 16,32,40 after them (the third epoch cut by run.max_steps).
  const EvaluationSchedule schedule{6, 16, 40};
  std::vector<int64_t> within, ends;
  for (int64_t step = 1; step <= 40; ++step) {
    if (schedule.within_epoch_due(step)) within.push_back(step);
    if (schedule.epoch_ends_at(step)) ends.push_back(step);
  }
  EXPECT_EQ(within, (std::vector<int64_t>{6, 12, 18, 24, 30, 36}));
  EXPECT_EQ(ends, (std::vector<int64_t>{16, 32, 40}));
  const auto at_start = evaluations_ahead(schedule, 0);
  EXPECT_EQ(at_start.within_epochs, 6);
  EXPECT_EQ(at_start.epoch_ends, 3);
  const auto at_18 = evaluations_ahead(schedule, 18);  // 18's own is still ahead of its progress line
  EXPECT_EQ(at_18.within_epochs, 4);
  EXPECT_EQ(at_18.epoch_ends, 2);
  const auto at_40 = evaluations_ahead(schedule, 40);
  EXPECT_EQ(at_40.within_epochs, 0);
  EXPECT_EQ(at_40.epoch_ends, 1);
}

TEST(EvaluationSchedule, CountsAheadEqualTheWalkedRunsForEveryBoundary) {
  for (int64_t every : {0, 1, 2, 3, 4, 5, 6, 7, 12, 16, 50})
    for (int64_t per_epoch : {1, 2, 3, 4, 6, 16})
      for (int64_t total : {1, 2, 5, 12, 16, 17, 40, 48}) {
        const EvaluationSchedule schedule{every, per_epoch, total};
        const Walked walked = walk(every, per_epoch, total);
        for (int64_t step = 1; step <= total; ++step) {
          const bool within = std::count(walked.within.begin(), walked.within.end(), step) > 0;
          const bool end = std::count(walked.ends.begin(), walked.ends.end(), step) > 0;
          ASSERT_EQ(schedule.within_epoch_due(step), within) << every << " " << per_epoch << " " << total << " " << step;
          ASSERT_EQ(schedule.epoch_ends_at(step), end) << every << " " << per_epoch << " " << total << " " << step;
        }
        for (int64_t done = 0; done <= total + 1; ++done) {
          const auto ahead = evaluations_ahead(schedule, done);
          ASSERT_EQ(ahead.within_epochs, count_from(walked.within, done)) << every << " " << per_epoch << " " << total << " " << done;
          ASSERT_EQ(ahead.epoch_ends, count_from(walked.ends, done)) << every << " " << per_epoch << " " << total << " " << done;
        }
      }
}

TEST(EvaluationSchedule, CountsWithoutWalkingAMillionSteps) {
  const EvaluationSchedule schedule{1000, 300000, 1000000};  // epochs end at 300k, 600k, 900k, 1M
  const auto ahead = evaluations_ahead(schedule, 1);
  EXPECT_EQ(ahead.epoch_ends, 4);
  EXPECT_EQ(ahead.within_epochs, 1000 - 3 - 1);  // 300k, 600k, 900k and 1M are epochs' ends
}
