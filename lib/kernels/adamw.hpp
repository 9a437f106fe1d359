#pragma once
// AdamW's update over flat fp32 buffers in one pass (optim/optimizer.cpp's AdamW on a GPU, unless
// TRIDENT_ADAMW_KERNEL=0). PyTorch's fused AdamW (at::_fused_adamw_) moved GPT-2 small's 124 M
// parameters at about half the H200's memory bandwidth (1.52 ms of a 32 ms step, 8 launches of its
// multi-tensor kernel for one flat buffer); this one reads each of the parameter, gradient and two
// moments once with 16-byte loads and writes them back, in one launch (benchmarks/README.md:
// 1.37 ms against 1.52 on the H200). The arithmetic is PyTorch's fused AdamW formula as its
// adam_math writes it, the settings in double (LibTorch 2.11's kernel, seen on the H200, seems to
// take 1 - beta2 in float: its exp_avg_sq came out 1.3e-5 relative lower at beta2 0.999).
// Torch-free header: kernels/adamw.cu in CUDA builds, kernels/none.cpp elsewhere.
#include <cstdint>

namespace trident::kernels {

// True where the kernel is compiled in (a CUDA build).
bool adamw_built();

struct AdamWSettings {
  double lr, beta1, beta2, weight_decay, eps;
};

// One AdamW update of the `n` elements of params, exp_avg and exp_avg_sq from grads (all fp32 on
// the GPU, of any alignment: 16-byte aligned buffers take the vector path). `step`: a device float,
// the steps taken including this one (the bias correction's t). `grad_divisor` (or null): a device
// float each gradient is divided by as it is read, and left so divided (PyTorch's grad_scale).
// `skip` (or null): a device float; 1 leaves every buffer untouched (PyTorch's found_inf).
// Asynchronous on `stream` (a cudaStream_t).
void adamw_step(float* params, float* grads, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWSettings& settings,
                const float* step, const float* grad_divisor, const float* skip, int device, void* stream);

// Updates adamw_step has launched in this process (tests check that a path ran it).
int64_t adamw_steps();

}  // namespace trident::kernels
