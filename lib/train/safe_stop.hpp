#pragma once
// Whether a job's signal comes early enough. A Slurm job script asks for SIGUSR1 N seconds
// before its time limit (--signal=B:USR1@N, jobs/*.slurm); trident then finishes the step in
// flight (or stops the evaluation in flight at its next check for a signal), commits a background
// save in flight, and saves (exit 3).
// If that plus a save take longer than N, the job is killed mid-save and the work since the
// previous checkpoint is lost. The job script passes its N as
// TRIDENT_SIGNAL_LEAD_S; rank 0 compares it with what it measured and warns once. It also says
// early when the run will not end within its job (TRIDENT_JOB_END_TIME), or its restart chain.
#include <algorithm>
#include <cstdint>
#include <optional>
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

// TRIDENT_JOB_END_TIME: when the job's time limit ends it, in UNIX seconds (the job scripts take it
// from squeue at their start); 0 when unset, empty or not a positive number (no limit known).
double job_end_time();

// A run whose ETA goes past its job's stop signal (`lead_s` before the job's end, `end_time`):
// the signal comes in `stop_in_s`, at about step `step` (the steps ahead taken to share the ETA
// evenly, its saves and evaluations included); the run needs `rest_s` more after it (> 0).
struct StopBeforeTheEnd {
  double stop_in_s = 0;
  int64_t step = 0;
  double rest_s = 0;
};
// At step boundary `steps_done` of `total_steps`, `now` in UNIX seconds; none when the run ends
// before the signal, the end is unknown (0), or the signal's time has passed already.
std::optional<StopBeforeTheEnd> stop_before_the_end(double end_time, double lead_s, double now, double eta_s,
                                                    int64_t steps_done, int64_t total_steps);

// TRIDENT_JOB_TIME_LIMIT_S: the job's time limit in seconds (the job scripts take it from squeue,
// its end less its start); 0 when unset, empty or not a positive number.
double job_time_limit_seconds();

// TRIDENT_JOB_START_TIME: when the job started, in UNIX seconds (the job scripts take it from
// squeue, which gives a requeued job's latest start); 0 when unset, empty or not a positive number.
double job_start_time();

// The seconds of this job before this process started (`process_start`, UNIX seconds): the job
// script and srun's launch, which every link of a chain spends again before trident can start.
// 0 when the job's start is unknown (0), after the process's start (the controller's clock ahead
// of this node's), or not within the job's time limit (`time_limit_s`, when known).
double launch_seconds(double job_start, double process_start, double time_limit_s);

// This job's place in a restart chain: jobs/restart_chain.sh passes TRIDENT_CHAIN_LINK (k, from 1)
// and TRIDENT_CHAIN_LINKS (N). `links` is 0 outside a chain, or when either is not a whole number
// with 1 <= k <= N.
struct ChainLinks {
  int64_t link = 0, links = 0;
  int64_t after() const { return links - link; }  // the links still to come after this one
};
ChainLinks chain_links();

// What the rest of a run (`rest_s` past this job's stop signal) takes in the links after this
// one. Each link asks for this job's time limit (`time_limit_s`, the chain passes every link the
// same sbatch options) and trains for it less its start-up (`startup_s`, taken as this job's: the
// launch, MPI, the data, the checkpoint's read) and the signal's lead (`lead_s`, which covers its
// save).
struct ChainOutlook {
  double per_link_s = 0;     // the training time of one link
  int64_t links_needed = 0;  // the links the rest takes; -1 when a link cannot train at all
};
ChainOutlook chain_outlook(double rest_s, double time_limit_s, double lead_s, double startup_s);

// When a run that will not finish in its job (or its restart chain) is told so: at the first
// progress line that finds it, and again when it has fallen further behind since (a node that
// slowed down, a file system that stalls its steps), as the time or links it was told to ask for
// would then be short by as much again. Its rest is what it needs past this job's stop signal (its
// ETA less the signal's time): at a steady rate that stays about the same, as the ETA and the signal
// come nearer alike. Further behind is a rest at least twice the one last told and a minute longer
// (sbatch --time counts minutes), on two progress lines in a row: one window of steps
// (run.log_every) that a hiccup slowed is not enough.
class JobEndTelling {
 public:
  // At the progress line of step boundary `step` whose ETA goes past the stop signal by `rest_s`:
  // whether to tell it (then `told_*` are this line's).
  bool tell(int64_t step, double rest_s);
  // At a progress line whose ETA is within the job: no line in a row behind.
  void on_time() { lines_behind_ = 0; }
  bool told_before() const { return told_step_ >= 0; }
  int64_t told_step() const { return told_step_; }
  double told_rest_s() const { return told_rest_s_; }

 private:
  int64_t told_step_ = -1;
  double told_rest_s_ = 0;
  int lines_behind_ = 0;  // progress lines in a row that far behind the rest told
};

// The warning for a lead of `lead_s` seconds, naming the lead needed (with a 1.5x margin for
// slower steps and saves); "" when the lead suffices or is unknown (0).
std::string signal_lead_warning(double lead_s, const SafeStop& stop);

}  // namespace trident::train
