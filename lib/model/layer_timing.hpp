#pragma once
// Each layer's forward + backward time for one micro-batch, measured: what parallel.balance =
// time cuts the pipeline by (a stage's time, not its parameter count, decides the bubble).
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "config/deck.hpp"
#include "model/model.hpp"

namespace trident::model {

// Seconds per layer of the model named by model.kind (the fastest of `repeats` after a warm-up),
// on `device` in `compute` precision, as training runs them: the first layer computes no input
// gradient, the last includes the loss. Each layer is timed as the model's builder hands it over
// and dropped before the one after next is built, on random inputs of its input's shape (from a
// generator of its own) and a random output gradient: the rank that times a pipelined model holds
// at most two of its layers, where a model too large for one rank is why it is pipelined. The
// layers draw their weights from torch's generator (seed it after, for the model kept).
std::vector<double> time_layers(const config::Deck& deck, const InputSpec& input, int64_t micro_batch,
                                c10::Device device, c10::ScalarType compute, int repeats = 10);

}  // namespace trident::model
