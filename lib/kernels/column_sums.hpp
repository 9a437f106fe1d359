#pragma once
// Column sums of a [rows, columns] bf16/fp16 matrix into fp32: a linear layer's bias gradient
// (model/gpt.cpp's mixed_linear), the output gradient summed over the batch and sequence rows.
// ATen's reduction over the outer dimension ran at about half the H100's memory bandwidth on GPT-2
// small's [16384, 768..3072] gradients (benchmarks/README.md: 2.0 ms of a step for 48 biases),
// and wrote bf16, which a cast then turned into the fp32 gradient. Two passes: blocks that each
// cover a slab of rows and 256 columns, 16 bytes a load, then the slabs' partial sums added in a
// fixed order. Torch-free header: kernels/column_sums.cu in CUDA builds, kernels/none.cpp elsewhere.
#include <cstdint>

#include "kernels/half_type.hpp"

namespace trident::kernels {

// True where the kernels are compiled in (a CUDA build) and take this many columns (a multiple
// of 8: one 16-byte load covers 8 of a row's values).
bool column_sums_supports(int64_t columns);

// Floats of device workspace column_sums needs for this matrix on `device`.
int64_t column_sums_workspace(int64_t rows, int64_t columns, int device);

// out[j] = sum over r of values[r, j] in fp32, for the contiguous, 16-byte aligned `values` on
// the GPU. Asynchronous on `stream` (a cudaStream_t). The same inputs give the same bits on one
// GPU model; the number of row slabs, and so the order of the sums, follows its SM count.
void column_sums(HalfType type, const void* values, int64_t rows, int64_t columns, float* out, float* workspace,
                 int device, void* stream);

}  // namespace trident::kernels
