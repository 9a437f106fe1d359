#include "model/layer_timing.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "comm/cuda_runtime.hpp"
#include "core/timer.hpp"
#include "model/loss.hpp"
#include "optim/precision.hpp"

namespace trident::model {

namespace {

// Times layers one at a time: `input` is the micro-batch the next layer reads (the model's own
// for the first, then random numbers of the previous layer's output shape).
class LayerTimer {
 public:
  LayerTimer(const InputSpec& spec, int64_t micro_batch, c10::Device device, c10::ScalarType compute, int repeats)
      : device_(device), compute_(compute), repeats_(repeats),
        generator_(at::make_generator<at::CPUGeneratorImpl>(12345)) {
    std::vector<int64_t> shape{micro_batch};
    shape.insert(shape.end(), spec.sample_shape.begin(), spec.sample_shape.end());
    input_ = (spec.tokens ? at::randint(spec.classes, shape, generator_, at::kLong) : at::randn(shape, generator_))
                 .to(device);
    const std::vector<int64_t> label_shape = spec.tokens ? shape : std::vector<int64_t>{micro_batch};
    labels_ = at::randint(spec.classes, label_shape, generator_, at::kLong).to(device);
  }

  // Forward + backward of `layer` on the current input, the fastest of the repeats; then the
  // next layer's input: random numbers of this one's output shape, in fp32 (as a stage receives
  // its activations), with a gradient to compute.
  double time(const Layer& layer, bool last) {
    torch::nn::Sequential module = layer.module;  // a handle: forward is not const
    module->to(device_);
    if (timed_any_) input_.requires_grad_(true);  // the first layer computes no input gradient
    double fastest = 0;
    std::vector<int64_t> output_shape;
    for (int rep = 0; rep <= repeats_; ++rep) {  // rep 0 warms up
      if (input_.requires_grad()) input_.mutable_grad() = at::Tensor();
      sync();
      Stopwatch watch;
      at::Tensor output, loss;
      {
        optim::AutocastScope autocast(compute_, device_.is_cuda());
        output = forward_layer(layer, input_);  // a recomputed block as it trains: its forward twice
        if (last) loss = cross_entropy(output, labels_, /*mean=*/true);
      }
      if (last) {
        loss.backward();
      } else if (output.requires_grad()) {
        const bool reuse = gradient_.defined() && gradient_.sizes() == output.sizes() &&
                           gradient_.scalar_type() == output.scalar_type();
        if (!reuse) gradient_ = at::randn(output.sizes(), generator_).to(output.scalar_type()).to(device_);
        output.backward(gradient_);
      }
      sync();
      // The fastest repeat: on a shared node interference only ever adds time.
      if (rep > 0) fastest = rep == 1 ? watch.seconds() : std::min(fastest, watch.seconds());
      output_shape = output.sizes().vec();
    }
    timed_any_ = true;
    if (!last) input_ = at::randn(output_shape, generator_).to(device_);
    return fastest;
  }

 private:
  void sync() const {
    if (device_.is_cuda()) comm::cuda_synchronize(device_.index());
  }

  c10::Device device_;
  c10::ScalarType compute_;
  int repeats_;
  at::Generator generator_;
  at::Tensor input_, labels_, gradient_;
  bool timed_any_ = false;
};

}  // namespace

std::vector<double> time_layers(const config::Deck& deck, const InputSpec& input, int64_t micro_batch,
                                c10::Device device, c10::ScalarType compute, int repeats) {
  LayerTimer timer(input, micro_batch, device, compute, repeats);
  std::vector<double> seconds;
  // Whether a layer is the last (which adds the loss) is known when the builder hands over the
  // next one, or returns: each is timed then, the one after it already built.
  std::optional<Layer> waiting;
  build_each_layer(deck, input, [](size_t) { return true; }, [&](Layer layer) {
    if (waiting) seconds.push_back(timer.time(*waiting, /*last=*/false));
    waiting = std::move(layer);
  });
  if (waiting) seconds.push_back(timer.time(*waiting, /*last=*/true));
  return seconds;
}

}  // namespace trident::model
