#pragma once
// When a run evaluates its test split: after each epoch (its last step, or the run's last step),
// and every run.eval_every_steps steps within an epoch, but not at an epoch's last step, which
// has the epoch's evaluation. Torch-free, so that its rules are tested on their own.
#include <cstdint>

namespace trident::train {

struct EvaluationSchedule {
  int64_t every_steps = 0;      // run.eval_every_steps (0: the epochs' evaluations only)
  int64_t steps_per_epoch = 1;  // > 0
  int64_t total_steps = 0;      // the run's last step (the last epoch may end early: run.max_steps)

  // Whether step boundary `steps_done` (1..total_steps) ends an epoch.
  bool epoch_ends_at(int64_t steps_done) const;
  // Whether step boundary `steps_done` has an evaluation within its epoch (run.eval_every_steps).
  bool within_epoch_due(int64_t steps_done) const;
};

// The evaluations still ahead of a run at step boundary `steps_done`, those at that boundary
// included (a progress line comes before its boundary's evaluation).
struct EvaluationsAhead {
  int64_t within_epochs = 0;  // run.eval_every_steps'
  int64_t epoch_ends = 0;     // the epochs'
};
EvaluationsAhead evaluations_ahead(const EvaluationSchedule& schedule, int64_t steps_done);

}  // namespace trident::train
