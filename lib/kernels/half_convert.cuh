#pragma once
// bf16/fp16 <-> fp32 in trident's CUDA kernels (device code for lib/kernels/*.cu only).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace trident::kernels {
namespace {  // each .cu file its own copy

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }

}  // namespace
}  // namespace trident::kernels
