#pragma once
// `trident plan`: what a run would do, without running it: the layout, the batch arithmetic,
// the model's parameters and the model-state bytes each rank will hold.
#include <string>

#include "config/deck.hpp"

namespace trident::train {

std::string plan_text(const config::Deck& deck, int world_size);

}  // namespace trident::train
