#pragma once
// Fused cross-entropy kernels for low-precision logits on the GPU (model/loss.cpp calls them):
// one pass over each row of bf16/fp16 logits for the loss, one for the gradient, everything
// in fp32 registers. Against the sliced ATen path they replace, GPT-2 small's 16 x 1024 x 50304
// logits go from ~20 ms of a step to ~2 ms (benchmarks/README.md): the logits are read once
// forward, read and the gradient written once backward, and no fp32 copy of them exists.
// Torch-free header: kernels/cross_entropy.cu in CUDA builds, kernels/none.cpp elsewhere.
#include <cstdint>

#include "kernels/half_type.hpp"

namespace trident::kernels {

// True where the kernels are compiled in (a CUDA build).
bool cross_entropy_built();

// Row r of `logits` ([rows, classes], contiguous, on the GPU) against labels[r] (int64):
// log_sum_exp[r] = log sum_j exp(logits[r, j]) and row_loss[r] = log_sum_exp[r] - logits[r, label].
// Labels outside [0, classes) give NaN for that row. Asynchronous on `stream` (a cudaStream_t).
void cross_entropy_forward(HalfType type, const void* logits, const int64_t* labels, int64_t rows, int64_t classes,
                           float* log_sum_exp, float* row_loss, void* stream);

// grad[r, j] = (exp(logits[r, j] - log_sum_exp[r]) - (j == labels[r])) * (*scale), in the logits'
// type. `scale` is a device pointer (the incoming gradient over the rows for a mean): no host
// read, so the backward needs no synchronisation.
void cross_entropy_backward(HalfType type, const void* logits, const int64_t* labels, const float* log_sum_exp,
                            const float* scale, int64_t rows, int64_t classes, void* grad, void* stream);

}  // namespace trident::kernels
