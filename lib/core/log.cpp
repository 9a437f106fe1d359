#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace trident::log {

namespace {
std::atomic<int> g_rank{0};  // set on the main thread, read by every thread's lines
std::mutex g_mutex;
}  // namespace

void set_rank(int rank) { g_rank = rank; }
int rank() { return g_rank; }

void write_line(const std::string& line, bool to_stderr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* out = to_stderr ? stderr : stdout;
  std::fprintf(out, "[trident %d] %s\n", g_rank.load(), line.c_str());
  std::fflush(out);
}

}  // namespace trident::log
