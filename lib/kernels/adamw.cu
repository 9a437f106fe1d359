// AdamW over flat fp32 buffers (kernels/adamw.hpp). A grid of a few blocks per SM strides over
// the buffers, four elements (one 16-byte load of each buffer) per thread and iteration, and the
// unaligned head and tail one element at a time. Memory-bound: 28 bytes an element (32 where the
// gradients are divided and written back), GPT-2 small's 124 M parameters 3.5 GB a step; 1.37 ms
// on the H200 with the gradients written back (2.9 TB/s, below the card's ~4 TB/s: the
// per-element double divisions, PyTorch's formula, are the suspect, not yet measured apart).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "comm/cuda_check.hpp"
#include "comm/cuda_runtime.hpp"
#include "kernels/adamw.hpp"

namespace trident::kernels {

namespace {

std::atomic<int64_t> launched{0};

struct Corrections {
  float bias1, bias2_sqrt;  // 1 - beta1^t and sqrt(1 - beta2^t), as PyTorch passes them (float)
};

// One element's update with PyTorch's fused AdamW arithmetic (ATen's fused_adam_utils.cuh,
// adam_math in ADAMW mode, float parameters): the double settings promote the expressions they
// appear in, and each result is stored back as float where PyTorch's is.
__device__ __forceinline__ void update(float& param, float& grad, float& exp_avg, float& exp_avg_sq,
                                       const AdamWSettings& s, Corrections c, const float* grad_divisor) {
  float g = grad;
  if (grad_divisor) {
    g = static_cast<float>(static_cast<double>(g) / static_cast<double>(*grad_divisor));
    grad = g;
  }
  float p = param;
  if (s.weight_decay != 0) p = static_cast<float>(p - s.lr * s.weight_decay * p);
  const float m = static_cast<float>(s.beta1 * exp_avg + (1 - s.beta1) * g);
  const float v = static_cast<float>(s.beta2 * exp_avg_sq + (1 - s.beta2) * g * g);
  const float step_size = static_cast<float>(s.lr / c.bias1);
  const float denom = static_cast<float>((sqrtf(v) / c.bias2_sqrt) + s.eps);
  p -= step_size * m / denom;
  param = p;
  exp_avg = m;
  exp_avg_sq = v;
}

__device__ __forceinline__ Corrections corrections(const AdamWSettings& s, const float* step) {
  const double t = static_cast<double>(*step);
  return {static_cast<float>(1 - pow(s.beta1, t)), static_cast<float>(sqrt(1 - pow(s.beta2, t)))};
}

// The same update of four consecutive elements (one 16-byte load of each buffer).
__device__ __forceinline__ void update(float4& p, float4& g, float4& m, float4& v, const AdamWSettings& s,
                                       Corrections c, const float* grad_divisor) {
  update(p.x, g.x, m.x, v.x, s, c, grad_divisor);
  update(p.y, g.y, m.y, v.y, s, c, grad_divisor);
  update(p.z, g.z, m.z, v.z, s, c, grad_divisor);
  update(p.w, g.w, m.w, v.w, s, c, grad_divisor);
}

// `count` elements of T (float, or float4 over a range that all four buffers start 16-byte
// aligned), a grid striding over them. The float form takes the parts of the buffers before and
// after the aligned range, or all of them where the four buffers do not share an alignment.
template <typename T>
__global__ void adamw_kernel(T* __restrict__ params, T* __restrict__ grads, T* __restrict__ exp_avg,
                             T* __restrict__ exp_avg_sq, int64_t count, AdamWSettings s, const float* step,
                             const float* grad_divisor, const float* skip) {
  if (skip && *skip == 1.f) return;
  const Corrections c = corrections(s, step);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    T p = params[i], g = grads[i], m = exp_avg[i], v = exp_avg_sq[i];
    update(p, g, m, v, s, c, grad_divisor);
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (grad_divisor) grads[i] = g;
  }
}

constexpr int kThreads = 256;

unsigned blocks_for(int64_t work, int device) {
  const int64_t most = 8 * static_cast<int64_t>(std::max(1, comm::cuda_multiprocessors(device)));
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(most, (work + kThreads - 1) / kThreads)));
}

int64_t misalignment(const float* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 16); }

}  // namespace

bool adamw_built() { return true; }

void adamw_step(float* params, float* grads, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWSettings& settings,
                const float* step, const float* grad_divisor, const float* skip, int device, void* stream) {
  if (n <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t offset = misalignment(params);
  const bool shared_alignment = offset % 4 == 0 && misalignment(grads) == offset && misalignment(exp_avg) == offset &&
                                misalignment(exp_avg_sq) == offset;
  // Elements before the first 16-byte boundary, then whole vectors, then the rest.
  const int64_t head = shared_alignment ? std::min(n, ((16 - offset) % 16) / 4) : n;
  const int64_t vectors = (n - head) / 4, tail_start = head + 4 * vectors;
  if (head > 0)
    adamw_kernel<float><<<blocks_for(head, device), kThreads, 0, s>>>(params, grads, exp_avg, exp_avg_sq, head,
                                                                      settings, step, grad_divisor, skip);
  if (vectors > 0)
    adamw_kernel<float4><<<blocks_for(vectors, device), kThreads, 0, s>>>(
        reinterpret_cast<float4*>(params + head), reinterpret_cast<float4*>(grads + head),
        reinterpret_cast<float4*>(exp_avg + head), reinterpret_cast<float4*>(exp_avg_sq + head), vectors, settings,
        step, grad_divisor, skip);
  if (tail_start < n)
    adamw_kernel<float><<<blocks_for(n - tail_start, device), kThreads, 0, s>>>(
        params + tail_start, grads + tail_start, exp_avg + tail_start, exp_avg_sq + tail_start, n - tail_start,
        settings, step, grad_divisor, skip);
  CUDA_CHECK(cudaGetLastError());
  launched.fetch_add(1);
}

int64_t adamw_steps() { return launched.load(); }

}  // namespace trident::kernels
