#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "model/model.hpp"

namespace trident::model {

// flatten -> [linear -> relu] per hidden width -> linear head. No batch statistics, so
// gradient accumulation is exactly equivalent to a larger micro-batch. (LibTorch's modules draw
// their initial weights as they are made, asked to or not: the model is small.)
void build_mlp(const config::Deck& deck, const InputSpec& input, const LayerSink& emit) {
  int64_t width = 1;
  for (auto d : input.sample_shape) width *= d;
  const auto hidden = config::hidden_sizes(deck);
  for (size_t i = 0; i < hidden.size(); ++i) {
    emit("fc" + std::to_string(i + 1), {hidden[i]}, /*recomputable=*/false, [&](bool /*draw_weights*/) {
      torch::nn::Sequential block;
      if (i == 0) block->push_back("flatten", torch::nn::Flatten());
      block->push_back("linear", torch::nn::Linear(width, hidden[i]));
      block->push_back("relu", torch::nn::ReLU());
      return block;
    });
    width = hidden[i];
  }
  emit("head", {input.classes}, /*recomputable=*/false, [&](bool /*draw_weights*/) {
    torch::nn::Sequential head;
    if (hidden.empty()) head->push_back("flatten", torch::nn::Flatten());
    head->push_back("linear", torch::nn::Linear(width, input.classes));
    return head;
  });
}

}  // namespace trident::model
