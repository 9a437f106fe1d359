#pragma once
// How many periodic checkpoint saves a run still makes (checkpoint.every_steps, and
// checkpoint.every_minutes by the clock), for the progress line's ETA. Torch-free, so that its
// rules are tested on their own against a walk of the step boundaries.
#include <cstdint>

namespace trident::train {

struct SaveSchedule {
  int64_t every_steps = 0;    // checkpoint.every_steps (0: none by steps)
  double every_seconds = 0;   // checkpoint.every_minutes × 60 (0: none by the clock)
  int64_t total_steps = 0;    // the run's last step, whose save is the final one, not a periodic one
};

// The periodic saves still ahead at step boundary `steps_done` (>= 1), that boundary's own
// included (a progress line comes before its boundary's save), the final save not counted. A
// save by the clock falls at the first boundary `every_seconds` after the last save of either
// kind, the steps taking `step_s` each from `since_save_s` at this boundary; 0 by the clock
// when step_s <= 0 (no step timed yet).
int64_t periodic_saves_ahead(const SaveSchedule& schedule, int64_t steps_done, double step_s, double since_save_s);

}  // namespace trident::train
