#pragma once
// LayerNorm of fp32 rows with a bf16/fp16 output, fused (model/gpt.cpp calls them under CUDA
// autocast). Under autocast, ATen's layer_norm runs in fp32 and returns fp32: the GPT's next
// matrix product then casts it to bf16 in a kernel of its own, backward casts the gradient back,
// and ATen's weight/bias gradient kernel is slow at GPT widths (benchmarks/README.md, the H100
// profile: 4.7 ms of a 44 ms step for GPT-2 small's 25 LayerNorms). These write the 16-bit output
// directly, and compute the input's gradient and the weight/bias gradients in one pass over the
// rows plus a small pass over per-block partial sums. One warp a row, each lane holding its
// columns in registers: widths that are multiples of 128 up to 1024 (layer_norm_supports).
// Torch-free header: kernels/layer_norm.cu in CUDA builds, kernels/none.cpp elsewhere.
#include <cstdint>

#include "kernels/half_type.hpp"

namespace trident::kernels {

// True where the kernels are compiled in (a CUDA build) and take rows of this width.
bool layer_norm_supports(int64_t width);

// y[r, j] = (x[r, j] - mean[r]) * rstd[r] * gamma[j] + beta[j] in `type`, with mean[r] and
// rstd[r] = 1 / sqrt(var[r] + eps) (biased variance) written for backward. x: [rows, width]
// contiguous fp32 on the GPU, 16-byte aligned. Asynchronous on `stream` (a cudaStream_t).
// With a `branch` ([rows, width] in `type`, 8-byte aligned), the rows normalised are the
// residual sum x + branch (in fp32, as ATen adds them), written to `sum` (fp32, [rows, width],
// 16-byte aligned): the GPT's residual add in the same pass as the LayerNorm after it.
void layer_norm_forward(HalfType type, const float* x, const float* gamma, const float* beta, int64_t rows,
                        int64_t width, float eps, void* y, float* mean, float* rstd, void* stream,
                        const void* branch = nullptr, float* sum = nullptr);

// Floats of device workspace layer_norm_backward needs for `rows` rows of `width` on `device`.
int64_t layer_norm_backward_workspace(HalfType type, int64_t rows, int64_t width, int device);

// From grad_y ([rows, width] in `type`, 8-byte aligned): grad_x (fp32, [rows, width]) and the
// weight and bias gradients (fp32, [width] each, written, not added to). `workspace`: the floats
// above. The same inputs give the same bits on one GPU model (the blocks, and so the order of the
// weight and bias sums, follow its SM count). With `grad_sum` (fp32, [rows, width], 16-byte
// aligned), the gradient reaching x by the residual path is added into grad_x (one fp32 add, as
// autograd's engine would); with `grad_x16` (8-byte aligned), grad_x is written there too in
// `type` (the gradient of a 16-bit branch added into x: layer_norm_forward's).
void layer_norm_backward(HalfType type, const void* grad_y, const float* x, const float* mean, const float* rstd,
                         const float* gamma, int64_t rows, int64_t width, float* grad_x, float* grad_gamma,
                         float* grad_beta, float* workspace, int device, void* stream,
                         const float* grad_sum = nullptr, void* grad_x16 = nullptr);

}  // namespace trident::kernels
