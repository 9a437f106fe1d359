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
  static const std::map<std::string, Builder> builders{{"mlp", build_mlp}, {"cnn", build_cnn}};
  return builders;
}

LayerStack build(const config::Deck& deck, const InputSpec& input) {
  const auto it = registry().find(deck.model.kind);
  if (it == registry().end()) fatal_all("model.kind: unknown model '" + deck.model.kind + "'");
  return LayerStack(it->second(deck, input));
}

}  // namespace trident::model
