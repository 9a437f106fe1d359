// comm/cuda_runtime.hpp in a build without CUDA: a machine without GPUs.
#include "comm/cuda_runtime.hpp"

#include "core/error.hpp"

namespace trident::comm {

bool cuda_built() { return false; }
int cuda_visible_devices() { return 0; }
void cuda_set_device(int) { fatal_one("cuda_set_device: this trident was built without CUDA"); }
int cuda_multiprocessors(int) { return 0; }
std::string cuda_device_name(int) { return ""; }
std::string cuda_device_uuid(int) { return ""; }
int64_t cuda_total_memory_bytes(int) { return 0; }
int64_t cuda_peak_allocated_bytes(int) { return 0; }
int64_t cuda_reset_peak_allocated_bytes(int) { return 0; }
void cuda_synchronize(int) {}
void* cuda_current_stream(int) { return nullptr; }

}  // namespace trident::comm
