#pragma once
// What a run writes: progress records (metrics.jsonl) and the summary report.json whose field
// names are a contract with the scaling tools and job scripts (README.md "What a run writes").
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/deck.hpp"

namespace trident::report {

struct PhaseTimes {
  double total = 0, data_wait = 0, forward = 0, backward = 0, comm_exposed = 0, optimizer = 0, checkpoint = 0,
         evaluation = 0;
};

struct Layout {
  int world = 1, nodes = 1, dp = 1, pp = 1, zero = 0;
  std::string backend = "mpi", device = "cpu", schedule = "1f1b";
  int64_t micro_batch = 1;    // samples per micro-batch (optim.micro_batch, auto resolved)
  int64_t micro_batches = 1;  // per rank per step (gradient accumulation)
  int threads_per_rank = 1;
};

struct ModelState {
  int64_t params = 0, grads = 0, optimizer = 0, master = 0;  // bytes on this rank
  int64_t expected = 0;                                      // the ZeRO paper's formula
};

// One compute op of a pipeline step on one stage: F (forward), B (whole backward), Bi (input
// gradient), W (weight gradient), in seconds from the start of that step on that rank.
struct TimelineOp {
  std::string op;
  int micro = 0, chunk = 0;
  double start_s = 0, end_s = 0;
};

struct StageReport {
  int stage = 0, peak_alive_micro_batches = 0;
  double compute_s = 0, blocked_s = 0, bubble_fraction = 0;
  int64_t activation_bytes_per_micro_batch = 0, parameters = 0;
  std::vector<TimelineOp> timeline;  // the run's last step (CPU runs; empty on a GPU)
};

struct Summary {
  config::Deck deck;
  std::string torch_version, nccl_version;  // the LibTorch and NCCL it ran with (NCCL: "" when none)
  Layout layout;
  int64_t steps = 0, epochs = 0, parameters = 0;
  double train_loss = 0, test_loss = 0, test_accuracy = 0;
  double samples_per_s = 0, step_time_s = 0;
  // Token models only: tokens/s over all ranks; achieved TFLOP/s per rank (training FLOPs per
  // token x tokens/s / world); MFU against peak_tflops (absent when no peak applies).
  std::optional<double> tokens_per_s, tflops, mfu, peak_tflops;
  double watchdog_timeout_s = 0, watchdog_cpu_s = 0;  // the heartbeat thread's CPU time, max over ranks
  std::optional<double> loss_scale;      // fp16: the final dynamic loss scale
  std::optional<int64_t> skipped_steps;  // fp16: steps skipped because the gradients overflowed
  PhaseTimes time;     // max over ranks
  ModelState memory;   // max over ranks
  int64_t peak_bytes = 0;  // max over ranks of the peak resident set
  // The same once the stage was built and placed, before a checkpoint is read or a step runs:
  // what start-up needs of a node's host memory (on GPUs, the host's share of the whole run).
  int64_t startup_peak_bytes = 0;
  // GPU runs: the device's name (rank 0's), its memory, and the most the caching allocator had
  // allocated at once on any rank's device; absent (null) on the CPU. estimated_device_bytes:
  // `trident plan`'s least device memory for the busiest rank (parallel::Plan::device_bytes), to
  // hold against the peak.
  std::string device_name;
  std::optional<int64_t> device_total_bytes, peak_device_bytes, estimated_device_bytes;
  double bubble_fraction = 0, expected_bubble_fraction = 0;  // pipeline, mean over stages
  std::vector<StageReport> stages;                            // one per pipeline stage (its dp rank 0)
  std::string resumed_from;                                   // "" when the run started fresh
  int64_t first_step = 0;                                     // the step it started from (resumed_from's)
  int64_t checkpoint_saves = 0;
  // A stop's cost: one step (mean) + the last save, the slowest rank's (train/safe_stop.hpp).
  std::optional<double> time_to_safe_stop_s;
  int64_t gathers = 0, gathers_prefetched = 0;  // ZeRO-3's layer gathers (rank 0)
  int64_t micro_steps_replayed = 0;             // from a CUDA graph, run.cuda_graph (rank 0)
  double checkpoint_write_gb_per_s = 0, checkpoint_read_gb_per_s = 0;  // write: whole saves, background included
  // checkpoint.async: steps trained while a background save was being written, and the mean step
  // then and otherwise (the slowest rank's).
  bool checkpoint_async = false;
  int64_t steps_while_writing = 0;
  double step_time_while_writing_s = 0, step_time_otherwise_s = 0;
};

// A checkpoint of the run's own folder as DESIGN.md names it, relative to run.output_dir
// ("checkpoints/step_0000500.h5"); one elsewhere (a resharded run's source) as it was given.
std::string run_relative(const std::string& checkpoint, const std::string& output_dir);
void write_report_json(const std::string& path, const Summary& summary);
// report.pending.json: written after a run's final save, before its last evaluation, as
// report.json but with final.test_loss and final.test_accuracy null and a "pending" object naming
// `checkpoint` (and its size and modification time, which identify it). A job killed during that evaluation leaves
// it; the requeued job, which finds the run trained, evaluates the saved model and completes it:
// complete_pending_report writes report.json with those figures, final.evaluated_by_a_later_job
// true and the evaluation's seconds added to time_s.evaluation and time_s.total, and removes
// `pending`. It returns "" then, or why it did not (not readable, not one trident wrote, or written
// after another file than `checkpoint`), writing nothing.
// write_pending_report returns "" or why it could not write the file (nothing left then).
std::string write_pending_report(const std::string& path, const Summary& summary, const std::string& checkpoint);
std::string complete_pending_report(const std::string& pending, const std::string& path, const std::string& checkpoint,
                                    double test_loss, double test_accuracy, double evaluation_s);
// report.json read back (trident report), by the names write_report_json writes, next to it in
// report.cpp. Fields every report has are required (BadInput naming the file and the field:
// layout.world, steps, throughput.samples_per_s, deck.optim.global_batch); the others keep
// Summary's defaults where a report lacks them, so older reports read too: first_step then comes
// from resumed_from's step_NNNNNNN.h5, layout.micro_batch from an integer optim.micro_batch and
// throughput.step_time_s from samples_per_s. Not JSON, or a field of the wrong type: BadInput.
struct ReadReport {
  Summary summary;
  // Every time_s entry the file has, by name: an older report may lack some, a newer trident's
  // may add some.
  std::map<std::string, double> time_s;
  // final.test_loss and final.test_accuracy are numbers (null: a NaN, or an evaluation pending;
  // summary's figures are 0 then).
  bool has_test_figures = false;
  bool has_train_loss = false;  // final.train_loss is a number (null: a NaN)
  // The deck keys (section.key) the file records: summary.deck has the defaults for the others
  // (an older trident's report lacks newer keys).
  std::vector<std::string> deck_keys;
};
ReadReport read_report_json(const std::string& path);

struct MetricsRecord {
  int64_t step = 0, epoch = 0;
  double loss = 0, lr = 0, samples_per_s = 0, grad_norm = 0;
  std::optional<double> loss_scale;            // fp16 only
  std::optional<int64_t> skipped_steps;        // fp16 only: steps skipped on overflow so far
};

// A JSON-lines file of step records (rank 0's); flushed per record so a killed run keeps what it
// logged.
class RecordLog {
 public:
  RecordLog() = default;
  // A run resumed from step `resumed_from` > 0 continues the file, without the records of later
  // steps an earlier run logged after that checkpoint (it was killed: they are not this run's
  // history, and the resumed run logs those steps again); 0 starts it anew.
  RecordLog(const std::string& path, int64_t resumed_from);
  ~RecordLog();
  RecordLog(const RecordLog&) = delete;
  RecordLog& operator=(const RecordLog&) = delete;

 protected:
  void write_line(const std::string& line, int64_t step);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  bool warned_ = false;  // a failed write is said once
};

// metrics.jsonl: a record every run.log_every steps.
class MetricsLog : public RecordLog {
 public:
  using RecordLog::RecordLog;
  void write(const MetricsRecord& record);
};

// One evaluation of the test split: after an epoch, or every run.eval_every_steps steps.
struct EvaluationRecord {
  int64_t step = 0, epoch = 0;
  double test_loss = 0, test_accuracy = 0;
  int64_t samples = 0;         // of the test split (run.eval_samples within an epoch)
  double seconds = 0;          // the evaluation's time on rank 0
  bool end_of_epoch = false;   // the evaluation after an epoch (the last one's is report.json's final figures)
};

// evaluations.jsonl: a record per evaluation.
class EvaluationLog : public RecordLog {
 public:
  using RecordLog::RecordLog;
  void write(const EvaluationRecord& record);
};

// Peak resident set size of this process in bytes.
int64_t peak_rss_bytes();

}  // namespace trident::report
