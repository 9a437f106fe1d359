#include "train/save_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace trident::train {

namespace {
// The saves by the clock at the boundaries `first + j`, j in [0, last_j], with `since_s` since
// the last save at j = 0 and none by steps among them: the first at j0, where the clock reaches
// the interval, then one every `every_j` boundaries.
int64_t clock_saves(double interval_s, double step_s, double since_s, int64_t last_j) {
  if (last_j < 0) return 0;
  const auto every_j = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(interval_s / step_s)));
  const auto j0 = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((interval_s - since_s) / step_s)));
  return j0 > last_j ? 0 : 1 + (last_j - j0) / every_j;
}
}  // namespace

int64_t periodic_saves_ahead(const SaveSchedule& schedule, int64_t steps_done, double step_s, double since_save_s) {
  const int64_t last = schedule.total_steps - 1;  // the last boundary a periodic save can fall on
  if (steps_done > last) return 0;
  const int64_t every = schedule.every_steps;
  const bool by_clock = schedule.every_seconds > 0 && step_s > 0;
  if (every <= 0) return by_clock ? clock_saves(schedule.every_seconds, step_s, since_save_s, last - steps_done) : 0;
  const int64_t first_multiple = (steps_done + every - 1) / every * every;  // its save restarts the clock
  const int64_t by_steps = first_multiple > last ? 0 : (last - first_multiple) / every + 1;
  if (!by_clock) return by_steps;
  // The clock's saves before the first save by steps, in each whole stretch between two of them
  // (every - 1 boundaries, the clock restarted by the first), and after the last one.
  const int64_t before =
      clock_saves(schedule.every_seconds, step_s, since_save_s, std::min(first_multiple, last + 1) - 1 - steps_done);
  if (by_steps == 0) return before;
  const int64_t last_multiple = first_multiple + (by_steps - 1) * every;
  const int64_t per_stretch = clock_saves(schedule.every_seconds, step_s, step_s, every - 2);
  const int64_t after = clock_saves(schedule.every_seconds, step_s, step_s, last - last_multiple - 1);
  return by_steps + before + (by_steps - 1) * per_stretch + after;
}

}  // namespace trident::train
