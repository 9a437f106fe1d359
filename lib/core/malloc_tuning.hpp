#pragma once
// glibc malloc tuned for a training loop. Torch-free and MPI-free.
#include <string>

namespace trident {

// Each step frees and allocates the same large blocks (activations, their gradients: megabytes).
// With glibc's defaults they go back to the kernel when freed (the heap's top trimmed past 128 KiB
// free, blocks above the mmap threshold unmapped) and are faulted in again, zeroed, page by page
// on the next step: on this project's 2-core VM a third of a CPU rank's time went to the kernel,
// and the main job took 57.6 s instead of 34.1 s. This keeps blocks below 32 MiB in the heap
// (M_MMAP_THRESHOLD) and trims the heap only once 256 MiB is free at its top (M_TRIM_THRESHOLD):
// the steady state reuses its memory, the peak is the same blocks. (A 64 MiB trim threshold lost
// the gain at micro-batch 256; 1 GiB OOM-killed tests/cli/memory_cap.sh's ZeRO-3 run under its
// 1100 MiB caps.) A glibc.malloc.* setting in GLIBC_TUNABLES, or MALLOC_MMAP_THRESHOLD_ /
// MALLOC_TRIM_THRESHOLD_, is the user's choice and is left alone.
// Called first thing in main, before the large allocations.
void keep_freed_memory_in_process();
// What keep_freed_memory_in_process did, for the run's log.
const std::string& malloc_setting();

}  // namespace trident
