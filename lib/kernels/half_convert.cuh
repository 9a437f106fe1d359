#pragma once
// bf16/fp16 <-> fp32 in trident's CUDA kernels, and the launchers' dispatch on HalfType (for
// lib/kernels/*.cu only).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/half_type.hpp"

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

// call(a value of the CUDA type `type` names): in a generic lambda, decltype(tag) is the type.
template <typename Call>
void with_type(HalfType type, Call&& call) {
  if (type == HalfType::bf16)
    call(__nv_bfloat16());
  else
    call(__half());
}

}  // namespace
}  // namespace trident::kernels
