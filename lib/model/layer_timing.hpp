#pragma once
// Each layer's forward + backward time for one micro-batch, measured: what parallel.balance =
// time cuts the pipeline by (a stage's time, not its parameter count, decides the bubble).
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "model/model.hpp"

namespace trident::model {

// Seconds per layer (the fastest of `repeats` after a warm-up), on `device` in `compute` precision,
// as training runs them: the first layer computes no input gradient, the last includes the
// loss. Random inputs from a generator of its own; the model's parameters, buffers (batch-norm
// statistics), gradients and torch's global generator are as they were before.
std::vector<double> time_layers(LayerStack& model, const InputSpec& input, int64_t micro_batch, c10::Device device,
                                c10::ScalarType compute, int repeats = 10);

}  // namespace trident::model
