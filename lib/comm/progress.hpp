#pragma once
// What this process's main thread is doing, for the watchdog (comm/watchdog.hpp): how many
// communication operations it has completed, which one it is blocked in and since when, and
// the training step. The main thread writes these atomics; the watchdog thread reads them.
// Cost: two clock reads and a few relaxed stores per operation.
#include <atomic>
#include <cstdint>

namespace trident::comm {

enum class Op : int32_t { none = 0, all_reduce, reduce_scatter, all_gather, broadcast, send, recv, barrier, shutdown };
const char* op_name(Op op);

struct Progress {
  std::atomic<int64_t> completed{0};  // operations completed by this process
  std::atomic<int32_t> last_op{0};    // the most recent one (Op)
  std::atomic<int32_t> current_op{0}; // the one the main thread is blocked in; Op::none outside
  std::atomic<int64_t> since_ns{0};   // when the current one started, or the last one ended
  std::atomic<int64_t> step{0};       // optimizer steps completed
  std::atomic<int32_t> file_io{0};    // FileIoScopes the main thread is inside
};

// The watchdog gives a rank in file I/O this many times run.fail_timeout_s before it calls it
// stuck: a shared file system stalls I/O for minutes (an NFS server failover, a Lustre recovery),
// and a job aborted for that loses its training since the last checkpoint.
constexpr int kFileIoTimeoutFactor = 20;

Progress& progress();
int64_t monotonic_ns();

// Records an operation that completed without blocking (a test() that found it done).
void note_completed(Op op);

// The main thread is inside a blocking communication operation for the scope's lifetime. One
// inside another (a helper that tracks its own collective, called within a tracked operation)
// leaves the outer one as it is: clearing it at its end would show the rest of the outer wait as
// computing.
class OpScope {
 public:
  explicit OpScope(Op op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  Op op_;
  bool nested_ = false;
};

// The main thread reads or writes files for the scope's lifetime (rank 0's records, a checkpoint,
// the training data): it may stall there with the file system (kFileIoTimeoutFactor). Nests,
// and holds blocking operations inside (a checkpoint's collectives). The outermost scope restarts
// the main thread's clock where it begins and ends (since_ns, stored before file_io as OpScope
// stores it before current_op): the stall is timed from its start, and the computing after it
// from its end, not from the last operation before it (a stall of minutes, then a step's compute,
// read as minutes of computing).
inline void begin_file_io() {
  auto& p = progress();
  if (p.file_io.load(std::memory_order_relaxed) == 0) p.since_ns.store(monotonic_ns(), std::memory_order_relaxed);
  p.file_io.fetch_add(1, std::memory_order_release);
}
inline void end_file_io() {
  auto& p = progress();
  if (p.file_io.load(std::memory_order_relaxed) == 1) p.since_ns.store(monotonic_ns(), std::memory_order_relaxed);
  p.file_io.fetch_sub(1, std::memory_order_release);
}
// A log line of the main thread (core/log.hpp): file I/O, which leaves the main thread's clock as
// it was unless the line stalled. A line takes microseconds; restarting the clock at each would
// hide a rank that logs while it computes alone for longer than run.fail_timeout_s.
constexpr int64_t kLogLineStallNs = 10000000;  // 10 ms
inline thread_local int64_t t_line_started_ns = 0, t_line_clock_ns = 0;
inline void begin_log_line() {
  t_line_clock_ns = progress().since_ns.load(std::memory_order_relaxed);
  t_line_started_ns = monotonic_ns();
  begin_file_io();
}
inline void end_log_line() {
  end_file_io();
  if (monotonic_ns() - t_line_started_ns < kLogLineStallNs)
    progress().since_ns.store(t_line_clock_ns, std::memory_order_relaxed);
}
class FileIoScope {
 public:
  FileIoScope() { begin_file_io(); }
  ~FileIoScope() { end_file_io(); }
  FileIoScope(const FileIoScope&) = delete;
  FileIoScope& operator=(const FileIoScope&) = delete;
};

}  // namespace trident::comm
