#pragma once
// What a Trainer holds (train/trainer.hpp), for the files that implement it: trainer.cpp
// (construction and the run's outline), step.cpp (one optimizer step), run_summary.cpp
// (report.json). Not for anything outside lib/train.
#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "comm/communicator.hpp"
#include "comm/watchdog.hpp"
#include "comm/world.hpp"
#include "config/deck.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "model/model.hpp"
#include "optim/device_step.hpp"
#include "optim/flat_params.hpp"
#include "optim/optimizer.hpp"
#include "optim/precision.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/plan.hpp"
#include "parallel/topology.hpp"
#include "report/report.hpp"
#include "train/goodput_log.hpp"
#include "train/run_folder.hpp"
#include "train/trainer.hpp"

namespace trident::train {

// connect(): who this rank is, where it computes and how it talks to the others.
struct Connection {
  comm::World world;
  // The whole run's group over MPI, whatever parallel.backend is: the host numbers every rank
  // agrees on (flags, timings, totals) and the evaluation's sums.
  std::unique_ptr<comm::Communicator> world_comm;
  std::string device = "cpu";           // where this rank trains (comm/device_placement.hpp)
  c10::Device torch_device{c10::kCPU};  // the same, for tensors
  int cuda_index = -1;                  // its CUDA device, -1 on the CPU
  int threads = 1;
  std::unique_ptr<parallel::Topology> topology;
  std::unique_ptr<comm::Communicator> dp_comm, pp_comm;  // parallel.backend's (comm/backend.hpp)
  std::unique_ptr<comm::Communicator> pp_gradient_comm;  // NCCL: the pipeline's gradients (pipeline.hpp)
};

// build_stage(): what this rank trains and with what: the data, the layout plan, its stage of
// the model and everything that updates it.
struct StageParts {
  std::shared_ptr<data::SplitReader> train_split, test_split;
  std::unique_ptr<data::GlobalSampler> sampler;
  int64_t total_steps = 0, epochs = 0;
  std::unique_ptr<parallel::Plan> plan;  // the layout: batch arithmetic, stages, checkpoint entries
  model::LayerStack model{nullptr};      // this stage's layers
  std::unique_ptr<parallel::Pipeline> pipeline;
  std::unique_ptr<optim::FlatParams> flat;
  std::unique_ptr<parallel::GradSync> grad_sync;
  std::unique_ptr<optim::Optimizer> optimizer;
  optim::LrSchedule schedule;
  std::unique_ptr<optim::LossScaler> scaler;  // fp16 only
};

// restore(): where the run starts: a checkpoint loaded into the stage, or step 0.
// The training loss of an epoch so far: the sum of its steps' losses (each the mean over the
// global batch) and their count. A checkpoint carries it, so that a run resumed inside an epoch
// reports the epoch's train loss as an uninterrupted run does.
struct EpochLoss {
  double sum = 0;
  int64_t steps = 0;
  double mean() const { return steps > 0 ? sum / static_cast<double>(steps) : 0.0; }
};

struct Restored {
  int64_t start_step = 0;
  EpochLoss epoch_loss;  // of the epoch of step start_step - 1, up to start_step (none: {})
  std::string resumed_from;  // "" for a fresh start
  std::string deck_changes;  // the deck keys changed since the checkpoint was written ("" for none)
  bool new_run = false;      // --resume never: a run of its own, whatever its folder holds
  double read_seconds = 0, bytes_read = 0;
};

struct Trainer::State {
  config::Deck deck;
  std::unique_ptr<RunFolder> run_folder;  // rank 0 holds run.output_dir's lock while it lives
  Connection conn;
  StageParts stage;
  Restored restored;
  checkpoint::Retention retention;  // what pruning keeps (rank 0 commits and prunes)
  // The step's skip/clip/stop decisions made on the device (GPUs, fused optimizers; one host
  // sync per logging interval); null: made on the host after one copy per step.
  std::unique_ptr<optim::DeviceStep> device_step;
  // What the run accumulates for report.json.
  report::PhaseTimes times;
  int64_t saves = 0;
  // Communication inside evaluations (ZeRO-3's layer gathers), kept out of training's figures.
  double evaluation_comm_s = 0;
  int64_t evaluation_gathers = 0, evaluation_gathers_prefetched = 0;
  double bytes_written = 0;
  double last_save_s = 0;  // this rank's last save, write to commit
  std::unique_ptr<GoodputLog> goodput;  // rank 0: this process's record in goodput.jsonl
  double save_seconds = 0;  // whole saves, start to commit, background writes included
  int64_t startup_peak_bytes = 0;  // this rank's peak resident set once its stage was built
  // checkpoint.async: the save in flight (at most one), the host copy its thread writes from
  // (kept from save to save), and the training time it blocked at its start (the layout) and with
  // the updates that waited for its copies.
  std::unique_ptr<checkpoint::BackgroundSave> background_save;
  checkpoint::Shard snapshot;
  double background_start_s = 0, background_copy_wait_s = 0;
  // Every update's wait for a background save's copies, this lifetime: inside the steps' time and
  // counted as checkpoint time too (goodput.jsonl takes it out of the steps').
  double copy_wait_in_steps_s = 0;
  // Steps trained while a background save was being written (report.json).
  int64_t steps_while_writing = 0;
  double step_s_while_writing = 0;
  std::unique_ptr<comm::Watchdog> watchdog;  // last: stopped before anything else goes
};

// A Trainer's construction, in order (connect.cpp, build_stage.cpp, checkpointing.cpp).
// connect: MPI's world, this rank's device and threads, the dp x pp groups and their
// communicators (parallel.backend). Collective; bad input (run.device, parallel.*) throws
// BadInput on every rank.
// watched: the fail-fast watchdog runs (comm::Watchdog::enabled()), which knows when a peer is in
// file I/O; NCCL's own wait limit is then its backstop only.
Connection connect(const config::Deck& deck, MPI_Comm comm, bool watched);
// build_stage: opens and checks the dataset, plans the layout from the whole model's layer list,
// keeps this rank's stage and builds what trains it (pipeline, flat buffers, gradient sync,
// optimizer, loss scaler). Collective. `weights_from_checkpoint`: restore fills every parameter
// next, so the model's layers need not draw initial weights (the GPT's do not).
StageParts build_stage(const config::Deck& deck, const Connection& conn, bool weights_from_checkpoint = false);
// restore, in two halves: resolve_resume settles --resume (auto | never | PATH) to a verified
// file or none before the stage is built (a bad --resume is reported before the dataset is
// opened); restore loads it into the stage, whatever layout wrote it (step 0 when none).
// Collective.
struct ResumeFrom {
  std::string path;  // "" for a fresh start
  std::string note;  // which, and what was passed over (logged once the run has started)
  double verify_seconds = 0;
  checkpoint::VerifiedBlocks verified;  // the blocks of `path` this rank checked: its load skips them
};
ResumeFrom resolve_resume(const config::Deck& deck, const Connection& conn, const std::string& resume);
Restored restore(const config::Deck& deck, const Connection& conn, StageParts& stage, const ResumeFrom& from);

// <run.output_dir>/checkpoints
std::string checkpoint_dir(const config::Deck& deck);
// After restore: keep_last, and the files of later steps than the run's start, which are not its
// own (logged when there are any).
// `locked`: rank 0 holds the run folder's lock, so the unfinished saves there are no live run's.
// `resumed_from` becomes the file's new path when it is brought back from checkpoints/previous/.
checkpoint::Retention retention_of(const config::Deck& deck, const Connection& conn, int64_t start_step, bool locked,
                                   std::string& resumed_from);
// Writes and commits the checkpoint of step `step` (collective), counted in s.times/saves/bytes;
// a background save still in flight is committed first. `loss`: the epoch's up to `step`.
// Returns the file written.
std::string save_checkpoint(Trainer::State& s, int64_t step, const EpochLoss& loss);
// checkpoint.async: starts the background save of step `step` (collective); one still in flight
// is waited for (the wait is logged) and committed first.
void start_background_save(Trainer::State& s, int64_t step, const EpochLoss& loss);
// Commits the background save in flight, if any (collective): waits for this rank's writer first.
// A write that failed on any rank throws AgreedFault (the file removed, `latest` unchanged).
void commit_background_save(Trainer::State& s);

// One host number summed / maximised over every rank of the run (s.world_comm).
double sum_over_ranks(Trainer::State& s, double local);
double max_over_ranks(Trainer::State& s, double local);
// The mean over replicas of a value only the last stage has (0 on other stages).
double replica_mean(Trainer::State& s, double last_stage_value);

}  // namespace trident::train
