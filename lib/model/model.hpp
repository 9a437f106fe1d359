#pragma once
// Models as ordered lists of named layers: the unit a pipeline cuts into stages.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/deck.hpp"

namespace trident::model {

struct Layer {
  std::string name;  // also the prefix of its parameters' names ("block1.conv.weight")
  torch::nn::Sequential module;
};

// Shape of one input sample and number of classes, read from the dataset.
struct InputSpec {
  std::vector<int64_t> sample_shape;  // e.g. {1, 28, 28}; {seq_len} for tokens
  int64_t classes = 10;               // the vocabulary for tokens
  bool tokens = false;                // integer token ids in, one target per position
};

// Called around each layer's forward: ZeRO-3 gathers a layer's parameters just before it runs
// and frees them right after.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_layer(size_t layer) = 0;
  virtual void after_layer(size_t layer, torch::Tensor& output) = 0;
};

// A contiguous run of layers (the whole model, or one pipeline stage) as one module.
class LayerStackImpl : public torch::nn::Module {
 public:
  explicit LayerStackImpl(std::vector<Layer> layers);
  torch::Tensor forward(torch::Tensor x);
  const std::vector<Layer>& layers() const { return layers_; }
  void set_hooks(LayerHooks* hooks) { hooks_ = hooks; }

 private:
  std::vector<Layer> layers_;
  LayerHooks* hooks_ = nullptr;
};
TORCH_MODULE(LayerStack);

using Builder = std::function<std::vector<Layer>(const config::Deck&, const InputSpec&)>;
const std::map<std::string, Builder>& registry();

// The model named by model.kind, initialised from torch's generator (seed it first).
LayerStack build(const config::Deck& deck, const InputSpec& input);

// One sample's shape entering each layer and leaving the last: shapes[l] is layer l's input,
// shapes[layers] the model's output (a forward of two zero samples, evaluation mode, no grad).
std::vector<std::vector<int64_t>> layer_shapes(LayerStack& model, const InputSpec& input);
std::vector<int64_t> layer_parameter_counts(LayerStack& model);

std::vector<Layer> build_mlp(const config::Deck& deck, const InputSpec& input);
std::vector<Layer> build_cnn(const config::Deck& deck, const InputSpec& input);
std::vector<Layer> build_gpt(const config::Deck& deck, const InputSpec& input);

}  // namespace trident::model
