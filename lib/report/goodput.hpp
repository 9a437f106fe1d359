#pragma once
// Goodput: where a run's allocation time went, over every process lifetime of a job chain
// (requeues, restarts, SIGKILLs). Each lifetime of `trident train` in a run folder appends one
// record to <output_dir>/goodput.jsonl (train/goodput_log.hpp writes them); `trident report
// --goodput RUN_DIR` sums them: goodput % = productive step time / wall time of the lifetimes,
// and where the rest went, as a table (goodput.md) and a picture (goodput.svg).
//
// Productive step time is the time rank 0 spent in training steps, less the data waits inside
// them, less the work lost: the steps a lifetime trained past the step a later one started from
// (the checkpoint it resumed, or 0 for a fresh start), which had to be trained again, each at the
// compute time per step (step time less data waits) of the lifetime that trained it. Wall time
// is each lifetime's launch (its job's start to the process's: the job script and srun, when the
// job script passed the job's start) and the process's life, start-up to exit; the time a job
// spent queued is not in it.
// No LibTorch, no MPI here.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident::report {

// A run folder's record of the lifetime under way, rewritten at every log line and save, closed
// into goodput.jsonl when the process ends (or by the next lifetime, when it was killed).
inline constexpr const char* kOpenGoodputRecord = "goodput.open.json";

// One process lifetime of a run, as goodput.jsonl holds it (seconds; times are Unix seconds).
struct Lifetime {
  std::string job;   // SLURM_JOB_ID (with "+N" for its Nth requeue) or "pid P"
  std::string host;  // rank 0's host
  double start = 0, end = 0;  // the process's
  // The job's start to the process's start (TRIDENT_JOB_START_TIME from the job script): the
  // script and srun's launch, paid again by every job of a chain. 0 when not known (outside a job
  // script), and in records written before it was kept.
  double launch_s = 0;
  // The process's exit code; empty when it ended without saying (SIGKILL, MPI_Abort from
  // another rank, a lost node): the next lifetime closes its record at the last update it wrote.
  std::optional<int> exit_code;
  int64_t first_step = 0, last_step = 0;  // steps trained: (first_step, last_step]
  double startup_s = 0;     // process start to the first step (MPI, data, checkpoint read), or to a trained run's evaluation
  double step_s = 0;        // in training steps (rank 0), data waits included
  double data_wait_s = 0;   // the steps' waits for input data
  double evaluation_s = 0;  // test-split evaluations
  double checkpoint_s = 0;  // saves, as long as they blocked training
  // Set when this lifetime resumed: the step it resumed from.
  std::optional<int64_t> resumed_from_step;
  // The work its start made lost (lost_work below): the steps earlier lifetimes trained past its
  // first step, not lost before, and their compute time.
  int64_t work_lost_steps = 0;
  double work_lost_s = 0;
  // Read from kOpenGoodputRecord (not written): the process is still running, or was killed and
  // no later lifetime has closed its record yet.
  bool open = false;

  double wall_s() const { return launch_s + end - start; }
  int64_t steps_trained() const { return last_step - first_step; }
  // Per step trained, the time in steps less data waits (0 when none was trained).
  double compute_per_step_s() const {
    return steps_trained() > 0 ? (step_s - data_wait_s) / static_cast<double>(steps_trained()) : 0.0;
  }
};

// The work lost along a chain, from its steps alone. Lifetimes start in order; each start at
// step s (first_step) makes every step an earlier lifetime still kept past s lost, charged once,
// to the lifetime that trained it, at that lifetime's compute_per_step_s. of_*[i]: what lifetime
// i lost; by_*[k]: what lifetime k's start made lost (its record's work_lost_*).
struct LostWork {
  std::vector<int64_t> of_steps, by_steps;
  std::vector<double> of_s, by_s;
};
LostWork lost_work(const std::vector<Lifetime>& chain);

std::string lifetime_json(const Lifetime& life);  // one line, no newline
// `where` names the file and line in the BadInput thrown for a malformed record.
Lifetime parse_lifetime(const std::string& line, const std::string& where);
// Every record of a goodput.jsonl, in order; BadInput naming the file when it is missing or holds
// no record. A line that is not a record (torn by a process killed while appending) is skipped
// and named in `skipped` ("file:line: why").
std::vector<Lifetime> read_goodput(const std::string& path, std::vector<std::string>* skipped = nullptr);
// The record of a kOpenGoodputRecord file, marked open; none when there is no such file, BadInput
// naming it when its line is not a record.
std::optional<Lifetime> read_open_lifetime(const std::string& path);

// The chain's account, in seconds over all its lifetimes; the parts add up to wall_s.
struct GoodputAccount {
  std::vector<Lifetime> lifetimes;
  double wall_s = 0;
  double productive_s = 0;  // step time - data waits - work lost
  double work_lost_s = 0, launch_s = 0, startup_s = 0, data_wait_s = 0, evaluation_s = 0, checkpoint_s = 0;
  double other_s = 0;  // the rest: step boundaries, logging, shutdown, the unknown end of a killed process
  int64_t steps_trained = 0, work_lost_steps = 0;
  // Per lifetime, the work it lost (lost_work's of_*, recomputed from the steps: a record holds the
  // loss its start caused, which belongs to earlier lifetimes).
  std::vector<int64_t> lost_steps_of;
  std::vector<double> lost_s_of;
  std::vector<std::string> skipped;  // goodput.jsonl lines that were not records
  double goodput() const { return wall_s > 0 ? productive_s / wall_s : 0.0; }
};
GoodputAccount account_goodput(std::vector<Lifetime> lifetimes);
// <run_dir>/goodput.jsonl read and summed, with the open record (the last lifetime) when there is
// one; BadInput naming the folder when it holds neither.
GoodputAccount load_goodput(const std::string& run_dir);

std::string goodput_markdown(const GoodputAccount& account, const std::string& run_dir);
std::string goodput_svg(const GoodputAccount& account, const std::string& run_dir);
// goodput.md and goodput.svg into out_dir (created); returns their paths.
std::vector<std::string> write_goodput(const GoodputAccount& account, const std::string& run_dir, const std::string& out_dir);

}  // namespace trident::report
