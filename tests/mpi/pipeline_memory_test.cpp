// What a pipeline stage holds at its busiest, measured by LibTorch's allocator reports
// (tests/saved_bytes.hpp) around one step on each of 2 ranks, at m = 4 and m = 8 micro-batches: the
// growth is what trident plan's estimate of the stage's held activations
// (Plan::held_activation_bytes) grows by, plus the batches of the micro-batches in flight (to the
// byte on this machine; within one input gradient, which may still be on its way). 1F1B
// keeps at most pp - stage micro-batches between their forward and backward, so 8 need no more
// than 4; the same for ZB-H1 (its backward split in two) and interleaved 1F1B (two chunks a rank).
// That holds only if what a stage sent (an activation, an input gradient) is let go once its send
// completes: it was kept to the step's end (4-12 stage outputs more here). GPipe, every forward before the first backward, holds
// all m: the measurement must see its 4 extra micro-batches, or it sees nothing.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "../saved_bytes.hpp"
#include "comm/mpi_communicator.hpp"
#include "config/deck.hpp"
#include "model/model.hpp"
#include "optim/flat_params.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/plan.hpp"
#include "train_helpers.hpp"

using namespace trident;
using namespace trident::test_support;

namespace {

constexpr int64_t kFeatures = 256, kMicroBatch = 64;

// An mlp of 4 layers, each output but the last [64, 2048] fp32 (512 KiB a micro-batch), at pp 2
// under `schedule` (interleaved: 2 chunks a rank) with m micro-batches a step: the trainer's plan
// of it, which cuts the layers and estimates what each stage holds.
config::Deck mlp_deck() {
  config::Deck deck;
  deck.model.kind = "mlp";
  deck.model.hidden = "2048,2048,2048";
  return deck;
}

parallel::Plan plan_of(const std::string& schedule, int micro_batches, const model::InputSpec& input) {
  config::Deck deck = mlp_deck();
  deck.parallel.pp = 2;
  deck.parallel.schedule = schedule;
  deck.parallel.virtual_stages = schedule == "interleaved" ? 2 : 1;
  deck.optim.global_batch = micro_batches * kMicroBatch;
  deck.optim.micro_batch = std::to_string(kMicroBatch);
  return parallel::Plan(deck, 2, model::describe_model(deck, input), input.sample_shape);
}

// What one step allocated on this rank (its stage) at most beyond what was allocated as it began,
// measured on the step after a warm-up one (which allocates what stays: autograd's buffers, the
// flat gradients' first use).
int64_t step_peak_bytes(const parallel::Plan& plan, const model::InputSpec& input) {
  const int stage = world_rank();
  torch::manual_seed(1);
  model::LayerStack mine = model::build_layers(mlp_deck(), input, plan.stage_layer_indices(stage));
  optim::FlatParams flat(*mine, torch::kCPU);
  comm::MpiCommunicator alone(MPI_COMM_SELF), pipe(MPI_COMM_WORLD);
  const std::unique_ptr<parallel::GradSync> sync = parallel::make_ddp(flat, alone, 25.0);
  parallel::Pipeline pipeline(pipe, pipe, stage, 2, parallel::stage_chunks(plan, stage, mine), plan.schedule());
  const auto next_batch = [] {
    return data::MicroBatch{torch::randn({kMicroBatch, kFeatures}), torch::randint(10, {kMicroBatch})};
  };
  const auto m = static_cast<int>(plan.accumulation());
  const at::Tensor loss_factor = torch::full({}, 1.0F / static_cast<float>(m));
  const auto reporter = std::make_shared<measure::CpuBytesInUse>();
  c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, reporter);
  int64_t peak = 0;
  for (int step = 0; step < 2; ++step) {
    double forward_s = 0, backward_s = 0;
    const int64_t before = reporter->in_use;
    reporter->peak = before;
    pipeline.run_step(m, kMicroBatch, next_batch, *sync, loss_factor, forward_s, backward_s);
    peak = reporter->peak - before;
    sync->finish();
    sync->after_step();
  }
  return peak;
}

}  // namespace

TEST(PipelineMemory, StageHoldsWhatThePlanSaysForMoreMicroBatches) {
  if (world_size() != 2) GTEST_SKIP() << "one stage per rank of 2";
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);  // every allocation on this thread, which the reports are installed on
  const model::InputSpec input{{kFeatures}, 10};
  const int stage = world_rank();
  // Besides the layers' activations (the plan's), a micro-batch in flight holds its batch: the
  // inputs on the first stage, the labels (int64) on the last.
  const int64_t batch_bytes = stage == 0 ? 4 * kMicroBatch * kFeatures : 8 * kMicroBatch;
  const int64_t input_gradient_bytes = 4 * kMicroBatch * 2048;  // [64, 2048] fp32, every chunk's input but the model's
  std::string where = "stage " + std::to_string(stage) + ", peak bytes of a step:";
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    const parallel::Plan four = plan_of(schedule, 4, input), eight = plan_of(schedule, 8, input);
    const int64_t measured = step_peak_bytes(eight, input) - step_peak_bytes(four, input);
    const int64_t planned =
        eight.held_activation_bytes(stage) - four.held_activation_bytes(stage) +
        (eight.micro_batches_in_flight(stage) - four.micro_batches_in_flight(stage)) * batch_bytes;
    where += " " + schedule + " m=8 less m=4 " + std::to_string(measured) + " (planned " + std::to_string(planned) + ");";
    // An input gradient sent is let go when a later op's test() finds its send complete: one may
    // still be in flight at a step's peak, in one step and not the other.
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(planned), static_cast<double>(input_gradient_bytes))
        << schedule << " at stage " << stage;
    // GPipe holds all m micro-batches; the others pp - stage (interleaved: per chunk) whatever m.
    if (schedule == "gpipe") EXPECT_GT(planned, 4 * 4 * kMicroBatch * 2048) << "4 more stage outputs at least";
    else EXPECT_EQ(planned, 0) << schedule;
  }
  torch::set_num_threads(threads);
  std::cout << where << "\n";
}
