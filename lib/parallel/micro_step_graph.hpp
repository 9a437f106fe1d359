#pragma once
// run.cuda_graph: a micro-step's forward, loss and backward captured once as a CUDA graph and
// replayed for each later micro-step, so that the host launches one graph where it launched each
// of the step's ~800 kernels. On the H200 (2026-11-28) GPT-2 small's kernels kept the GPU busy
// 30.9 ms of each 33.7 ms step: the rest was the GPU waiting for the host's launches
// (benchmarks/README.md). A replay repeats the captured work at the captured addresses, so only a
// micro-step that is the same work every time may be replayed: one stage (pp 1), one replica (no
// gradient hooks with host decisions in them: dp 1, ZeRO 0; train/build_stage.cpp decides), and
// micro-batches of the captured shape (run() checks; the sampler drops an epoch's short tail, so
// in training they all have it). The graph's own memory pool keeps one micro-step's activations
// reserved for the rest of the run: an evaluation allocates on top of them. One implementation
// per build (lib/CMakeLists.txt): micro_step_graph.cpp with CUDA, micro_step_graph_none.cpp without.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace trident::parallel {

// A micro-step on device tensors: the mean loss of (inputs, labels), then backward from that
// loss x loss_factor (a 0-dimensional fp32 device tensor); returns the loss, detached.
using MicroStep =
    std::function<at::Tensor(const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& loss_factor)>;

class MicroStepGraph {
 public:
  virtual ~MicroStepGraph() = default;
  // The micro-step of these device tensors; returns its loss as a new fp64 tensor. The first
  // `warmup` calls run it eagerly on a side stream (CUDA's lazy set-ups happen there, not in the
  // capture), the next one captures it and replays that, and every later call copies its
  // arguments into the captured ones and replays. A call with other shapes runs eagerly.
  virtual at::Tensor run(const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& loss_factor) = 0;
  // Micro-steps replayed from the graph so far.
  virtual int64_t replays() const = 0;
};

// Null in a build without CUDA.
std::unique_ptr<MicroStepGraph> make_micro_step_graph(MicroStep step, int warmup);

}  // namespace trident::parallel
