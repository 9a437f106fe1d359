// comm/cuda_runtime.hpp in a CUDA build, over the CUDA runtime and LibTorch's caching allocator.
#include "comm/cuda_runtime.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "comm/cuda_check.hpp"

namespace trident::comm {

bool cuda_built() { return true; }

int cuda_visible_devices() {
  // No driver, or a node without GPUs: zero devices, not an error (auto then trains on the CPU).
  return static_cast<int>(c10::cuda::device_count());
}

void cuda_set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

int cuda_multiprocessors(int index) {
  static std::mutex lock;
  static std::map<int, int> known;
  const std::lock_guard<std::mutex> hold(lock);
  const auto found = known.find(index);
  if (found != known.end()) return found->second;
  int count = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, index));
  return known[index] = count;
}

std::string cuda_device_name(int index) {
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  return properties.name;
}

std::string cuda_device_uuid(int index) {
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  std::string text = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(properties.uuid.bytes[i]));
    text += hex;
  }
  return text;
}

int64_t cuda_total_memory_bytes(int index) {
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  return static_cast<int64_t>(properties.totalGlobalMem);
}

int64_t cuda_peak_allocated_bytes(int index) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE (all pools), in every LibTorch version
}

int64_t cuda_reset_peak_allocated_bytes(int index) {
  const auto device = static_cast<c10::DeviceIndex>(index);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].current;
}

void cuda_synchronize(int index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  CUDA_CHECK(cudaDeviceSynchronize());
}

void* cuda_current_stream(int index) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index)).stream();
}

}  // namespace trident::comm
