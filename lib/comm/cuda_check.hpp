#pragma once
// CUDA_CHECK and NCCL_CHECK: like MPI_CHECK (core/error.hpp), a failing call becomes a Fault of
// this rank (fatal_one: rank, host, then file:line, the call and the library's own words). They
// live here, not in core/error.hpp, so that the CPU build never needs the CUDA headers; only the
// CUDA-only files (nccl_communicator.cpp, tests/gpu) include this one.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "core/error.hpp"

namespace trident {

[[noreturn]] inline void fail_cuda(cudaError_t code, const char* call, const char* file, int line) {
  fatal_one(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + cudaGetErrorName(code) +
            ": " + cudaGetErrorString(code));
}

// ncclGetErrorString says which kind of failure ("unhandled system error"); ncclGetLastError says
// what happened ("socket connect to 10.0.0.7 failed"). `comm` may be null (the last error of the
// calling thread, NCCL >= 2.13).
[[noreturn]] inline void fail_nccl(ncclResult_t code, ncclComm_t comm, const char* call, const char* file,
                                   int line) {
  const char* last = ncclGetLastError(comm);
  fatal_one(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + ncclGetErrorString(code) +
            (last && *last ? std::string(" (") + last + ")" : std::string()));
}

}  // namespace trident

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    const cudaError_t trident_cuda_rc_ = (call);                                               \
    if (trident_cuda_rc_ != cudaSuccess) ::trident::fail_cuda(trident_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define NCCL_CHECK(call)                                                                       \
  do {                                                                                         \
    const ncclResult_t trident_nccl_rc_ = (call);                                              \
    if (trident_nccl_rc_ != ncclSuccess)                                                       \
      ::trident::fail_nccl(trident_nccl_rc_, nullptr, #call, __FILE__, __LINE__);              \
  } while (0)
