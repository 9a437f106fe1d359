#pragma once
// The second pass of trident's column reductions (kernels/layer_norm.cu, kernels/column_sums.cu):
// the first pass leaves one row of fp32 partial sums per block; this adds the rows up, in a fixed
// order, so that the same inputs give the same bits. Device code for those .cu files only.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "comm/cuda_check.hpp"

namespace trident::kernels {
namespace {  // each .cu file its own copy: no relocatable device code needed

// out[j] = sum over b < rows of partial[b * stride + j], for j < columns. Block (32, 8): 32
// columns, each summed by 8 threads over every 8th row, then across the 8 in shared memory.
__global__ void sum_partials_kernel(const float* __restrict__ partial, int rows, int64_t stride, int columns,
                                    float* __restrict__ out) {
  __shared__ float sums[8][33];
  const int column = blockIdx.x * 32 + threadIdx.x;
  float s = 0.f;
  if (column < columns)
    for (int b = threadIdx.y; b < rows; b += 8) s += partial[static_cast<int64_t>(b) * stride + column];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && column < columns) {
    float total = 0.f;
    for (int i = 0; i < 8; ++i) total += sums[i][threadIdx.x];
    out[column] = total;
  }
}

inline void sum_partials(const float* partial, int rows, int64_t stride, int columns, float* out, cudaStream_t stream) {
  sum_partials_kernel<<<(columns + 31) / 32, dim3(32, 8), 0, stream>>>(partial, rows, stride, columns, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace trident::kernels
