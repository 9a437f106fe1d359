#pragma once
// The 16-bit floating-point types trident's CUDA kernels read and write (torch-free).
namespace trident::kernels {

enum class HalfType { bf16, fp16 };

}  // namespace trident::kernels
