#include "core/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace trident::log {

namespace {
std::atomic<int> g_rank{0};  // set on the main thread, read by every thread's lines
std::mutex g_mutex;
// bracket_this_threads_lines: set once, on the main thread, before the threads that write lines
// start; a line of another thread is not bracketed.
std::atomic<void (*)()> g_before{nullptr}, g_after{nullptr};
std::atomic<std::thread::id> g_bracketed_thread;

// Fault injection for the tests: TRIDENT_TEST_SLOW_PROGRESS_LINE_MS=N: each progress line
// ("epoch E/N | step ...") takes N ms more to write, as when stdout's file system stalls; said on stderr.
void slow_down_if_asked(const std::string& line) {
  static const char* slow = std::getenv("TRIDENT_TEST_SLOW_PROGRESS_LINE_MS");
  if (!slow || line.rfind("epoch ", 0) != 0 || line.find(" | step ") == std::string::npos) return;
  std::fprintf(stderr, "trident: test: a progress line slowed by %s ms (TRIDENT_TEST_SLOW_PROGRESS_LINE_MS)\n", slow);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(slow)));
}
}  // namespace

void set_rank(int rank) { g_rank = rank; }
int rank() { return g_rank; }

void bracket_this_threads_lines(void (*before)(), void (*after)()) {
  g_before = nullptr;  // (a line of another thread meanwhile is not bracketed)
  g_bracketed_thread = std::this_thread::get_id();
  g_after = after;
  g_before = before;
}

namespace {
// before() at construction and after() at destruction, on the bracketed thread.
class Bracket {
 public:
  Bracket() {
    auto* const before = g_before.load();
    after_ = g_after.load();
    if (!before || !after_ || std::this_thread::get_id() != g_bracketed_thread.load()) {
      after_ = nullptr;
      return;
    }
    before();
  }
  ~Bracket() {
    if (after_) after_();
  }
  Bracket(const Bracket&) = delete;
  Bracket& operator=(const Bracket&) = delete;

 private:
  void (*after_)() = nullptr;
};
}  // namespace

void write_line(const std::string& line, bool to_stderr) {
  const Bracket bracket;  // (waiting for another thread's line too: it may be the one stalled)
  std::lock_guard<std::mutex> lock(g_mutex);
  FILE* out = to_stderr ? stderr : stdout;
  slow_down_if_asked(line);
  std::fprintf(out, "[trident %d] %s\n", g_rank.load(), line.c_str());
  std::fflush(out);
}

}  // namespace trident::log
