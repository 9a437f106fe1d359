// How many periodic checkpoint saves a run still makes (train/save_schedule), which the progress
// line's ETA counts in: against a walk of the step boundaries as agree_at_step_end decides them.
#include <gtest/gtest.h>

#include "train/save_schedule.hpp"

using namespace trident::train;

namespace {
// Each boundary from `steps_done` to the last before the run's end, its steps `step_s` long: a
// save when the boundary is a multiple of every_steps or the clock since the last save has
// reached every_seconds; a save restarts the clock.
int64_t walk(const SaveSchedule& schedule, int64_t steps_done, double step_s, double since_s) {
  int64_t saves = 0;
  double since = since_s;
  for (int64_t boundary = steps_done; boundary < schedule.total_steps; ++boundary) {
    if (boundary > steps_done) since += step_s;
    const bool by_steps = schedule.every_steps > 0 && boundary % schedule.every_steps == 0;
    const bool by_clock = schedule.every_seconds > 0 && since >= schedule.every_seconds;
    if (by_steps || by_clock) {
      ++saves;
      since = 0;
    }
  }
  return saves;
}
}  // namespace

TEST(SaveSchedule, BySteps) {
  // Saves at 6, 12, ..., 36 of 40 (the final save at 40 is not a periodic one).
  const SaveSchedule schedule{6, 0, 40};
  EXPECT_EQ(periodic_saves_ahead(schedule, 1, 1.0, 0), 6);
  EXPECT_EQ(periodic_saves_ahead(schedule, 6, 1.0, 0), 6);  // its own boundary's save is still ahead
  EXPECT_EQ(periodic_saves_ahead(schedule, 7, 1.0, 0), 5);
  EXPECT_EQ(periodic_saves_ahead(schedule, 36, 1.0, 0), 1);
  EXPECT_EQ(periodic_saves_ahead(schedule, 37, 1.0, 0), 0);
  EXPECT_EQ(periodic_saves_ahead(schedule, 40, 1.0, 0), 0);
  EXPECT_EQ(periodic_saves_ahead({8, 0, 40}, 33, 1.0, 0), 0);  // 40 itself: the final save
}

TEST(SaveSchedule, ByTheClock) {
  // Every 10 s at 2 s a step, 7 s since the last save at boundary 3: the next at boundary 5
  // (11 s), then every 5 boundaries: 5, 10, 15 of 20.
  const SaveSchedule schedule{0, 10, 20};
  EXPECT_EQ(periodic_saves_ahead(schedule, 3, 2.0, 7), 3);
  EXPECT_EQ(periodic_saves_ahead(schedule, 3, 2.0, 10), 4);  // due at this boundary: 3, 8, 13, 18
  EXPECT_EQ(periodic_saves_ahead(schedule, 3, 0.0, 7), 0);   // no step timed yet
}

TEST(SaveSchedule, EqualsTheWalk) {
  for (int64_t every : {0, 1, 2, 3, 5, 7, 16})
    for (double every_s : {0.0, 0.5, 1.0, 2.5, 4.0, 7.0})
      for (double step_s : {0.25, 0.5, 1.0, 1.5})
        for (double since : {0.0, 0.5, 3.0, 8.0})
          for (int64_t total = 1; total <= 40; ++total)
            for (int64_t done = 1; done <= total; ++done) {
              const SaveSchedule schedule{every, every_s, total};
              ASSERT_EQ(periodic_saves_ahead(schedule, done, step_s, since), walk(schedule, done, step_s, since))
                  << "every_steps " << every << ", every " << every_s << " s, steps of " << step_s << " s, " << since
                  << " s since the last save, at " << done << " of " << total;
            }
}

TEST(SaveSchedule, ALongRunWithoutAWalk) {
  // A million steps every 1000 and every 37.5 s at 0.125 s a step: 999 by steps (1000 to
  // 999000), and the clock's at the 300th, 600th and 900th boundary of each of the 1000 stretches
  // around them (999 boundaries each: before 1000, the 998 between, after 999000).
  EXPECT_EQ(periodic_saves_ahead({1000, 37.5, 1000000}, 1, 0.125, 0), 999 + 1000 * 3);
}
