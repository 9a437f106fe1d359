#include "model/model.hpp"

#include "core/error.hpp"

namespace trident::model {

LayerStackImpl::LayerStackImpl(std::vector<Layer> layers) : layers_(std::move(layers)) {
  for (auto& layer : layers_) register_module(layer.name, layer.module.ptr());
}

torch::Tensor LayerStackImpl::forward(torch::Tensor x) {
  LayerHooks* hooks = *hooks_;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (hooks) hooks->before_layer(first_index_ + l);
    x = layers_[l].module->forward(x);
    if (hooks) hooks->after_layer(first_index_ + l, x);
  }
  return x;
}

std::shared_ptr<LayerStackImpl> LayerStackImpl::slice(size_t begin, size_t end) const {
  TRIDENT_CHECK(begin <= end && end <= layers_.size(), "LayerStack::slice: bad range");
  auto part = std::make_shared<LayerStackImpl>(std::vector<Layer>(layers_.begin() + static_cast<std::ptrdiff_t>(begin),
                                                                  layers_.begin() + static_cast<std::ptrdiff_t>(end)));
  part->hooks_ = hooks_;
  part->first_index_ = first_index_ + begin;
  part->train(is_training());
  return part;
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

std::vector<LayerInfo> describe_layers(LayerStack& model, const InputSpec& input) {
  torch::NoGradGuard no_grad;
  const bool training = model->is_training();
  model->eval();
  std::vector<int64_t> two_samples{2};
  two_samples.insert(two_samples.end(), input.sample_shape.begin(), input.sample_shape.end());
  auto x = torch::zeros(two_samples, input.tokens ? torch::kLong : torch::kFloat);
  std::vector<LayerInfo> layers;
  for (const auto& layer : model->layers()) {
    LayerInfo info;
    info.name = layer.name;
    // The stack registers each layer under its name: "<layer>.<its own name>" is the model's.
    for (const auto& p : layer.module->named_parameters())
      info.parameters.push_back({layer.name + "." + p.key(), p.value().sizes().vec()});
    for (const auto& b : layer.module->named_buffers())
      if (b.value().is_floating_point()) info.buffers.push_back({layer.name + "." + b.key(), b.value().sizes().vec()});
    auto module = layer.module;  // a copy of the handle: forward is not const
    x = module->forward(x);
    info.output_shape = x.sizes().slice(1).vec();
    layers.push_back(std::move(info));
  }
  model->train(training);
  return layers;
}

std::vector<size_t> parameter_tensors_per_layer(const LayerStack& model) {
  std::vector<size_t> counts;
  for (const auto& layer : model->layers()) counts.push_back(layer.module->parameters().size());
  return counts;
}

}  // namespace trident::model
