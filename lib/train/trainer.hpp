#pragma once
// One training run: the flow of docs/ARCHITECTURE.md from topology to report, over the ranks of `comm`.
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/deck.hpp"

namespace trident::optim { class FlatParams; }
namespace trident::model { class LayerStack; }

namespace trident::train {

struct Result {
  int64_t steps = 0;
  int64_t first_step = 0;  // > 0 when resumed
  std::string resumed_from;
  double train_loss = 0, test_loss = 0, test_accuracy = 0, samples_per_s = 0;
  std::vector<std::pair<int64_t, double>> logged_losses;  // (step, global-batch mean loss)
  std::vector<double> logged_grad_norms;                   // before clipping, same steps
  int64_t micro_steps_replayed = 0;                        // from a CUDA graph (run.cuda_graph)
};

// SIGUSR1 and SIGTERM (SLURM's --signal before a time limit, preemption), and SIGINT (Ctrl-C),
// stop a run at its next step boundary: it checkpoints and exits 3 (requeue me); a second
// Ctrl-C a second or more later ends the process at once. trident train installs this before
// MPI_Init, so a signal during the start-up of a requeued job is held too, not fatal; the
// Trainer again (after anything MPI set up). It unblocks these signals: `trident` blocks them
// before it becomes trident-torch, so one that came while LibTorch loaded is taken here.
void catch_stop_signals();

class Trainer {
 public:
  // Collective over `comm`. The deck must be valid for comm's size (config::validate).
  // Dataset problems throw BadInput on every rank alike.
  // `resume`: auto | never | PATH (checkpoint/checkpoint.hpp, resolve_resume). Claims
  // run.output_dir first (train/run_folder.hpp): another live run there is bad input.
  Trainer(const config::Deck& deck, MPI_Comm comm, const std::string& resume = "never");
  ~Trainer();
  Result run();
  // The test split's (loss, accuracy) for the model as it is now, evaluated in chunks of `chunk`
  // samples (0: the micro-batch, as run() does). Collective.
  std::pair<double, double> evaluate(int64_t chunk = 0);
  // This rank's stage's parameters, whole, by name, in model order (collective: ZeRO-3 gathers).
  std::vector<std::pair<std::string, at::Tensor>> full_parameters();
  // This rank's stage's optimizer state, whole, by "state_name/param_name" (e.g.
  // "exp_avg/fc1.linear.weight"), in state then model order; empty before the first step or
  // load (collective over the stage's dp group under ZeRO, which gathers the partitions).
  std::vector<std::pair<std::string, at::Tensor>> full_optimizer_state();

  struct State;  // the run's objects (train/trainer_state.hpp)

 private:
  std::unique_ptr<State> s_;
};

}  // namespace trident::train
