#pragma once
// This process's record in <output_dir>/goodput.jsonl (report/goodput.hpp says what the figures
// mean). Rank 0 keeps it. While the process lives, its record is goodput.open.json, rewritten
// (write, then rename) at every log line and save; at exit it is appended to goodput.jsonl and the
// open file removed. A process that never reaches its exit (SIGKILL, an abort from another rank, a
// lost node) leaves the open file behind: the next lifetime appends it, as it was last written,
// with no exit code; an abort by this rank's own watchdog closes it first (close_at_abort).
// Writing these files never stops a run: a failure is one warning.
// No LibTorch, no MPI here.
#include <cstdint>
#include <mutex>
#include <string>

#include "report/goodput.hpp"

namespace trident::train {

// The figures a lifetime accumulates (seconds, rank 0's own).
struct GoodputProgress {
  int64_t last_step = 0;  // steps done so far
  double step_s = 0, data_wait_s = 0, evaluation_s = 0, checkpoint_s = 0;
};

class GoodputLog {
 public:
  // Closes the lifetime a previous process left open, then opens this one's, starting at step
  // `start_step` (0 for a fresh start): the steps earlier lifetimes trained beyond it are this
  // one's work lost. `new_run` (--resume never): the records there are another run's and are
  // replaced, as its metrics.jsonl is (its report.json is moved to report.previous.json).
  GoodputLog(const std::string& output_dir, int64_t start_step, bool new_run = false);
  GoodputLog(const GoodputLog&) = delete;
  GoodputLog& operator=(const GoodputLog&) = delete;

  void startup_ends();  // start-up ends here (once): at the first step, or a trained run's evaluation
  void update(const GoodputProgress& progress);  // rewrites the open record
  void close(int exit_code, const GoodputProgress& progress);  // appends it to goodput.jsonl
  // Closed now, from another thread too, with the figures of the last update: the job is being
  // aborted (abort_all_ranks) and the main thread's figures are out of reach.
  void close_at_abort(int exit_code);
  const report::Lifetime& record() const { return life_; }

 private:
  void set(const GoodputProgress& progress);
  void stamp_end();  // the record ends now
  void append_closed(int exit_code);
  void write_open();
  void warn_once(const std::string& what);
  std::mutex mutex_;  // the main thread's updates against close_at_abort
  std::string jsonl_, open_;
  report::Lifetime life_;
  bool started_ = false, closed_ = false, warned_ = false;
};

// Seconds since the Unix epoch, now and when this process started (captured as the program
// was loaded, before main).
double unix_now();
double process_start_unix();

}  // namespace trident::train
