#pragma once
// The deck's model as plain data, computed from the deck and the input's shape: every layer's
// parameters and floating-point buffers by full name and shape, and one sample's shape leaving
// it, as the builders in mlp.cpp, cnn.cpp and gpt.cpp make them, without building anything. The
// plan (`trident plan`, and `trident train` at parallel.pp > 1, before a rank builds its stage)
// needs it: building a model to count its parameters draws every weight (19 s and 0.8 GB for a
// 1.6 B-parameter GPT on the 2-core VM), and at pp > 1 every rank did that once more than the
// stage it keeps. No LibTorch here. The training checks what it built against this
// (train/build_stage.cpp), and ModelBuilders.TheDescriptionFromTheDeckIsTheBuiltModel
// (tests/unit/gpt_model_test.cpp) compares the two for each kind over a spread of shapes.
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "model/layer_info.hpp"

namespace trident::model {

// What a GPT's attention keeps for its backward, which depends on the LibTorch trident is built
// against (model::attention_keeps() in gpt.hpp): LibTorch 2.x's scaled_dot_product_attention keeps
// its output and a log-sum-exp per head and token (its flash and memory-efficient kernels on a GPU,
// its flash kernel on the CPU in 2.11); LibTorch 1.x's explicit softmax(q k^T / sqrt(d)) v keeps
// the T x T probabilities of every head (4 H T^2 bytes a sample in fp32, most of a block's at long
// sequences) and the causal mask. The default, kLogSumExp, is a GPU's with LibTorch 2.x: what
// `trident plan` (no LibTorch) estimates for.
enum class AttentionKeeps { kLogSumExp, kProbabilities };

// The model named by model.kind. Bad input (exit 2 on every rank) where its builder would refuse
// the input (a cnn on samples that are not C x H x W images of at least 4x4), and where its
// parameters number more than an int64 holds (no host could build it).
std::vector<LayerInfo> describe_model(const config::Deck& deck, const InputSpec& input,
                                      AttentionKeeps attention = AttentionKeeps::kLogSumExp);

// The deck keys that size the model, for a message ("model.hidden = 300,7").
std::string model_size_keys(const config::Deck& deck, const InputSpec& input);

// "" when `built` (describe_layers of a built layer) is the layer `described`; else what differs,
// for a fault: the description and the builder have drifted apart.
std::string layer_difference(const LayerInfo& built, const LayerInfo& described);

// The cnn's refusal of an input it cannot take, shared with its builder.
void check_cnn_input(const config::Deck& deck, const InputSpec& input);

}  // namespace trident::model
