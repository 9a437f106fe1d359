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

// Bytes a layer's forward allocates and keeps until its backward, for one micro-batch of
// `micro_batch` samples: per_sample x micro_batch + per_micro_batch (16-bit weight copies, the
// attention mask, position ids). Its output is included (the next layer or the loss keeps it).
struct SavedBytes {
  int64_t per_sample = 0, per_micro_batch = 0;
  int64_t of(int64_t micro_batch) const { return per_sample * micro_batch + per_micro_batch; }
};

struct LayerInfo {
  std::string name;
  std::vector<NamedShape> parameters;  // the layer's own, in the model's order
  std::vector<NamedShape> buffers;     // its floating-point buffers (batch-norm statistics)
  std::vector<int64_t> output_shape;   // one sample leaving the layer
  // Forward + backward of one micro-batch, measured (parallel.balance = time); 0 = not measured.
  double seconds = 0;
  // What its forward keeps for the backward, estimated by describe_model for the attention the
  // build runs (AttentionKeeps; zero in a built layer's description): `saved` as the layer runs,
  // `stored` were it not recomputed. They differ for a layer model.recompute runs again in its
  // backward: it keeps its output alone, and its stored set is live again while that backward
  // recomputes it.
  SavedBytes saved, stored;
  bool recomputed = false;
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
