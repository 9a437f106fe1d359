#pragma once
// A model's layer list as plain data: what the layout plan (parallel/plan.hpp) cuts into
// stages, places in flat buffers and sizes, without LibTorch (model::describe_model makes it from
// the deck, model::describe_layers from built layers).
#include <cstdint>
#include <string>
#include <vector>

namespace trident::model {

struct NamedShape {
  std::string name;  // the model's full name, "block1.conv.weight"
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct LayerInfo {
  std::string name;
  std::vector<NamedShape> parameters;  // the layer's own, in the model's order
  std::vector<NamedShape> buffers;     // its floating-point buffers (batch-norm statistics)
  std::vector<int64_t> output_shape;   // one sample leaving the layer
  // Forward + backward of one micro-batch, measured (parallel.balance = time); 0 = not measured.
  double seconds = 0;
  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& p : parameters) n += p.numel();
    return n;
  }
};

// Shape of one input sample and number of classes, read from the dataset.
struct InputSpec {
  std::vector<int64_t> sample_shape;  // e.g. {1, 28, 28}; {seq_len} for tokens
  int64_t classes = 10;               // the vocabulary for tokens
  bool tokens = false;                // integer token ids in, one target per position
};

}  // namespace trident::model
