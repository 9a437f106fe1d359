#include "model/describe_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include <string>
#include <utility>

#include "core/error.hpp"

namespace trident::model {

namespace {

// A layer's list under construction: the names a torch::nn::Sequential of named modules gives
// its parameters ("<layer>.<module>.<parameter>").
struct LayerWriter {
  LayerInfo info;
  explicit LayerWriter(std::string name) { info.name = std::move(name); }
  void parameter(const std::string& module, const std::string& name, std::vector<int64_t> shape) {
    info.parameters.push_back({info.name + "." + module + "." + name, std::move(shape)});
  }
  void buffer(const std::string& module, const std::string& name, std::vector<int64_t> shape) {
    info.buffers.push_back({info.name + "." + module + "." + name, std::move(shape)});
  }
  // torch::nn::Linear: weight [out, in], then bias [out] unless it has none.
  void linear(const std::string& module, int64_t in, int64_t out, bool bias = true) {
    parameter(module, "weight", {out, in});
    if (bias) parameter(module, "bias", {out});
  }
  // torch::nn::LayerNorm over the last `width` values: weight and bias [width].
  void layer_norm(const std::string& module, int64_t width) {
    parameter(module, "weight", {width});
    parameter(module, "bias", {width});
  }
  // What its forward keeps for the backward (LayerInfo::saved; stored is the same unless recomputed).
  void keeps(int64_t per_sample, int64_t per_micro_batch = 0) { info.saved = info.stored = {per_sample, per_micro_batch}; }
  LayerInfo done(std::vector<int64_t> output_shape) {
    info.output_shape = std::move(output_shape);
    return std::move(info);
  }
};

// What the layers keep for the backward (LayerInfo::saved) on a GPU at the deck's precision,
// tensor by tensor as their forwards in mlp.cpp, cnn.cpp, gpt.cpp and loss.cpp keep them (the
// ActivationMemory tests count the bytes allocated on the CPU, and on a GPU):
//   fp32: LibTorch's layers; the attention is scaled_dot_product_attention, which keeps its output
//         and a log-sum-exp per head and token, not the T x T probabilities, or (AttentionKeeps::
//         kProbabilities) LibTorch 1.x's explicit attention on the host, which keeps those;
//   bf16 / fp16: the GPT's fused layers (gpt.cpp): 16-bit activations around an fp32 residual
//         stream, and each matrix product's weight cast to 16 bits once per micro-batch. The mlp
//         and cnn (autocast) at their fp32 sizes.
// The loss is counted with the last layer: LibTorch's fp32 cross-entropy keeps its log-softmax,
// as large as the logits (and two floats: the loss and its weight); the GPU's fused one a
// log-sum-exp per row.
bool sixteen_bit(const config::Deck& deck) { return deck.optim.precision != "fp32"; }

// mlp.cpp's build_mlp: flatten, [linear, relu] per hidden width, a linear head.
std::vector<LayerInfo> describe_mlp(const config::Deck& deck, const InputSpec& input) {
  int64_t width = 1;
  for (auto d : input.sample_shape) width *= d;
  std::vector<LayerInfo> layers;
  const auto hidden = config::hidden_sizes(deck);
  for (size_t i = 0; i < hidden.size(); ++i) {
    LayerWriter layer("fc" + std::to_string(i + 1));
    layer.linear("linear", width, hidden[i]);
    layer.keeps(4 * hidden[i]);  // the ReLU's output (the linear's is gone once the ReLU has run)
    layers.push_back(layer.done({hidden[i]}));
    width = hidden[i];
  }
  LayerWriter head("head");
  head.linear("linear", width, input.classes);
  head.keeps(8 * input.classes, 8);  // the logits and the loss's log-softmax; the loss
  layers.push_back(head.done({input.classes}));
  return layers;
}

// cnn.cpp's build_cnn: two conv(3x3, no bias)-BN-ReLU-maxpool(2) blocks of 32 and 64 channels,
// a linear head. BatchNorm's floating-point buffers are its running mean and variance (its
// count of batches is an integer).
std::vector<LayerInfo> describe_cnn(const config::Deck& deck, const InputSpec& input) {
  check_cnn_input(deck, input);
  int64_t in = input.sample_shape[0], h = input.sample_shape[1], w = input.sample_shape[2];
  std::vector<LayerInfo> layers;
  int index = 1;
  for (int64_t out : {32, 64}) {
    LayerWriter block("block" + std::to_string(index++));
    block.parameter("conv", "weight", {out, in, 3, 3});
    block.parameter("bn", "weight", {out});
    block.parameter("bn", "bias", {out});
    block.buffer("bn", "running_mean", {out});
    block.buffer("bn", "running_var", {out});
    // The convolution's output (BatchNorm's input), the ReLU's (the pooling's input), the pooled
    // values and their int64 argmax indices; BatchNorm's batch mean and 1 / std per channel.
    block.keeps(8 * out * h * w + 12 * out * (h / 2) * (w / 2), 8 * out);
    in = out;
    h /= 2;
    w /= 2;
    layers.push_back(block.done({out, h, w}));
  }
  LayerWriter head("head");
  head.linear("linear", in * h * w, input.classes);
  head.keeps(8 * input.classes, 8);  // the logits and the loss's log-softmax; the loss
  layers.push_back(head.done({input.classes}));
  return layers;
}

// gpt.cpp's build_gpt: embed (token and position tables), model.layers pre-LN blocks, head
// (a LayerNorm and an untied linear without bias to the vocabulary).
std::vector<LayerInfo> describe_gpt(const config::Deck& deck, const InputSpec& input, AttentionKeeps attention) {
  const auto& m = deck.model;
  const int64_t vocab = input.classes, d = m.d_model, t = input.sample_shape.at(0), heads = m.heads;
  const bool half = sixteen_bit(deck);
  std::vector<LayerInfo> layers;
  LayerWriter embed("embed");
  embed.parameter("embedding", "token.weight", {vocab, d});
  embed.parameter("embedding", "position.weight", {m.seq_len, d});
  embed.keeps(4 * t * d, 8 * t);  // the fp32 sum of the two lookups (autocast leaves them fp32); the positions
  layers.push_back(embed.done({t, d}));
  for (int64_t l = 1; l <= m.layers; ++l) {
    LayerWriter block("block" + std::to_string(l));
    block.layer_norm("block.attn_norm", d);
    block.linear("block.qkv", d, 3 * d);
    block.linear("block.attn_out", d, d);
    block.layer_norm("block.mlp_norm", d);
    block.linear("block.mlp_in", d, 4 * d);
    block.linear("block.mlp_out", 4 * d, d);
    // Per token: each LayerNorm's mean and 1 / std (fp32), the attention's log-sum-exp per head.
    const int64_t per_token = 16 + 4 * heads;
    if (half) {
      // 16-bit: LayerNorm outputs d + d, q k v 3d, the attention's output d, the MLP's GELU input
      // and output 4d + 4d; fp32: the stream after the attention d and the block's output d. Its
      // four matrices' 16-bit copies, 12 d^2 weights. (The host's autocast layers are not sized.)
      block.keeps(t * (2 * 14 * d + 4 * 2 * d + per_token), 2 * 12 * d * d);
    } else if (attention == AttentionKeeps::kLogSumExp) {
      // fp32: LayerNorm outputs d + d, q k v 3d, the attention's output d, the stream after the
      // attention d, the MLP's hidden layer before and after GELU 4d + 4d, the block's output d.
      block.keeps(t * (4 * 16 * d + per_token));
    } else {
      // The same, with the explicit attention's fp32 probabilities, heads x T x T a sample, in place
      // of the log-sum-exp, and its causal mask, T x T bools for the micro-batch.
      block.keeps(t * (4 * 16 * d + 16) + 4 * heads * t * t, t * t);
    }
    if (m.recompute) {  // its input kept, by the layer before; its output alone is new
      block.info.saved = {4 * t * d, 0};
      block.info.recomputed = true;
    }
    layers.push_back(block.done({t, d}));
  }
  LayerWriter head("head");
  head.layer_norm("norm", d);
  head.linear("linear", d, vocab, /*bias=*/false);
  // The LayerNorm's output and its mean and 1 / std, the logits, and the loss's: fp32, its
  // log-softmax; 16-bit, a log-sum-exp per token. 16-bit: the weight's copy.
  if (half)
    head.keeps(t * (2 * d + 8 + 2 * vocab + 4), 2 * vocab * d);
  else
    head.keeps(t * (4 * d + 8 + 8 * vocab), 8);
  layers.push_back(head.done({t, vocab}));
  return layers;
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string list_text(const std::vector<NamedShape>& list) {
  std::string out;
  for (const auto& p : list) out += (out.empty() ? "" : ", ") + p.name + " " + shape_text(p.shape);
  return out;
}

bool same(const std::vector<NamedShape>& a, const std::vector<NamedShape>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].shape != b[i].shape) return false;
  return true;
}

}  // namespace

void check_cnn_input(const config::Deck& deck, const InputSpec& input) {
  if (input.sample_shape.size() != 3)
    fatal_all(fmt::format("model.kind = cnn needs image inputs C x H x W; data.path {} has samples of rank {}",
                          deck.data.path, input.sample_shape.size()));
  const int64_t channels = input.sample_shape[0], h = input.sample_shape[1], w = input.sample_shape[2];
  if (h < 4 || w < 4)  // two 2x2 poolings leave nothing of a smaller image for the head
    fatal_all(fmt::format("model.kind = cnn pools twice by 2, so it needs images of at least 4x4; data.path {} has "
                          "{}x{}x{}",
                          deck.data.path, channels, h, w));
}

std::string layer_difference(const LayerInfo& built, const LayerInfo& described) {
  if (built.name != described.name)
    return fmt::format("layer '{}' built where '{}' was described", built.name, described.name);
  if (!same(built.parameters, described.parameters))
    return fmt::format("layer '{}' has parameters {} but was described with {}", built.name,
                       list_text(built.parameters), list_text(described.parameters));
  if (!same(built.buffers, described.buffers))
    return fmt::format("layer '{}' has buffers {} but was described with {}", built.name, list_text(built.buffers),
                       list_text(described.buffers));
  if (built.output_shape != described.output_shape)
    return fmt::format("layer '{}' outputs {} per sample but was described with {}", built.name,
                       shape_text(built.output_shape), shape_text(described.output_shape));
  return "";
}

std::string model_size_keys(const config::Deck& deck, const InputSpec& input) {
  if (deck.model.kind == "gpt")
    return fmt::format("model.vocab = {}{}, model.d_model = {}, model.layers = {}", input.classes,
                       deck.model.vocab == 0 ? " (the dataset's)" : "", deck.model.d_model, deck.model.layers);
  if (deck.model.kind == "mlp") return "model.hidden = " + deck.model.hidden;
  return "model.kind = " + deck.model.kind;
}

std::vector<LayerInfo> describe_model(const config::Deck& deck, const InputSpec& input, AttentionKeeps attention) {
  std::vector<LayerInfo> layers;
  if (deck.model.kind == "mlp") {
    layers = describe_mlp(deck, input);
  } else if (deck.model.kind == "cnn") {
    layers = describe_cnn(deck, input);
  } else if (deck.model.kind == "gpt") {
    layers = describe_gpt(deck, input, attention);
  } else {
    fatal_all("model.kind: unknown model '" + deck.model.kind + "'");
  }
  // The plan sums elements and bytes in int64 (NamedShape::numel): a model past that (model.hidden
  // = 3037000500,3037000500) is refused here, as LibTorch refused to allocate it when the plan built it.
  int64_t total = 0;
  for (const auto& layer : layers)
    for (const auto& p : layer.parameters) {
      int64_t elements = 1;
      bool overflow = false;
      for (int64_t d : p.shape) overflow = overflow || __builtin_mul_overflow(elements, d, &elements);
      overflow = overflow || __builtin_mul_overflow(elements, int64_t{16}, &elements) ||  // its bytes with AdamW's
                 __builtin_add_overflow(total, elements, &total);
      if (overflow)
        fatal_all(fmt::format("the model ({}) is too large: its parameters' bytes pass 2^63 at {}",
                              model_size_keys(deck, input), p.name));
    }
  return layers;
}

}  // namespace trident::model
