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
#include "model/describe_model.hpp"
#include "model/layer_info.hpp"

namespace trident::model {

struct Layer {
  std::string name;  // also the prefix of its parameters' names ("block1.conv.weight")
  torch::nn::Sequential module;
  // One sample's shape leaving the layer, as the builder knows it: describing the model then
  // needs no forward (of a whole GPT at its sequence length, a minute on the CPU for 1.5 B
  // parameters). Empty: found by a forward.
  std::vector<int64_t> output_shape;
  // model.recompute: the stack keeps only the layer's input for backward and runs the layer again
  // there (model/recompute.hpp).
  bool recompute = false;
};

// layer(x), the way every forward that trains runs it: recomputed in the backward when
// layer.recompute and autograd records (not in evaluation, under no_grad; model/recompute.hpp).
torch::Tensor forward_layer(const Layer& layer, const torch::Tensor& x);

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
  // Hooks for this stack and every slice of it, called with the layer's index in this stack.
  void set_hooks(LayerHooks* hooks) { *hooks_ = hooks; }
  // Layers [begin, end) as a stack of their own (the same modules: an interleaved pipeline's
  // chunk of the rank's layers); it calls this stack's hooks, with this stack's indices.
  std::shared_ptr<LayerStackImpl> slice(size_t begin, size_t end) const;

 private:
  std::vector<Layer> layers_;
  std::shared_ptr<LayerHooks*> hooks_ = std::make_shared<LayerHooks*>(nullptr);
  size_t first_index_ = 0;  // of layers_[0] in the stack hooks_ belongs to
};
TORCH_MODULE(LayerStack);

inline LayerStack slice(const LayerStack& stack, size_t begin, size_t end) { return LayerStack(stack->slice(begin, end)); }

// A builder hands its model's layers over one after another, in model order, each as its name,
// one sample's shape leaving it, whether it is worth recomputing, and a function that makes it
// (constructs the module and draws its initial weights from torch's default generator). The
// caller makes only the layers it keeps, each from a generator seeded for that layer alone (build_each_layer): a layer's weights do not depend
// on which other layers are made, so a pipeline stage is built without drawing the rest of the
// model's weights, and no rank needs the whole model in memory (or the time to initialise it) to
// hold its stage.
// `draw_weights` false: the parameters may be left as allocated, for the caller to fill (from a
// checkpoint, or not at all: a ZeRO-3 rank whose partition holds none of them).
// `recomputable`: a layer that holds much more for its backward than its input (a transformer
// block), which model.recompute runs again in the backward instead.
using LayerMaker = std::function<torch::nn::Sequential(bool draw_weights)>;
using LayerSink = std::function<void(const std::string& name, std::vector<int64_t> output_shape, bool recomputable,
                                     const LayerMaker& make)>;
using Builder = std::function<void(const config::Deck&, const InputSpec&, const LayerSink& emit)>;

// The layers of the model named by model.kind for which `keep(index)` holds, made one by one and
// handed to `sink` at once (a layer the caller does not hold is freed before the next is made).
// Layer l is initialised from torch's default CPU generator seeded with a number mixed from l and
// one draw of that generator made first; the generator is left as that draw left it (also when
// a layer fails). A layer the host cannot allocate is bad input naming the deck keys that size it.
// `draw(index)` false: that layer is made without drawing its weights (LayerMaker); none given:
// every layer draws.
void build_each_layer(const config::Deck& deck, const InputSpec& input, const std::function<bool(size_t)>& keep,
                      const std::function<void(Layer)>& sink, const std::function<bool(size_t)>& draw = nullptr);
// The model named by model.kind, initialised from torch's generator (seed it first); with
// `draw_weights` false its weights are left for a checkpoint to fill.
LayerStack build(const config::Deck& deck, const InputSpec& input, bool draw_weights = true);
// Only its layers `keep` (ascending indices), with the weights build() would give them from the
// same seed; the others are not made.
LayerStack build_layers(const config::Deck& deck, const InputSpec& input, const std::vector<int>& keep,
                        bool draw_weights = true);

// A ZeRO-3 stage built without ever being whole in memory: the layers `keep`, made one by one
// with build_layers' weights. As each layer is made, the elements of its parameters that fall
// within [begin, end) of the stage's parameters laid end to end in model order (FlatParams'
// layout) are copied into `partition` (fp32, on the host), and the parameter's own memory is
// released: `model`'s parameters keep their shapes, with no memory behind them until ZeRO-3 gives
// them its gathered buffers (they must not be read before). Only the layers with elements in the
// range draw their weights, and the smallest layer with parameters, which every rank draws:
// `content_hash` is of its values, for comparing what the ranks drew. `draw_weights` false (a
// checkpoint fills the partition): none draws, and the hash is 0.
struct PartitionedStage {
  LayerStack model{nullptr};
  torch::Tensor partition;
  int64_t begin = 0;
  uint64_t content_hash = 0;
};
PartitionedStage build_layers_partitioned(const config::Deck& deck, const InputSpec& input,
                                          const std::vector<int>& keep, int64_t begin, int64_t end,
                                          bool draw_weights = true);

// The layer list as plain data (model/layer_info.hpp): each layer's parameters and
// floating-point buffers by full name and shape, and one sample's shape leaving it (the
// builder's, else a forward of two zero samples, evaluation mode, no grad).
std::vector<LayerInfo> describe_layers(LayerStack& model, const InputSpec& input);
// Moves the module's buffers (batch-norm statistics) to `device`, leaving its parameters where
// they are (FlatParams and ZeRO-3 place those).
void move_buffers(torch::nn::Module& module, torch::Device device);
// Parameter tensors per layer, in order: layer l owns the next count[l] of the stack's parameters.
std::vector<size_t> parameter_tensors_per_layer(const LayerStack& model);

void build_mlp(const config::Deck& deck, const InputSpec& input, const LayerSink& emit);
void build_cnn(const config::Deck& deck, const InputSpec& input, const LayerSink& emit);
void build_gpt(const config::Deck& deck, const InputSpec& input, const LayerSink& emit);

}  // namespace trident::model
