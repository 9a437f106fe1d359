// The kernels of kernels/*.hpp in a build without CUDA: none, said so; callers check
// cross_entropy_built(), layer_norm_supports(), column_sums_supports(), gelu_matmul_supports() and
// adamw_built() first.
#include <stdexcept>

#include "kernels/adamw.hpp"
#include "kernels/column_sums.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/gelu_matmul.hpp"
#include "kernels/layer_norm.hpp"

namespace trident::kernels {

bool cross_entropy_built() { return false; }

void cross_entropy_forward(HalfType, const void*, const int64_t*, int64_t, int64_t, float*, float*, void*) {
  throw std::logic_error("cross_entropy_forward: this trident is built without CUDA");
}

void cross_entropy_backward(HalfType, const void*, const int64_t*, const float*, const float*, int64_t, int64_t, void*,
                            void*) {
  throw std::logic_error("cross_entropy_backward: this trident is built without CUDA");
}

bool layer_norm_supports(int64_t) { return false; }

void layer_norm_forward(HalfType, const float*, const float*, const float*, int64_t, int64_t, float, void*, float*,
                        float*, void*, const void*, float*) {
  throw std::logic_error("layer_norm_forward: this trident is built without CUDA");
}

int64_t layer_norm_backward_workspace(HalfType, int64_t, int64_t, int) { return 0; }

void layer_norm_backward(HalfType, const void*, const float*, const float*, const float*, const float*, int64_t,
                         int64_t, float*, float*, float*, float*, int, void*, const float*, void*) {
  throw std::logic_error("layer_norm_backward: this trident is built without CUDA");
}

bool column_sums_supports(int64_t) { return false; }

int64_t column_sums_workspace(int64_t, int64_t, int) { return 0; }

void column_sums(HalfType, const void*, int64_t, int64_t, float*, float*, int, void*) {
  throw std::logic_error("column_sums: this trident is built without CUDA");
}

bool gelu_matmul_supports(int64_t, int64_t, int64_t) { return false; }

int64_t gelu_matmul_workspace_bytes() { return 0; }

void bias_gelu_matmul(HalfType, const void*, const void*, const void*, int64_t, int64_t, int64_t, void*, void*, void*,
                      int, void*) {
  throw std::logic_error("bias_gelu_matmul: this trident is built without CUDA");
}

void gelu_grad_matmul(HalfType, const void*, const void*, const void*, int64_t, int64_t, int64_t, void*, void*, int,
                      void*) {
  throw std::logic_error("gelu_grad_matmul: this trident is built without CUDA");
}

void residual_bias_matmul(HalfType, const void*, const void*, const float*, const float*, int64_t, int64_t, int64_t,
                          float*, void*, int, void*) {
  throw std::logic_error("residual_bias_matmul: this trident is built without CUDA");
}

int64_t residual_bias_matmuls() { return 0; }

bool weight_bias_grad_matmul_supports(int64_t, int64_t, int64_t) { return false; }

bool weight_bias_grad_matmul(HalfType, const void*, const void*, int64_t, int64_t, int64_t, float*, float*, void*, int,
                             void*) {
  return false;
}

int64_t weight_bias_grad_matmuls() { return 0; }

bool adamw_built() { return false; }

void adamw_step(float*, float*, float*, float*, int64_t, const AdamWSettings&, const float*, const float*, const float*,
                int, void*) {
  throw std::logic_error("adamw_step: this trident is built without CUDA");
}

int64_t adamw_steps() { return 0; }

}  // namespace trident::kernels
