#pragma once
// What the training loop asks of the CUDA runtime. Two implementations, one per build (CMake
// picks the file): comm/cuda_runtime.cpp in CUDA builds, comm/cuda_runtime_none.cpp in CPU
// builds, which answers as a machine without GPUs. Torch-free header.
#include <cstdint>
#include <string>

namespace trident::comm {

// True in a build with CUDA LibTorch (TRIDENT_CUDA).
bool cuda_built();
// CUDA devices this process sees (after CUDA_VISIBLE_DEVICES); 0 in a CPU build or without a
// usable driver.
int cuda_visible_devices();
// Makes device `index` this thread's current device: before any CUDA or NCCL call of the run,
// so that NCCL, the caching allocator and every stream live on the rank's own GPU.
void cuda_set_device(int index);
// The device's streaming multiprocessors, read once per device (trident's kernels size their
// grids by it on every layer's backward); 0 in a CPU build.
int cuda_multiprocessors(int index);
// "NVIDIA H100 80GB HBM3", or "" in a CPU build.
std::string cuda_device_name(int index);
// The device's UUID as nvidia-smi prints it ("GPU-8c0d7a1e-..."): the same physical GPU gives
// the same string in every process, whatever CUDA_VISIBLE_DEVICES renumbered; "" in a CPU build.
std::string cuda_device_uuid(int index);
// Bytes the device has in all, and the most the caching allocator had allocated on it at once
// since the start (report.json "memory", per rank); 0 in a CPU build.
int64_t cuda_total_memory_bytes(int index);
int64_t cuda_peak_allocated_bytes(int index);
// Starts that peak again from what is allocated now, and returns that (tests of a phase's peak).
int64_t cuda_reset_peak_allocated_bytes(int index);
// Waits for the device's work (timings at a step boundary); nothing in a CPU build.
void cuda_synchronize(int index);
// LibTorch's current stream on device `index` (a cudaStream_t), for launching trident's own
// kernels (kernels/) in order with LibTorch's; null in a CPU build.
void* cuda_current_stream(int index);

}  // namespace trident::comm
