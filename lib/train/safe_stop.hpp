#pragma once
// Whether a job's signal comes early enough. A Slurm job script asks for SIGUSR1 N seconds
// before its time limit (--signal=B:USR1@N, jobs/*.slurm); trident then finishes the step in
// flight (or stops the evaluation in flight at its next check for a signal), commits a background
// save in flight, and saves (exit 3).
// If that plus a save take longer than N, the job is killed mid-save and the work since the
// previous checkpoint is lost. The job script passes its N as
// TRIDENT_SIGNAL_LEAD_S; rank 0 compares it with what it measured and warns once.
#include <algorithm>
#include <string>

namespace trident::train {

struct SafeStop {
  double step_s = 0;        // one training step, mean over this run's steps
  double save_s = 0;        // the last checkpoint's save
  double evaluation_s = 0;  // the longest stretch of the last test-split evaluation between its
                            // checks for a signal (0 before the first): a signal during one waits
                            // for the rest of its stretch, then the save
  // checkpoint.async: a signal that comes just after a background save started waits for its
  // write and commit (as long as the last save) before the stop's own save.
  double in_flight_s = 0;
  double needed_s() const { return std::max(step_s, evaluation_s) + in_flight_s + save_s; }
};

// TRIDENT_SIGNAL_LEAD_S in seconds; 0 when unset, empty or not a positive number.
double signal_lead_seconds();

// The warning for a lead of `lead_s` seconds, naming the lead needed (with a 1.5x margin for
// slower steps and saves); "" when the lead suffices or is unknown (0).
std::string signal_lead_warning(double lead_s, const SafeStop& stop);

}  // namespace trident::train
