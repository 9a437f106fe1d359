// comm/node_gpu.hpp in a build without CUDA: it trains on no GPU, so it names none.
#include "comm/node_gpu.hpp"

namespace trident::comm {

std::optional<NodeGpu> first_visible_gpu() { return std::nullopt; }

}  // namespace trident::comm
