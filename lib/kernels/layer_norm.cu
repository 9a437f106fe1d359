// LayerNorm of fp32 rows into bf16/fp16 (kernels/layer_norm.hpp). One warp a row: lane l holds
// columns c * 128 + 4 l .. + 3 of each 128-column chunk as float4s (16-byte loads, coalesced
// over the warp), so a row is read once and its sums are warp shuffles. Memory-bound: GPT-2
// small's [16384, 768] rows are 50 MB of fp32 in and 25 MB of bf16 out forward (~25 us at the
// H100's ~3 TB/s); backward reads the 16-bit gradient and the fp32 input and writes the fp32
// input gradient (~45 us).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "comm/cuda_check.hpp"
#include "comm/cuda_runtime.hpp"
#include "kernels/half_convert.cuh"
#include "kernels/layer_norm.hpp"
#include "kernels/partial_sums.cuh"

namespace trident::kernels {

namespace {

constexpr int kWarps = 8;  // rows a block works on at once
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 128;     // columns a warp covers with one float4 per lane
constexpr int kMaxChunks = 8;   // widths up to 1024: a lane's columns stay in registers

template <typename T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ type from(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float2 to(type v) { return __bfloat1622float2(v); }
};
template <>
struct Pair<__half> {
  using type = __half2;
  static __device__ __forceinline__ type from(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float2 to(type v) { return __half22float2(v); }
};

// Four 16-bit values: one 8-byte access.
template <typename T>
__device__ __forceinline__ void store4(T* p, float4 v) {
  union {
    typename Pair<T>::type pairs[2];
    uint2 raw;
  } u;
  u.pairs[0] = Pair<T>::from(v.x, v.y);
  u.pairs[1] = Pair<T>::from(v.z, v.w);
  *reinterpret_cast<uint2*>(p) = u.raw;
}
template <typename T>
__device__ __forceinline__ float4 load4(const T* p) {
  union {
    uint2 raw;
    typename Pair<T>::type pairs[2];
  } u;
  u.raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = Pair<T>::to(u.pairs[0]), b = Pair<T>::to(u.pairs[1]);
  return {a.x, a.y, b.x, b.y};
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

template <typename T, int kChunks>
__global__ void __launch_bounds__(kThreads) layer_norm_forward_kernel(const float* __restrict__ x,
                                                                      const float* __restrict__ gamma,
                                                                      const float* __restrict__ beta, int64_t rows,
                                                                      float eps, T* __restrict__ y,
                                                                      float* __restrict__ mean_out,
                                                                      float* __restrict__ rstd_out,
                                                                      const T* __restrict__ branch,
                                                                      float* __restrict__ sum_out) {
  constexpr int width = kChunks * kChunk;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp: it shares the row
  const float* in = x + row * width;
  float4 v[kChunks];
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    v[c] = *reinterpret_cast<const float4*>(in + c * kChunk + lane * 4);
    if (branch != nullptr) {  // the residual add first: the rows normalised are x + branch
      const float4 b = load4(branch + row * width + c * kChunk + lane * 4);
      v[c] = float4{v[c].x + b.x, v[c].y + b.y, v[c].z + b.z, v[c].w + b.w};
      *reinterpret_cast<float4*>(sum_out + row * width + c * kChunk + lane * 4) = v[c];
    }
    sum += sum4(v[c]);
  }
  const float mean = warp_sum(sum) / width;
  // The variance from the centred values held in registers: two passes, no cancellation.
  float squares = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const float4 d{v[c].x - mean, v[c].y - mean, v[c].z - mean, v[c].w - mean};
    squares += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
  }
  const float rstd = rsqrtf(warp_sum(squares) / width + eps);
  T* out = y + row * width;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = c * kChunk + lane * 4;
    const float4 g = *reinterpret_cast<const float4*>(gamma + col), b = *reinterpret_cast<const float4*>(beta + col);
    store4(out + col, float4{(v[c].x - mean) * rstd * g.x + b.x, (v[c].y - mean) * rstd * g.y + b.y,
                             (v[c].z - mean) * rstd * g.z + b.z, (v[c].w - mean) * rstd * g.w + b.w});
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Each warp takes rows blockIdx.x * kWarps + warp, then every gridDim.x * kWarps-th after it,
// writing the input gradient row by row and summing the weight and bias gradients of its
// columns in registers; the block then sums its warps' sums and writes them to its row of
// `partial` ([gridDim.x][2][width]: weight, then bias), which sum_partials adds up. Fixed
// order throughout: the same inputs give the same bits.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kThreads) layer_norm_backward_kernel(
    const T* __restrict__ grad_y, const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ rstd, const float* __restrict__ gamma, int64_t rows, float* __restrict__ grad_x,
    float* __restrict__ partial, const float* __restrict__ grad_sum, T* __restrict__ grad_x16) {
  constexpr int width = kChunks * kChunk;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float4 grad_gamma[kChunks], grad_beta[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) grad_gamma[c] = grad_beta[c] = float4{0.f, 0.f, 0.f, 0.f};
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float m = mean[row], r = rstd[row];
    float4 xhat[kChunks], g[kChunks];  // normalised input; grad_y * gamma
    float sum_g = 0.f, sum_g_xhat = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int col = c * kChunk + lane * 4;
      const float4 dy = load4(grad_y + row * width + col);
      const float4 v = *reinterpret_cast<const float4*>(x + row * width + col);
      const float4 w = *reinterpret_cast<const float4*>(gamma + col);
      xhat[c] = float4{(v.x - m) * r, (v.y - m) * r, (v.z - m) * r, (v.w - m) * r};
      g[c] = float4{dy.x * w.x, dy.y * w.y, dy.z * w.z, dy.w * w.w};
      sum_g += sum4(g[c]);
      sum_g_xhat += (g[c].x * xhat[c].x + g[c].y * xhat[c].y) + (g[c].z * xhat[c].z + g[c].w * xhat[c].w);
      grad_gamma[c].x += dy.x * xhat[c].x;
      grad_gamma[c].y += dy.y * xhat[c].y;
      grad_gamma[c].z += dy.z * xhat[c].z;
      grad_gamma[c].w += dy.w * xhat[c].w;
      grad_beta[c].x += dy.x;
      grad_beta[c].y += dy.y;
      grad_beta[c].z += dy.z;
      grad_beta[c].w += dy.w;
    }
    // d x = rstd * (g - mean(g) - xhat * mean(g * xhat))
    const float a = warp_sum(sum_g) / width, b = warp_sum(sum_g_xhat) / width;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int col = c * kChunk + lane * 4;
      float4 dx{r * (g[c].x - a - xhat[c].x * b), r * (g[c].y - a - xhat[c].y * b), r * (g[c].z - a - xhat[c].z * b),
                r * (g[c].w - a - xhat[c].w * b)};
      if (grad_sum != nullptr) {
        // The gradient reaching the input by the residual path, added as autograd's engine adds
        // the two: __fadd_rn is never contracted into an FMA with the product above.
        const float4 s = *reinterpret_cast<const float4*>(grad_sum + row * width + col);
        dx = float4{__fadd_rn(dx.x, s.x), __fadd_rn(dx.y, s.y), __fadd_rn(dx.z, s.z), __fadd_rn(dx.w, s.w)};
      }
      *reinterpret_cast<float4*>(grad_x + row * width + col) = dx;
      if (grad_x16 != nullptr) store4(grad_x16 + row * width + col, dx);
    }
  }
  // The block's sums, a chunk at a time: thread t < 128 adds the warps' weight gradients of
  // column c * 128 + t, thread 128 + t their bias gradients.
  __shared__ float4 shared[2][kWarps][32];
  float* out = partial + static_cast<int64_t>(blockIdx.x) * 2 * width;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    shared[0][warp][lane] = grad_gamma[c];
    shared[1][warp][lane] = grad_beta[c];
    __syncthreads();
    const int which = threadIdx.x / kChunk, column = threadIdx.x % kChunk;
    const float* values = reinterpret_cast<const float*>(shared[which]);
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += values[w * kChunk + column];
    out[which * width + c * kChunk + column] = total;
    __syncthreads();
  }
}

// Backward blocks: as many as fit on the GPU at once (the wider kernels hold more registers, so
// fewer fit), no more than the rows need. Each adds a row of partial sums to the workspace. The
// blocks an SM holds depend on the kernel and the GPU model only: asked once per kernel (a rank
// drives one GPU), not on every layer's backward.
template <typename T, int kChunks>
int backward_blocks(int64_t rows, int device) {
  static const int per_sm = [] {
    int blocks = 0;
    CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, layer_norm_backward_kernel<T, kChunks>, kThreads, 0));
    return std::max(blocks, 1);
  }();
  const int64_t resident = static_cast<int64_t>(comm::cuda_multiprocessors(device)) * per_sm;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(resident, (rows + kWarps - 1) / kWarps)));
}

void check_rows(int64_t rows) {
  if ((rows + kWarps - 1) / kWarps > 2147483647)
    fatal_one("layer_norm kernels: " + std::to_string(rows) + " rows, over what one launch can cover");
}

template <typename T, int kChunks>
void forward_as(const float* x, const float* gamma, const float* beta, int64_t rows, float eps, void* y, float* mean,
                float* rstd, const void* branch, float* sum, cudaStream_t stream) {
  check_rows(rows);
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  layer_norm_forward_kernel<T, kChunks><<<blocks, kThreads, 0, stream>>>(
      x, gamma, beta, rows, eps, static_cast<T*>(y), mean, rstd, static_cast<const T*>(branch), sum);
  CUDA_CHECK(cudaGetLastError());
}

template <typename T, int kChunks>
void backward_as(const void* grad_y, const float* x, const float* mean, const float* rstd, const float* gamma,
                 int64_t rows, float* grad_x, float* grad_gamma, float* grad_beta, float* workspace, int device,
                 const float* grad_sum, void* grad_x16, cudaStream_t stream) {
  constexpr int width = kChunks * kChunk;
  const int blocks = backward_blocks<T, kChunks>(rows, device);
  layer_norm_backward_kernel<T, kChunks><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const T*>(grad_y), x, mean, rstd, gamma, rows, grad_x, workspace, grad_sum,
      static_cast<T*>(grad_x16));
  CUDA_CHECK(cudaGetLastError());
  // The weight's sums, then the bias's: the two halves of each block's row of partial sums.
  sum_partials(workspace, blocks, 2 * width, width, grad_gamma, stream);
  sum_partials(workspace + width, blocks, 2 * width, width, grad_beta, stream);
}

// call(std::integral_constant<int, width / 128>) for the widths the kernels take: the generic
// lambdas below turn it into a template argument, as with_type does the 16-bit type.
template <typename Call>
void with_chunks(int64_t width, Call&& call) {
  if (!layer_norm_supports(width))
    fatal_one("layer_norm kernels: width " + std::to_string(width) + " is not a multiple of 128 up to 1024");
  switch (width / kChunk) {
    case 1: call(std::integral_constant<int, 1>()); break;
    case 2: call(std::integral_constant<int, 2>()); break;
    case 3: call(std::integral_constant<int, 3>()); break;
    case 4: call(std::integral_constant<int, 4>()); break;
    case 5: call(std::integral_constant<int, 5>()); break;
    case 6: call(std::integral_constant<int, 6>()); break;
    case 7: call(std::integral_constant<int, 7>()); break;
    case 8: call(std::integral_constant<int, 8>()); break;
    default: break;
  }
}

}  // namespace

bool layer_norm_supports(int64_t width) { return width > 0 && width % kChunk == 0 && width / kChunk <= kMaxChunks; }

void layer_norm_forward(HalfType type, const float* x, const float* gamma, const float* beta, int64_t rows,
                        int64_t width, float eps, void* y, float* mean, float* rstd, void* stream,
                        const void* branch, float* sum) {
  if (rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  with_type(type, [&](auto tag) {
    with_chunks(width, [&](auto chunks) {
      forward_as<decltype(tag), decltype(chunks)::value>(x, gamma, beta, rows, eps, y, mean, rstd, branch, sum, s);
    });
  });
}

int64_t layer_norm_backward_workspace(HalfType type, int64_t rows, int64_t width, int device) {
  int64_t floats = 0;
  with_type(type, [&](auto tag) {
    with_chunks(width, [&](auto chunks) {
      floats = static_cast<int64_t>(backward_blocks<decltype(tag), decltype(chunks)::value>(rows, device)) * 2 * width;
    });
  });
  return floats;
}

void layer_norm_backward(HalfType type, const void* grad_y, const float* x, const float* mean, const float* rstd,
                         const float* gamma, int64_t rows, int64_t width, float* grad_x, float* grad_gamma,
                         float* grad_beta, float* workspace, int device, void* stream, const float* grad_sum,
                         void* grad_x16) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0) {  // no rows: zero gradients
    CUDA_CHECK(cudaMemsetAsync(grad_gamma, 0, width * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(grad_beta, 0, width * sizeof(float), s));
    return;
  }
  with_type(type, [&](auto tag) {
    with_chunks(width, [&](auto chunks) {
      backward_as<decltype(tag), decltype(chunks)::value>(grad_y, x, mean, rstd, gamma, rows, grad_x, grad_gamma,
                                                          grad_beta, workspace, device, grad_sum, grad_x16, s);
    });
  });
}

}  // namespace trident::kernels
