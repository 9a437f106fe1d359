#include "core/malloc_tuning.hpp"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace trident {

namespace {

std::string& setting() {
  static std::string text = "malloc: glibc's defaults";
  return text;
}

}  // namespace

void keep_freed_memory_in_process() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables && std::strstr(tunables, "glibc.malloc.")) || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    setting() = "malloc: the environment's settings (GLIBC_TUNABLES or MALLOC_*_THRESHOLD_)";
    return;
  }
  // Setting either threshold turns glibc's dynamic adjustment of both off: set both. 32 MiB is
  // the mmap threshold glibc's own adjustment stops at: larger blocks (a model's flat buffers, a
  // checkpoint's host copy) are mapped and returned as before.
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 256 << 20) != 1) return;
  setting() = "malloc: freed blocks kept in the process (mmap threshold 32 MiB, trim threshold 256 MiB)";
}

const std::string& malloc_setting() { return setting(); }

}  // namespace trident
