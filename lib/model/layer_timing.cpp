#include "model/layer_timing.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

#include "comm/cuda_runtime.hpp"
#include "core/timer.hpp"
#include "model/loss.hpp"
#include "optim/precision.hpp"

namespace trident::model {

namespace {

// The state a timing pass must leave as it found it.
struct ModelSnapshot {
  explicit ModelSnapshot(LayerStack& model) : model_(model) {
    torch::NoGradGuard no_grad;
    for (auto& t : model->parameters()) params_.push_back(t.detach().clone());
    for (auto& t : model->buffers()) buffers_.push_back(t.detach().clone());
  }
  ~ModelSnapshot() {
    torch::NoGradGuard no_grad;
    auto params = model_->parameters();
    auto buffers = model_->buffers();
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(params_[i]);
      params[i].mutable_grad() = at::Tensor();
    }
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(buffers_[i]);
  }
  LayerStack& model_;
  std::vector<at::Tensor> params_, buffers_;
};

}  // namespace

std::vector<double> time_layers(LayerStack& model, const InputSpec& input, int64_t micro_batch, c10::Device device,
                                c10::ScalarType compute, int repeats) {
  const ModelSnapshot snapshot(model);
  const auto& layers = model->layers();
  const size_t n = layers.size();
  const int cuda_index = device.is_cuda() ? device.index() : -1;
  const auto sync = [cuda_index] {
    if (cuda_index >= 0) comm::cuda_synchronize(cuda_index);
  };
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(12345);
  std::vector<int64_t> shape{micro_batch};
  shape.insert(shape.end(), input.sample_shape.begin(), input.sample_shape.end());
  const at::Tensor inputs = (input.tokens ? at::randint(input.classes, shape, generator, at::kLong)
                                          : at::randn(shape, generator)).to(device);
  const std::vector<int64_t> label_shape = input.tokens ? shape : std::vector<int64_t>{micro_batch};
  const at::Tensor labels = at::randint(input.classes, label_shape, generator, at::kLong).to(device);

  std::vector<std::vector<double>> samples(n);
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    std::vector<at::Tensor> ins(n), outs(n);
    std::vector<double> seconds(n, 0.0);
    at::Tensor loss;
    for (size_t l = 0; l < n; ++l) {
      ins[l] = l == 0 ? inputs : outs[l - 1].detach().to(at::kFloat).requires_grad_(true);
      sync();
      Stopwatch watch;
      {
        optim::AutocastScope autocast(compute, device.is_cuda());
        torch::nn::Sequential layer = layers[l].module;  // a handle: forward is not const
        outs[l] = layer->forward(ins[l]);
        if (l == n - 1) loss = cross_entropy(outs[l], labels, /*mean=*/true);
      }
      sync();
      seconds[l] += watch.seconds();
    }
    for (size_t l = n; l-- > 0;) {
      sync();
      Stopwatch watch;
      if (l == n - 1) loss.backward();
      else outs[l].backward(ins[l + 1].grad().to(outs[l].scalar_type()));
      sync();
      seconds[l] += watch.seconds();
    }
    if (rep > 0)
      for (size_t l = 0; l < n; ++l) samples[l].push_back(seconds[l]);
  }
  // The fastest repeat: on a shared node interference only ever adds time.
  std::vector<double> fastest(n);
  for (size_t l = 0; l < n; ++l) fastest[l] = *std::min_element(samples[l].begin(), samples[l].end());
  return fastest;
}

}  // namespace trident::model
