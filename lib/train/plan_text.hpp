#pragma once
// `trident plan`: what a run would do, without running it: the layout, the batch arithmetic,
// the model's parameters and the model-state bytes each rank will hold. No LibTorch: `trident`
// runs plan itself (a login node need not load it).
#include <cstdint>
#include <string>

#include "config/deck.hpp"
#include "data/split_file.hpp"
#include "model/layer_info.hpp"

namespace trident::train {

// The model's input as the dataset gives it; a GPT's vocabulary is model.vocab when set (it
// may exceed the dataset's, e.g. padded to a multiple of 64 for faster matmuls).
model::InputSpec input_spec(const config::Deck& deck, const data::SplitFile& train_split);
// "" unless model.vocab is set below the token dataset's vocabulary (what train and plan refuse).
std::string vocab_problem(const config::Deck& deck, const data::SplitFile& train_split);

// "777.84 MiB", "1.20 GiB", "4.0 KiB".
std::string size_text(int64_t bytes);

// `gpu_bytes`: the memory of the GPUs the run will have (plan --gpu-memory); 0: this node's first
// GPU where it has one, else none.
std::string plan_text(const config::Deck& deck, int world_size, int64_t gpu_bytes = 0);

// "" when `need` bytes fit in a GPU of `gpu_bytes`; else what does not fit and the deck keys that
// shrink it (model.recompute where the deck's model recomputes and does not yet).
std::string device_fit_problem(int64_t need, int64_t gpu_bytes, const config::Deck& deck);

}  // namespace trident::train
