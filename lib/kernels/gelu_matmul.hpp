#pragma once
// The GPT's MLP products with their GELU in cuBLASLt's epilogues (model/gpt.cpp's gelu_mlp):
// forward, gelu(x W^T + b) and the pre-activation x W^T + b written by the product itself
// (CUBLASLT_EPILOGUE_GELU_AUX_BIAS), where ATen's gelu would read the product back and write it
// again; backward, the gradient of the pre-activation, (g W2) * gelu'(pre), written by the product
// of the outgoing gradient and the next layer's weight (CUBLASLT_EPILOGUE_DGELU), where ATen's
// gelu_backward would read that product and the pre-activation back (benchmarks/README.md: GELU
// forward and backward were 1.98 ms of a 36.5 ms GPT-2 small step on the H100, near their memory
// floor as passes of their own). cuBLASLt's GELU is the tanh approximation, GPT-2's. The epilogue
// applies it to the fp32 accumulator, before the rounding to 16 bits that ATen's gelu reads.
// Torch-free header: kernels/gelu_matmul.cu in CUDA builds, kernels/none.cpp elsewhere.
#include <cstdint>

#include "kernels/half_type.hpp"

namespace trident::kernels {

// True where compiled in (a CUDA build) and the shapes suit the epilogues: widths that are
// multiples of 8 (16-byte rows; the pre-activation's leading dimension must be one).
bool gelu_matmul_supports(int64_t rows, int64_t in, int64_t out);

// Bytes of device workspace each call takes (cuBLASLt's, for split-k and the like).
int64_t gelu_matmul_workspace_bytes();

// Row-major, contiguous, 16-byte aligned, all in `type`: x [rows, in], w [out, in], bias [out];
// writes pre = x w^T + bias and y = gelu_tanh(pre), both [rows, out]. Asynchronous on `stream`.
void bias_gelu_matmul(HalfType type, const void* x, const void* w, const void* bias, int64_t rows, int64_t in,
                      int64_t out, void* y, void* pre, void* workspace, int device, void* stream);

// grad_pre = (g w2) * gelu_tanh'(pre), [rows, out]: g [rows, width] the gradient of the next
// layer's output, w2 [width, out] that layer's weight, pre [rows, out] from bias_gelu_matmul.
void gelu_grad_matmul(HalfType type, const void* g, const void* w2, const void* pre, int64_t rows, int64_t width,
                      int64_t out, void* grad_pre, void* workspace, int device, void* stream);

// y = residual + x w^T + bias in one product, the residual added in its epilogue (beta 1) and y
// written in fp32: the GPT block's last step, the MLP's output added to the fp32 residual stream
// (model/gpt.cpp's residual_gelu_mlp), where ATen's add of a 16-bit output to fp32 rows is a pass
// of its own. x [rows, in] and w [out, in] in `type`; bias [out], residual and y [rows, out] fp32;
// row-major, contiguous, 16-byte aligned, y not residual. Asynchronous on `stream`.
void residual_bias_matmul(HalfType type, const void* x, const void* w, const float* bias, const float* residual,
                          int64_t rows, int64_t in, int64_t out, float* y, void* workspace, int device, void* stream);
// How many residual_bias_matmul calls have queued their product in this process (tests; a CUDA
// graph's replays of a captured one are not counted).
int64_t residual_bias_matmuls();

// A linear layer's weight and bias gradients from one product, the bias's summed in its epilogue
// (CUBLASLT_EPILOGUE_BGRADB) instead of a pass of its own over g (kernels/column_sums.hpp): g
// [rows, out] the output's gradient, x [rows, in] the input, row-major in `type`; writes grad_w
// [out, in] = g^T x and grad_b [out] = g's column sums, both fp32. False, with nothing written,
// where the shapes or alignments do not suit it (weight_bias_grad_matmul_supports, 16-byte
// aligned pointers) or the heuristic finds no algorithm for it (CUBLAS_STATUS_NOT_SUPPORTED or
// none found; another cuBLASLt error is fatal): the caller then computes them apart.
// Asynchronous on `stream`.
bool weight_bias_grad_matmul_supports(int64_t rows, int64_t in, int64_t out);
bool weight_bias_grad_matmul(HalfType type, const void* g, const void* x, int64_t rows, int64_t in, int64_t out,
                             float* grad_w, float* grad_b, void* workspace, int device, void* stream);
// How many weight_bias_grad_matmul calls have queued their product in this process (tests).
int64_t weight_bias_grad_matmuls();

}  // namespace trident::kernels
