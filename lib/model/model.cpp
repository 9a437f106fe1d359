#include "model/model.hpp"

#include "core/error.hpp"

namespace trident::model {

LayerStackImpl::LayerStackImpl(std::vector<Layer> layers) : layers_(std::move(layers)) {
  for (auto& layer : layers_) register_module(layer.name, layer.module.ptr());
}

torch::Tensor LayerStackImpl::forward(torch::Tensor x) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (hooks_) hooks_->before_layer(l);
    x = layers_[l].module->forward(x);
    if (hooks_) hooks_->after_layer(l, x);
  }
  return x;
}

const std::map<std::string, Builder>& registry() {
  static const std::map<std::string, Builder> builders{{"mlp", build_mlp}, {"cnn", build_cnn}, {"gpt", build_gpt}};
  return builders;
}

LayerStack build(const config::Deck& deck, const InputSpec& input) {
  const auto it = registry().find(deck.model.kind);
  if (it == registry().end()) fatal_all("model.kind: unknown model '" + deck.model.kind + "'");
  return LayerStack(it->second(deck, input));
}

std::vector<std::vector<int64_t>> layer_shapes(LayerStack& model, const InputSpec& input) {
  const auto& sample_shape = input.sample_shape;
  torch::NoGradGuard no_grad;
  const bool training = model->is_training();
  model->eval();
  std::vector<int64_t> two_samples{2};
  two_samples.insert(two_samples.end(), sample_shape.begin(), sample_shape.end());
  auto x = torch::zeros(two_samples, input.tokens ? torch::kLong : torch::kFloat);
  std::vector<std::vector<int64_t>> shapes{sample_shape};
  for (size_t l = 0; l < model->layers().size(); ++l) {
    auto layer = model->layers()[l].module;  // a copy of the handle: forward is not const
    x = layer->forward(x);
    shapes.push_back(x.sizes().slice(1).vec());
  }
  model->train(training);
  return shapes;
}

std::vector<int64_t> layer_parameter_counts(LayerStack& model) {
  std::vector<int64_t> counts;
  for (const auto& layer : model->layers()) {
    int64_t n = 0;
    for (const auto& p : layer.module->parameters()) n += p.numel();
    counts.push_back(n);
  }
  return counts;
}

}  // namespace trident::model
