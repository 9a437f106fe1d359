#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include "model/model.hpp"

namespace trident::model {

// The ConvNet of the seeds: two conv(3x3)-BN-ReLU-maxpool(2) blocks (32 and 64 channels) and
// a linear head. Three layers for a pipeline to cut. (LibTorch's modules draw their initial
// weights as they are made, asked to or not: the model is small.)
void build_cnn(const config::Deck& deck, const InputSpec& input, const LayerSink& emit) {
  check_cnn_input(deck, input);
  int64_t in = input.sample_shape[0], h = input.sample_shape[1], w = input.sample_shape[2];
  int index = 1;
  for (int64_t out : {32, 64}) {
    h /= 2;  // the pooling's floor
    w /= 2;
    emit("block" + std::to_string(index++), {out, h, w}, /*recomputable=*/false, [&](bool /*draw_weights*/) {
      torch::nn::Sequential block;
      block->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
      block->push_back("bn", torch::nn::BatchNorm2d(out));
      block->push_back("relu", torch::nn::ReLU());
      block->push_back("pool", torch::nn::MaxPool2d(2));
      return block;
    });
    in = out;
  }
  emit("head", {input.classes}, /*recomputable=*/false, [&](bool /*draw_weights*/) {
    torch::nn::Sequential head;
    head->push_back("flatten", torch::nn::Flatten());
    head->push_back("linear", torch::nn::Linear(in * h * w, input.classes));
    return head;
  });
}

}  // namespace trident::model
