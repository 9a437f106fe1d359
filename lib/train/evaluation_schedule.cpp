#include "train/evaluation_schedule.hpp"

#include <algorithm>
#include <numeric>

namespace trident::train {

namespace {
// How many multiples of `m` (> 0) lie in [first, last], first >= 1.
int64_t multiples_in(int64_t m, int64_t first, int64_t last) {
  return last < first ? 0 : last / m - (first - 1) / m;
}
}  // namespace

bool EvaluationSchedule::epoch_ends_at(int64_t steps_done) const {
  return steps_done == total_steps || steps_done % steps_per_epoch == 0;
}

bool EvaluationSchedule::within_epoch_due(int64_t steps_done) const {
  return every_steps > 0 && steps_done % every_steps == 0 && !epoch_ends_at(steps_done);
}

// Counted, not walked step by step: a progress line asks every run.log_every steps, of runs of
// millions of steps.
EvaluationsAhead evaluations_ahead(const EvaluationSchedule& schedule, int64_t steps_done) {
  const int64_t first = std::max<int64_t>(steps_done, 1), last = schedule.total_steps;
  if (last < first) return {};
  const int64_t per_epoch = schedule.steps_per_epoch;
  // The epochs' ends: the multiples of an epoch's steps, and the run's last step if it is not one.
  const bool last_is_multiple = last % per_epoch == 0;
  EvaluationsAhead ahead;
  ahead.epoch_ends = multiples_in(per_epoch, first, last) + (last_is_multiple ? 0 : 1);
  if (schedule.every_steps > 0) {
    const int64_t every = schedule.every_steps;
    // Multiples of every_steps that are no epoch's end: those of both are the multiples of their
    // lcm, and the run's last step is one more if it is a multiple of every_steps alone.
    ahead.within_epochs = multiples_in(every, first, last) - multiples_in(std::lcm(every, per_epoch), first, last) -
                          (last % every == 0 && !last_is_multiple ? 1 : 0);
  }
  return ahead;
}

}  // namespace trident::train
