#pragma once
// A model's layer list as plain data: what the layout plan (parallel/plan.hpp) cuts into
// stages, places in flat buffers and sizes, without LibTorch (model::describe_layers makes it).
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

}  // namespace trident::model
