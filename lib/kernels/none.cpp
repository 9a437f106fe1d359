// The kernels of kernels/*.hpp in a build without CUDA: none, said so; callers check *_built().
#include <stdexcept>

#include "kernels/cross_entropy.hpp"

namespace trident::kernels {

bool cross_entropy_built() { return false; }

void cross_entropy_forward(LogitType, const void*, const int64_t*, int64_t, int64_t, float*, float*, void*) {
  throw std::logic_error("cross_entropy_forward: this trident is built without CUDA");
}

void cross_entropy_backward(LogitType, const void*, const int64_t*, const float*, const float*, int64_t, int64_t, void*,
                            void*) {
  throw std::logic_error("cross_entropy_backward: this trident is built without CUDA");
}

}  // namespace trident::kernels
