// comm/node_gpu.hpp in a CUDA build: the driver API from libcuda.so.1, opened at run time. Linking
// the CUDA runtime instead would make `trident` need it (and a second copy of it in
// trident-torch, beside LibTorch's), and a login node without a driver must still plan.
#include "comm/node_gpu.hpp"

#include <dlfcn.h>

#include <cstddef>

namespace trident::comm {

namespace {

// The few driver entry points needed, by their C signatures (cuda.h: CUresult is an enum whose
// success is 0, CUdevice an int); the _v2 memory query is the 64-bit one.
using CuInit = int (*)(unsigned int flags);
using CuDeviceGetCount = int (*)(int* count);
using CuDeviceGet = int (*)(int* device, int ordinal);
using CuDeviceGetName = int (*)(char* name, int length, int device);
using CuDeviceTotalMem = int (*)(std::size_t* bytes, int device);

template <typename Function>
Function symbol(void* library, const char* name) {
  return reinterpret_cast<Function>(::dlsym(library, name));
}

}  // namespace

std::optional<NodeGpu> first_visible_gpu() {
  // Kept open: the driver is not meant to be unloaded, and LibTorch may use it in this process.
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return std::nullopt;
  const auto init = symbol<CuInit>(driver, "cuInit");
  const auto count = symbol<CuDeviceGetCount>(driver, "cuDeviceGetCount");
  const auto get = symbol<CuDeviceGet>(driver, "cuDeviceGet");
  const auto get_name = symbol<CuDeviceGetName>(driver, "cuDeviceGetName");
  const auto total_memory = symbol<CuDeviceTotalMem>(driver, "cuDeviceTotalMem_v2");
  if (!init || !count || !get || !get_name || !total_memory) return std::nullopt;
  int devices = 0, device = 0;
  if (init(0) != 0 || count(&devices) != 0 || devices < 1 || get(&device, 0) != 0) return std::nullopt;
  char name[256] = {};
  std::size_t bytes = 0;
  if (get_name(name, static_cast<int>(sizeof name) - 1, device) != 0 || total_memory(&bytes, device) != 0)
    return std::nullopt;
  return NodeGpu{name, static_cast<int64_t>(bytes)};
}

}  // namespace trident::comm
