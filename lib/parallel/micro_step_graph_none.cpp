// A build without CUDA has no graphs to capture (parallel/micro_step_graph.hpp).
#include "parallel/micro_step_graph.hpp"

namespace trident::parallel {

std::unique_ptr<MicroStepGraph> make_micro_step_graph(MicroStep, int) { return nullptr; }

}  // namespace trident::parallel
