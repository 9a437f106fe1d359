#pragma once
// What each layer of a model keeps from its forward for its backward, measured: the bytes
// LibTorch's allocator has handed out after the layer's forward, less those before (the last
// layer's with the loss), the output kept. The plan's estimate (LayerInfo::saved, from
// describe_model) is checked against it: on the CPU by the allocator's own reports (c10's
// memory-reporting hook, the one LibTorch's profiler uses), on a GPU by the caching allocator's
// allocated bytes (its blocks are whole multiples of 512 bytes).
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/cuda_runtime.hpp"
#include "config/deck.hpp"
#include "model/loss.hpp"
#include "model/model.hpp"
#include "optim/precision.hpp"

namespace trident::measure {

// The running total of CPU bytes allocated, from the allocator's reports while it is installed
// (c10::DebugInfoGuard). The reporting hook's totals are size_t in LibTorch 2.x, int64_t in 1.13:
// the override takes whichever the base declares.
template <typename>
struct ThirdParameterOf;
template <typename Class, typename Result, typename A, typename B, typename C, typename... Rest>
struct ThirdParameterOf<Result (Class::*)(A, B, C, Rest...)> {
  using type = C;
};

class CpuBytesInUse : public c10::MemoryReportingInfoBase {
 public:
  using Total = ThirdParameterOf<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;
  void reportMemoryUsage(void* /*ptr*/, int64_t bytes, Total, Total, c10::Device device) override {
    if (!device.is_cpu()) return;
    in_use += bytes;  // negative for a release
    peak = std::max(peak, in_use);
  }
  bool memoryProfilingEnabled() const override { return true; }
  int64_t in_use = 0;
  int64_t peak = 0;  // the most in_use was since it was last set (to in_use, say)
};

// Per layer of the deck's model, at the deck's precision on `device` (autocast as training runs
// it), for one micro-batch: the bytes its forward left allocated.
inline std::vector<int64_t> measured_saved_bytes(const config::Deck& deck, const model::InputSpec& input,
                                                 int64_t micro_batch, const torch::Device& device) {
  torch::manual_seed(3);
  model::LayerStack stack = model::build(deck, input);
  stack->to(device);
  const auto reporter = std::make_shared<CpuBytesInUse>();
  c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, reporter);
  const auto in_use = [&] {
    return device.is_cuda() ? comm::cuda_reset_peak_allocated_bytes(device.index()) : reporter->in_use;
  };
  const auto long_on = torch::TensorOptions(torch::kLong).device(device);
  std::vector<int64_t> sample = input.sample_shape;
  sample.insert(sample.begin(), micro_batch);
  torch::Tensor x = input.tokens ? torch::randint(input.classes, sample, long_on)
                                 : torch::randn(sample, torch::TensorOptions().device(device));
  const torch::Tensor labels = input.tokens ? torch::randint(input.classes, sample, long_on)
                                            : torch::randint(input.classes, {micro_batch}, long_on);
  const auto& layers = stack->layers();
  {  // a forward first, its graph dropped: what a first call allocates for good (cuBLAS's workspace) is not counted
    optim::AutocastScope autocast(optim::compute_type(deck.optim.precision), device.is_cuda());
    torch::Tensor y = x;
    for (const auto& layer : layers) y = model::forward_layer(layer, y);
    model::cross_entropy(y, labels, true, int64_t{1} << 24);
  }
  std::vector<int64_t> saved;
  std::vector<torch::Tensor> kept;  // every layer's output and the loss, alive to the end as in training
  for (size_t l = 0; l < layers.size(); ++l) {
    const int64_t before = in_use();
    {
      optim::AutocastScope autocast(optim::compute_type(deck.optim.precision), device.is_cuda());
      kept.push_back(model::forward_layer(layers[l], x));
      if (l + 1 == layers.size()) kept.push_back(model::cross_entropy(kept.back(), labels, true, int64_t{1} << 24));
    }
    saved.push_back(in_use() - before);
    x = kept[l];  // the next layer's input, its graph attached
  }
  return saved;
}

}  // namespace trident::measure
