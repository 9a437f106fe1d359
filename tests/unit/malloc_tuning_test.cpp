// keep_freed_memory_in_process: a freed block of megabytes stays in the heap for the next step to
// reuse, instead of going back to the kernel; the user's own malloc settings are left alone.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "core/malloc_tuning.hpp"

namespace trident {
namespace {

TEST(MallocTuning, LeavesTheUsersMallocSettingsAlone) {
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072", 1), 0);
  keep_freed_memory_in_process();
  EXPECT_NE(malloc_setting().find("the environment's settings"), std::string::npos) << malloc_setting();
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
}

TEST(MallocTuning, AFreedBlockOfMegabytesStaysInTheHeap) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's: its heap statistics do not move";
#endif
  unsetenv("GLIBC_TUNABLES");
  unsetenv("MALLOC_MMAP_THRESHOLD_");
  unsetenv("MALLOC_TRIM_THRESHOLD_");
  keep_freed_memory_in_process();
  EXPECT_EQ(malloc_setting(), "malloc: freed blocks kept in the process (mmap threshold 32 MiB, trim threshold 256 MiB)");
  constexpr size_t kBlock = size_t{8} << 20;  // an activation of the main job's CNN at micro-batch 80
  const struct mallinfo2 before = mallinfo2();
  auto* block = static_cast<char*>(std::malloc(kBlock));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);
  // From the heap, not a mapping of its own (glibc's default above 128 KiB, before its threshold adapts).
  EXPECT_EQ(mallinfo2().hblkhd, before.hblkhd);
  std::free(block);
  // Freed, it stays in the process: no trim of the heap below 256 MiB free at its top.
  EXPECT_GE(mallinfo2().fordblks, before.fordblks + kBlock);
}

}  // namespace
}  // namespace trident
