// The plan's estimate of what each layer keeps for its backward (LayerInfo::saved, from
// describe_model) against what the layers built from the same deck leave allocated on the CPU,
// fp32, measured by LibTorch's allocator (tests/saved_bytes.hpp): every model kind, a spread of
// shapes, model.recompute. (bf16 / fp16 GPT: GpuMemory.* in tests/gpu, on a GPU.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <tuple>
#include <vector>

#include "config/deck.hpp"
#include "model/describe_model.hpp"
#include "model/gpt.hpp"
#include "../saved_bytes.hpp"

using namespace trident;

namespace {

config::Deck gpt(int64_t layers, int64_t heads, int64_t d, int64_t seq) {
  config::Deck deck;
  deck.model.kind = "gpt";
  deck.model.layers = layers;
  deck.model.heads = heads;
  deck.model.d_model = d;
  deck.model.seq_len = seq;
  return deck;
}

// The described bytes of every layer against the measured ones, exactly, with the attention this
// build's LibTorch runs (LibTorch 1.x: explicit, keeping the probabilities).
void expect_described_is_measured(const config::Deck& deck, const model::InputSpec& input, int64_t micro_batch) {
  const std::vector<model::LayerInfo> described = model::describe_model(deck, input, model::attention_keeps());
  const std::vector<int64_t> measured = measure::measured_saved_bytes(deck, input, micro_batch, torch::kCPU);
  ASSERT_EQ(measured.size(), described.size());
  for (size_t l = 0; l < described.size(); ++l)
    EXPECT_EQ(described[l].saved.of(micro_batch), measured[l])
        << deck.model.kind << " layer " << described[l].name << ", micro-batch " << micro_batch;
}

}  // namespace

TEST(ActivationMemory, DescribedSavedBytesAreWhatTheLayersKeep) {
  // LibTorch 1.13 (the CPU build) runs the explicit attention here, LibTorch 2.x (the CUDA
  // flavour, on the CPU) scaled_dot_product_attention: each build measures its own.
  for (const auto& [layers, heads, d, seq, t, vocab, b] : std::vector<std::tuple<int, int, int, int, int64_t, int64_t, int64_t>>{
           {2, 4, 64, 32, 32, 96, 3}, {1, 3, 48, 40, 17, 257, 2}, {2, 8, 64, 16, 16, 50, 1}}) {
    const config::Deck deck = gpt(layers, heads, d, seq);
    expect_described_is_measured(deck, {{t}, vocab, true}, b);
    // Recomputed, a block keeps its output alone.
    config::Deck recomputed = deck;
    recomputed.model.recompute = true;
    expect_described_is_measured(recomputed, {{t}, vocab, true}, b);
  }
  for (const std::string hidden : {"40,24", "", "7"}) {
    config::Deck mlp;
    mlp.model.kind = "mlp";
    mlp.model.hidden = hidden;
    expect_described_is_measured(mlp, {{2, 12, 10}, 7}, 3);
  }
  config::Deck cnn;
  cnn.model.kind = "cnn";
  for (const model::InputSpec& input : {model::InputSpec{{1, 28, 28}, 10}, model::InputSpec{{3, 13, 10}, 6}})
    expect_described_is_measured(cnn, input, 2);
}

// The recomputed block's stored set is the stored block's: what its backward's recomputation holds.
TEST(ActivationMemory, RecomputedBlocksKeepTheirOutputAndStoreTheRest) {
  config::Deck deck = gpt(2, 4, 64, 32);
  const model::InputSpec input{{32}, 96, true};
  const auto stored = model::describe_model(deck, input);
  deck.model.recompute = true;
  const auto recomputed = model::describe_model(deck, input);
  for (size_t l = 0; l < stored.size(); ++l) {
    const bool block = stored[l].name.rfind("block", 0) == 0;
    EXPECT_EQ(recomputed[l].recomputed, block) << stored[l].name;
    EXPECT_EQ(recomputed[l].stored.of(5), stored[l].saved.of(5)) << stored[l].name;
    if (block) {
      EXPECT_EQ(recomputed[l].saved.of(5), 4 * 5 * 32 * 64) << stored[l].name;  // the fp32 stream
    }
  }
}
