#pragma once
// Which layers each pipeline stage runs: contiguous runs of the model's layer list.
#include <cstdint>
#include <string>
#include <vector>

namespace trident::parallel {

// First layer of each stage (size pp, starting with 0). `boundaries` (first layers of stages
// 1..pp-1) when given; otherwise the cut that minimises the largest stage's parameter count.
// Throws BadInput naming parallel.pp / parallel.boundaries when no valid cut exists; `pieces`
// says what the pp pieces are in its messages (default "parallel.pp = <pp> stages"; the
// interleaved schedule cuts pp x virtual_stages chunks).
std::vector<int> cut_layers(const std::vector<int64_t>& layer_params, int pp, const std::vector<int64_t>& boundaries,
                            const std::string& pieces = "");

// "2,5" -> {2, 5}; "" -> {}. 64-bit, so that cut_layers names an index past the model as given
// (the deck refuses one past 64 bits).
std::vector<int64_t> parse_boundaries(const std::string& text);

}  // namespace trident::parallel
