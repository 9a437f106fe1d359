// Column sums of bf16/fp16 rows into fp32 (kernels/column_sums.hpp). Block (32, 8): thread x reads
// 8 consecutive columns with one 16-byte load (a warp reads 512 contiguous bytes of a row), thread
// y every 8th row of the block's slab; the 8 row phases are added in shared memory and the block
// writes its slab's 256 sums to the workspace, which sum_partials adds up. Memory-bound: GPT-2
// small's 48 bias gradients a step are 2.7 GB of bf16 (~0.9 ms at ~3 TB/s).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "comm/cuda_check.hpp"
#include "comm/cuda_runtime.hpp"
#include "kernels/column_sums.hpp"
#include "kernels/half_convert.cuh"
#include "kernels/partial_sums.cuh"

namespace trident::kernels {

namespace {

constexpr int kVector = 8;                  // 16-byte loads
constexpr int kColumnsPerBlock = 32 * kVector;
constexpr int kRowPhases = 8;
constexpr int64_t kMinRowsPerSlab = 64;     // below this a slab's work does not pay for its partial row


template <typename T>
__global__ void __launch_bounds__(32 * kRowPhases) column_partials_kernel(const T* __restrict__ values, int64_t rows,
                                                                          int64_t columns, int64_t rows_per_slab,
                                                                          float* __restrict__ partial) {
  const int64_t column = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * kVector;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_slab;
  const int64_t last = first + rows_per_slab < rows ? first + rows_per_slab : rows;
  float acc[kVector] = {};
  if (column < columns) {
#pragma unroll 4
    for (int64_t r = first + threadIdx.y; r < last; r += kRowPhases) {
      const int4 packed = *reinterpret_cast<const int4*>(values + r * columns + column);
      const T* v = reinterpret_cast<const T*>(&packed);
#pragma unroll
      for (int k = 0; k < kVector; ++k) acc[k] += to_float(v[k]);
    }
  }
  __shared__ float sums[kRowPhases][kColumnsPerBlock + 1];
#pragma unroll
  for (int k = 0; k < kVector; ++k) sums[threadIdx.y][threadIdx.x * kVector + k] = acc[k];
  __syncthreads();
  // Thread t of the 256 adds the 8 phases of the block's column t.
  const int t = threadIdx.y * 32 + threadIdx.x;
  const int64_t out_column = static_cast<int64_t>(blockIdx.x) * kColumnsPerBlock + t;
  if (out_column < columns) {
    float total = 0.f;
    for (int y = 0; y < kRowPhases; ++y) total += sums[y][t];
    partial[static_cast<int64_t>(blockIdx.y) * columns + out_column] = total;
  }
}

struct Grid {
  unsigned column_blocks, slabs;
  int64_t rows_per_slab;
};

// Enough blocks to keep every SM busy with several at once: slabs of rows times column blocks.
Grid grid_for(int64_t rows, int64_t columns, int device) {
  const int sms = comm::cuda_multiprocessors(device);
  const int64_t column_blocks = (columns + kColumnsPerBlock - 1) / kColumnsPerBlock;
  const int64_t wanted = std::max<int64_t>(1, 4 * static_cast<int64_t>(sms) / column_blocks);
  const int64_t slabs = std::max<int64_t>(1, std::min(wanted, (rows + kMinRowsPerSlab - 1) / kMinRowsPerSlab));
  return {static_cast<unsigned>(column_blocks), static_cast<unsigned>(slabs), (rows + slabs - 1) / slabs};
}

}  // namespace

bool column_sums_supports(int64_t columns) {
  return columns > 0 && columns % kVector == 0 && columns <= 2147483647;
}

int64_t column_sums_workspace(int64_t rows, int64_t columns, int device) {
  return static_cast<int64_t>(grid_for(rows, columns, device).slabs) * columns;
}

void column_sums(HalfType type, const void* values, int64_t rows, int64_t columns, float* out, float* workspace,
                 int device, void* stream) {
  if (!column_sums_supports(columns) || reinterpret_cast<uintptr_t>(values) % 16 != 0)
    fatal_one("column_sums: " + std::to_string(columns) + " columns at address " +
              std::to_string(reinterpret_cast<uintptr_t>(values)) +
              ": needs a multiple of 8 from a 16-byte aligned start");
  const auto s = static_cast<cudaStream_t>(stream);
  const Grid g = grid_for(rows, columns, device);
  const dim3 blocks(g.column_blocks, g.slabs), threads(32, kRowPhases);
  with_type(type, [&](auto tag) {
    using T = decltype(tag);
    column_partials_kernel<T>
        <<<blocks, threads, 0, s>>>(static_cast<const T*>(values), rows, columns, g.rows_per_slab, workspace);
  });
  CUDA_CHECK(cudaGetLastError());
  sum_partials(workspace, static_cast<int>(g.slabs), columns, static_cast<int>(columns), out, s);
}

}  // namespace trident::kernels
