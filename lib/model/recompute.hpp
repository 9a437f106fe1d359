#pragma once
// model.recompute (full activation recomputation, "activation checkpointing"): a layer run so
// that autograd keeps only its input and its parameters for the backward, not the activations
// inside it, and runs the layer again at the start of its backward to have them. A GPT block at
// micro-batch b, T tokens and width d holds ~16 b T d values for its backward, and its input
// b T d; the cost is a second forward of the block, about a third more compute.
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>

namespace trident::model {

// layer(x), recomputed in the backward. The forward and its recomputation run under the autocast
// of the call (captured here; the backward may run on another thread) and read the parameters as
// they are then: the layer must not change state in its forward (no BatchNorm statistics, no
// dropout), and its parameters must not be updated between the forward and the backward (ZeRO-3
// gathers them again before the layer's backward: the hook on the output it registers runs first).
// `layer` must outlive the backward.
at::Tensor recomputed_forward(const torch::nn::Sequential& layer, const at::Tensor& x);

// Layers run again in a backward so far, in this process (tests: that a run recomputed).
int64_t recomputations();

}  // namespace trident::model
