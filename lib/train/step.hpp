#pragma once
// One optimizer step of a Trainer: the micro-batches through the pipeline, the gradients'
// global norm, the update, the replicas' batch-norm statistics. Its skip, clip and stop
// decisions are made on the host after one copy per step, or on the device
// (optim/device_step.hpp) where the host then learns them at the run's sync points.
#include <cstdint>
#include <string>

#include "data/loader.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

// What the log reports of the steps so far: known at once when the host decides each step, and
// at the sync points (read_device_step) when the device does.
struct StepTally {
  double last_loss = 0, last_norm = 0, epoch_loss_sum = 0;
  int64_t skipped_steps = 0;  // fp16 overflows, as last logged
};

// TRIDENT_TEST_STEP_DECISIONS = host | device, for tests; "" when unset. Either forces the fused
// optimizer kernels, so both paths run the same update on the CPU.
std::string forced_step_decisions();
// Sets s.device_step where the device decides (after the optimizer, scaler and any checkpoint).
void choose_step_decisions(Trainer::State& s);

// Step `step` (0-based) from `loader`'s micro-batches.
void train_step(Trainer::State& s, int64_t step, data::Prefetcher* loader, StepTally& tally);

// The device's decisions reach the host: the tally for the log; a divergence throws Diverged.
void read_device_step(Trainer::State& s, StepTally& tally);

}  // namespace trident::train
