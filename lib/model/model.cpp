#include "model/model.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <new>

#include "core/error.hpp"
#include "core/memory_limit.hpp"
#include "core/tensor_storage.hpp"
#include "core/torch_error.hpp"
#include "model/recompute.hpp"

namespace trident::model {

LayerStackImpl::LayerStackImpl(std::vector<Layer> layers) : layers_(std::move(layers)) {
  for (auto& layer : layers_) register_module(layer.name, layer.module.ptr());
}

torch::Tensor forward_layer(const Layer& layer, const torch::Tensor& x) {
  if (layer.recompute && torch::GradMode::is_enabled()) return recomputed_forward(layer.module, x);
  torch::nn::Sequential module = layer.module;  // a handle: forward is not const
  return module->forward(x);
}

torch::Tensor LayerStackImpl::forward(torch::Tensor x) {
  LayerHooks* hooks = *hooks_;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (hooks) hooks->before_layer(first_index_ + l);
    x = forward_layer(layers_[l], x);
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

namespace {

const Builder& builder_of(const config::Deck& deck) {
  static const std::map<std::string, Builder> builders{{"mlp", build_mlp}, {"cnn", build_cnn}, {"gpt", build_gpt}};
  const auto it = builders.find(deck.model.kind);
  if (it == builders.end()) fatal_all("model.kind: unknown model '" + deck.model.kind + "'");
  return it->second;
}

// Layer l's seed: splitmix64's finaliser of the model's draw and l, so that neighbouring layers'
// seeds share no pattern mt19937's seeding could carry over.
uint64_t layer_seed(uint64_t model_draw, size_t layer) {
  uint64_t z = model_draw + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(layer) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Weights left for a checkpoint to fill are NaN until it does: a parameter a restore missed shows
// in the first loss, not as a model silently started from whatever memory held.
void fill_undrawn(Layer& layer) {
  torch::NoGradGuard no_grad;
  for (auto& p : layer.module->parameters()) p.fill_(std::numeric_limits<float>::quiet_NaN());
}

// Puts torch's default CPU generator back as it was when made, also when a layer fails.
class GeneratorRestore {
 public:
  explicit GeneratorRestore(at::Generator generator) : generator_(std::move(generator)) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~GeneratorRestore() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }
  GeneratorRestore(const GeneratorRestore&) = delete;
  GeneratorRestore& operator=(const GeneratorRestore&) = delete;

 private:
  at::Generator generator_;
  at::Tensor state_;
};

}  // namespace

void build_each_layer(const config::Deck& deck, const InputSpec& input, const std::function<bool(size_t)>& keep,
                      const std::function<void(Layer)>& sink, const std::function<bool(size_t)>& draw) {
  const Builder& builder = builder_of(deck);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  uint64_t model_draw = 0;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    model_draw = at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
  }
  const GeneratorRestore restore(generator);
  size_t index = 0;
  builder(deck, input, [&](const std::string& name, std::vector<int64_t> output_shape, bool recomputable,
                           const LayerMaker& make) {
    const size_t layer = index++;
    if (!keep(layer)) return;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_current_seed(layer_seed(model_draw, layer));
    }
    torch::nn::Sequential module{nullptr};
    try {
      module = make(!draw || draw(layer));
    } catch (const std::exception& e) {
      // A layer this host cannot allocate at all (model.vocab = 2000000000 asks LibTorch for a
      // 1 TB embedding) is bad input naming the keys that size it, not a fault with the
      // allocator's message. (Only the making: what the sink does with the layer, such as
      // timing it, fails as itself.)
      std::string reason = message_of(e);
      const bool allocation =
          dynamic_cast<const std::bad_alloc*>(&e) || reason.find("can't allocate memory") != std::string::npos;
      if (!allocation) throw;
      if (const auto at = reason.find("DefaultCPUAllocator"); at != std::string::npos) reason = reason.substr(at);
      fatal_all(fmt::format("the model ({}) is too large to build: layer {} could not be allocated on {} ({})",
                            model_size_keys(deck, input), layer + 1, who(), reason));
    }
    sink(Layer{name, std::move(module), std::move(output_shape), recomputable && deck.model.recompute});
  });
}

namespace {

// Describes layers in model order. A layer whose builder gave no output shape is run forward
// on two zero samples of the shape leaving the previous one.
class LayerDescriber {
 public:
  explicit LayerDescriber(const InputSpec& input) : shape_(input.sample_shape), tokens_(input.tokens) {}
  LayerInfo operator()(const Layer& layer) {
    LayerInfo info;
    info.name = layer.name;
    // The stack registers each layer under its name: "<layer>.<its own name>" is the model's.
    for (const auto& p : layer.module->named_parameters())
      info.parameters.push_back({layer.name + "." + p.key(), p.value().sizes().vec()});
    for (const auto& b : layer.module->named_buffers())
      if (b.value().is_floating_point()) info.buffers.push_back({layer.name + "." + b.key(), b.value().sizes().vec()});
    shape_ = layer.output_shape.empty() ? forward(layer) : layer.output_shape;
    tokens_ = false;  // only the first layer takes token ids
    info.output_shape = shape_;
    return info;
  }

 private:
  std::vector<int64_t> forward(const Layer& layer) const {
    torch::NoGradGuard no_grad;
    std::vector<int64_t> two_samples{2};
    two_samples.insert(two_samples.end(), shape_.begin(), shape_.end());
    auto module = layer.module;  // a copy of the handle: forward and train() are not const
    const bool training = module->is_training();
    module->eval();
    const auto y = module->forward(torch::zeros(two_samples, tokens_ ? torch::kLong : torch::kFloat));
    module->train(training);
    return y.sizes().slice(1).vec();
  }

  std::vector<int64_t> shape_;  // one sample entering the next layer
  bool tokens_;
};

// The layers `keep` selects, each drawing its weights, or (draw_weights false) left NaN for a
// checkpoint to fill.
std::vector<Layer> make_layers(const config::Deck& deck, const InputSpec& input,
                               const std::function<bool(size_t)>& keep, bool draw_weights) {
  std::vector<Layer> layers;
  build_each_layer(
      deck, input, keep,
      [&](Layer layer) {
        if (!draw_weights) fill_undrawn(layer);
        layers.push_back(std::move(layer));
      },
      [&](size_t) { return draw_weights; });
  return layers;
}

}  // namespace

LayerStack build(const config::Deck& deck, const InputSpec& input, bool draw_weights) {
  return LayerStack(make_layers(deck, input, [](size_t) { return true; }, draw_weights));
}

LayerStack build_layers(const config::Deck& deck, const InputSpec& input, const std::vector<int>& keep,
                        bool draw_weights) {
  TRIDENT_CHECK(std::is_sorted(keep.begin(), keep.end()), "build_layers: the layers to keep must be in model order");
  std::vector<Layer> layers = make_layers(
      deck, input, [&](size_t layer) { return std::binary_search(keep.begin(), keep.end(), static_cast<int>(layer)); },
      draw_weights);
  TRIDENT_CHECK(layers.size() == keep.size(), "build_layers: a layer to keep is past the model's last");
  return LayerStack(std::move(layers));
}

PartitionedStage build_layers_partitioned(const config::Deck& deck, const InputSpec& input,
                                          const std::vector<int>& keep, int64_t begin, int64_t end,
                                          bool draw_weights) {
  TRIDENT_CHECK(std::is_sorted(keep.begin(), keep.end()),
                "build_layers_partitioned: the layers to keep must be in model order");
  TRIDENT_CHECK(0 <= begin && begin <= end, "build_layers_partitioned: bad range");
  // Each kept layer's first element in the stage's layout, from the description (checked against
  // the built model by the caller), to know before making a layer whether it reaches the range.
  const std::vector<LayerInfo> described = describe_model(deck, input);
  std::vector<int64_t> first_element(described.size(), 0), elements(described.size(), 0);
  int64_t total = 0;
  size_t hashed = described.size();  // the smallest kept layer with parameters: every rank draws it
  for (int l : keep) {
    TRIDENT_CHECK(l >= 0 && static_cast<size_t>(l) < described.size(),
                  "build_layers_partitioned: a layer to keep is past the model's last");
    const auto layer = static_cast<size_t>(l);
    first_element[layer] = total;
    for (const auto& p : described[layer].parameters) elements[layer] += p.numel();
    total += elements[layer];
    if (elements[layer] > 0 && (hashed == described.size() || elements[layer] < elements[hashed])) hashed = layer;
  }
  TRIDENT_CHECK(end <= total,
                fmt::format("build_layers_partitioned: elements [{}, {}) asked of a stage of {}", begin, end, total));
  const auto in_range = [&](size_t layer) {
    return first_element[layer] < end && first_element[layer] + elements[layer] > begin;
  };
  PartitionedStage stage;
  stage.partition = torch::empty({end - begin}, torch::kFloat);
  stage.begin = begin;
  torch::NoGradGuard no_grad;
  int64_t offset = 0;  // of the next parameter in the stage's layout
  size_t index = 0;    // of the next kept layer
  std::vector<Layer> layers;
  build_each_layer(
      deck, input, [&](size_t layer) { return std::binary_search(keep.begin(), keep.end(), static_cast<int>(layer)); },
      [&](Layer layer) {
        const auto model_index = static_cast<size_t>(keep[index++]);
        // The stage is described, and checked, without reading the released parameters.
        TRIDENT_CHECK(!layer.output_shape.empty(),
                      "build_layers_partitioned: layer " + layer.name + " declares no output shape");
        for (auto& p : layer.module->parameters()) {
          // A parameter shared with an earlier one would be read after its release.
          TRIDENT_CHECK(p.numel() == 0 || p.storage().nbytes() > 0,
                        "build_layers_partitioned: a parameter of layer " + layer.name + " is shared");
          const at::Tensor values = p.contiguous();
          if (draw_weights && model_index == hashed) stage.content_hash = hash_with(stage.content_hash, values);
          const int64_t first = std::max(begin, offset), last = std::min(end, offset + p.numel());
          if (first < last && draw_weights)
            stage.partition.narrow(0, first - begin, last - first)
                .copy_(values.view({-1}).narrow(0, first - offset, last - first));
          else if (first < last)  // NaN until the checkpoint fills it (fill_undrawn)
            stage.partition.narrow(0, first - begin, last - first).fill_(std::numeric_limits<float>::quiet_NaN());
          offset += p.numel();
          release_storage(p);
        }
        layers.push_back(std::move(layer));
        // What the layer's making and its released parameters freed stays resident in malloc's
        // heap otherwise: as much as the stage again, the memory the partition saves.
        release_free_heap();
      },
      [&](size_t layer) { return draw_weights && (in_range(layer) || layer == hashed); });
  TRIDENT_CHECK(offset == total, fmt::format("build_layers_partitioned: {} elements made where {} were described",
                                             offset, total));
  stage.model = LayerStack(std::move(layers));
  return stage;
}

std::vector<LayerInfo> describe_layers(LayerStack& model, const InputSpec& input) {
  LayerDescriber describe(input);
  std::vector<LayerInfo> layers;
  for (const auto& layer : model->layers()) layers.push_back(describe(layer));
  return layers;
}

void move_buffers(torch::nn::Module& module, torch::Device device) {
  torch::NoGradGuard no_grad;
  for (auto& b : module.buffers()) b.set_data(b.to(device));
}

std::vector<size_t> parameter_tensors_per_layer(const LayerStack& model) {
  std::vector<size_t> counts;
  for (const auto& layer : model->layers()) counts.push_back(layer.module->parameters().size());
  return counts;
}

}  // namespace trident::model
