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
#include "parallel/topology.hpp"
#include "report/report.hpp"
#include "train/run_folder.hpp"
#include "train/trainer.hpp"

namespace trident::train {

struct Trainer::State {
  config::Deck deck;
  comm::World world;
  // The whole run's group over MPI, whatever parallel.backend is: the host numbers every rank
  // agrees on (flags, timings, totals) and the evaluation's sums.
  std::unique_ptr<comm::Communicator> world_comm;
  std::unique_ptr<parallel::Topology> topology;
  std::unique_ptr<comm::Communicator> dp_comm, pp_comm;  // parallel.backend's (comm/backend.hpp)
  std::unique_ptr<comm::Communicator> pp_gradient_comm;  // NCCL: the pipeline's gradients (pipeline.hpp)
  std::unique_ptr<parallel::Pipeline> pipeline;
  std::shared_ptr<data::SplitReader> train_split, test_split;
  std::unique_ptr<data::GlobalSampler> sampler;
  model::LayerStack model{nullptr};
  std::unique_ptr<optim::FlatParams> flat;
  std::unique_ptr<parallel::GradSync> grad_sync;
  std::unique_ptr<optim::Optimizer> optimizer;
  optim::LrSchedule schedule;
  std::unique_ptr<optim::LossScaler> scaler;  // fp16 only
  // The step's skip/clip/stop decisions made on the device (GPUs, fused optimizers; one host
  // sync per logging interval); null: made on the host after one copy per step.
  std::unique_ptr<optim::DeviceStep> device_step;
  std::string device = "cpu";                 // where this rank trains (comm/device_placement.hpp)
  c10::Device torch_device{c10::kCPU};        // the same, for tensors
  int cuda_index = -1;                        // its CUDA device, -1 on the CPU
  int threads = 1;
  std::pair<int, int> stage_layers{0, 0};  // [first, end) of the model's layers on this stage
  int64_t micro_batch = 1, accumulation = 1, total_steps = 0, epochs = 0;  // micro_batch: resolved (auto)
  report::PhaseTimes times;
  // The whole model as checkpoints store it (every stage), and what was restored.
  std::vector<checkpoint::TensorEntry> all_params, all_buffers;
  int64_t start_step = 0;
  std::string resumed_from;
  int64_t saves = 0;
  double bytes_written = 0, bytes_read = 0, read_seconds = 0;
  std::unique_ptr<RunFolder> run_folder;     // rank 0 holds run.output_dir's lock while it lives
  std::unique_ptr<comm::Watchdog> watchdog;  // last: stopped before anything else goes
};

// One host number summed / maximised over every rank of the run (s.world_comm).
double sum_over_ranks(Trainer::State& s, double local);
double max_over_ranks(Trainer::State& s, double local);
// The mean over replicas of a value only the last stage has (0 on other stages).
double replica_mean(Trainer::State& s, double last_stage_value);

}  // namespace trident::train
