#include "comm/watchdog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <time.h>  // clock_gettime(CLOCK_THREAD_CPUTIME_ID)
#include <vector>

#include "comm/progress.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::comm {

const char* op_name(Op op) {
  switch (op) {
    case Op::none: return "none";
    case Op::all_reduce: return "all_reduce";
    case Op::reduce_scatter: return "reduce_scatter";
    case Op::all_gather: return "all_gather";
    case Op::broadcast: return "broadcast";
    case Op::send: return "send";
    case Op::recv: return "recv";
    case Op::barrier: return "barrier";
    case Op::shutdown: return "shutdown barrier";
  }
  return "?";
}

Progress& progress() {
  static Progress p;
  return p;
}

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void note_completed(Op op) {
  auto& p = progress();
  p.completed.fetch_add(1, std::memory_order_relaxed);
  p.last_op.store(static_cast<int32_t>(op), std::memory_order_relaxed);
  p.since_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

// The watchdog thread reads current_op (acquire) before since_ns, and current_op is stored
// (release) after since_ns: it never pairs a state with the time of an earlier one (which on a
// weakly ordered CPU, aarch64, could read as blocked or computing for longer than the timeout).
OpScope::OpScope(Op op) : op_(op) {
  auto& p = progress();
  nested_ = p.current_op.load(std::memory_order_relaxed) != 0;  // (only the main thread stores it)
  if (nested_) return;
  p.since_ns.store(monotonic_ns(), std::memory_order_relaxed);
  p.current_op.store(static_cast<int32_t>(op), std::memory_order_release);
}

OpScope::~OpScope() {
  if (nested_) return;
  note_completed(op_);  // since_ns first: "computing since" is never read with the operation's start
  progress().current_op.store(0, std::memory_order_release);
}

namespace {

constexpr int kTag = 1;

// One heartbeat: what the sender's main thread was doing when it sent it.
struct Beat {
  int64_t completed = 0, last_op = 0, current_op = 0;
  int64_t state_ms = 0;  // blocked in current_op for this long; outside an operation: since the last one
  int64_t step = 0;
  int64_t file_io = 0;  // outside an operation, inside a FileIoScope (reading or writing files)
};
constexpr int kBeatWords = sizeof(Beat) / sizeof(int64_t);

Beat snapshot(int64_t now) {
  const auto& p = progress();
  Beat b;
  b.completed = p.completed.load(std::memory_order_relaxed);
  b.last_op = p.last_op.load(std::memory_order_relaxed);
  // Both states before the time they were stored after (comm/progress.hpp).
  b.file_io = p.file_io.load(std::memory_order_acquire) > 0 ? 1 : 0;
  b.current_op = p.current_op.load(std::memory_order_acquire);
  b.state_ms = (now - p.since_ns.load(std::memory_order_relaxed)) / 1000000;
  b.step = p.step.load(std::memory_order_relaxed);
  return b;
}

// MPI failures on the watchdog thread cannot be thrown to anyone: say so and end the job.
void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  std::fprintf(stderr, "trident: error: %s: fail-fast watchdog: %s failed (code %d)\n", who().c_str(), call, rc);
  abort_all_ranks(kExitFault);
}

}  // namespace

struct Watchdog::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double timeout_s = 0;
  int64_t timeout_ns = 0, period_ns = 0;
  std::vector<std::string> hosts;
  std::vector<Beat> outgoing, incoming, heard;  // per peer
  std::vector<int64_t> heard_ns;                // per peer: when its last beat arrived
  std::vector<MPI_Request> sends, recvs;
  std::atomic<bool> quit{false};
  std::atomic<bool> progress_rules{false};  // watch_progress()
  std::atomic<double> cpu_seconds{0};  // the thread's own CPU time, updated as it runs
  std::thread thread;
  bool stopped = false;

  void post_recv(int peer) {
    check_mpi(MPI_Irecv(&incoming[static_cast<size_t>(peer)], kBeatWords, MPI_INT64_T, peer, kTag, comm,
                        &recvs[static_cast<size_t>(peer)]),
              "MPI_Irecv");
  }

  // The thread's body. Nothing can be thrown to anyone from here: a failure is said and ends the job.
  void loop() {
    try {
      beat_and_check_until_quit();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trident: error: %s: fail-fast watchdog: %s\n", who().c_str(), e.what());
      abort_all_ranks(kExitFault);
    } catch (...) {
      std::fprintf(stderr, "trident: error: %s: fail-fast watchdog failed\n", who().c_str());
      abort_all_ranks(kExitFault);
    }
  }

  void beat_and_check_until_quit() {
    int64_t next_send = 0;
    const auto nap = std::chrono::nanoseconds(period_ns / 4);
    while (!quit.load()) {
      const int64_t now = monotonic_ns();
      if (now >= next_send) {
        const Beat beat = snapshot(now);
        for (int p = 0; p < size; ++p) {
          if (p == rank) continue;
          auto& request = sends[static_cast<size_t>(p)];
          int done = 1;
          // A beat still in flight (a stopped peer drains nothing) is not followed by another.
          if (request != MPI_REQUEST_NULL) check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
          if (!done) continue;
          outgoing[static_cast<size_t>(p)] = beat;
          check_mpi(MPI_Isend(&outgoing[static_cast<size_t>(p)], kBeatWords, MPI_INT64_T, p, kTag, comm, &request),
                    "MPI_Isend");
        }
        next_send = now + period_ns;
      }
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        int done = 0;
        check_mpi(MPI_Test(&recvs[static_cast<size_t>(p)], &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (!done) continue;
        heard[static_cast<size_t>(p)] = incoming[static_cast<size_t>(p)];
        heard_ns[static_cast<size_t>(p)] = now;
        post_recv(p);
      }
      check(monotonic_ns());
      cpu_seconds.store(thread_cpu_now(), std::memory_order_relaxed);
      std::this_thread::sleep_for(nap);
    }
    cpu_seconds.store(thread_cpu_now(), std::memory_order_relaxed);
  }

  static double thread_cpu_now() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }

  // The rank's state: this rank's now, another's as its last heartbeat said.
  std::string describe(int r, int64_t now) const {
    const bool self = r == rank;
    const Beat b = self ? snapshot(now) : heard[static_cast<size_t>(r)];
    std::string text = fmt::format("  rank {} on {}: step {}, {} operations completed (last: {}), ", r,
                                   hosts[static_cast<size_t>(r)], b.step, b.completed,
                                   op_name(static_cast<Op>(b.last_op)));
    const double state = static_cast<double>(b.state_ms) / 1e3;
    text += b.current_op != 0 ? fmt::format("blocked in {} for {:.1f} s", op_name(static_cast<Op>(b.current_op)), state)
            : b.file_io      ? fmt::format("in file I/O for {:.1f} s", state)
                             : fmt::format("computing for {:.1f} s", state);
    text += self ? " (this rank, now)"
                 : fmt::format(" (its last heartbeat, {:.1f} s ago)",
                               static_cast<double>(now - heard_ns[static_cast<size_t>(r)]) / 1e9);
    return text;
  }

  [[noreturn]] void abort_job(const std::string& what, int64_t now) {
    std::string message = fmt::format("trident: error: {}: fail-fast watchdog (run.fail_timeout_s = {}): {}; aborting "
                                      "the job. Last completed operation of every rank:\n",
                                      who(), timeout_s, what);
    for (int r = 0; r < size; ++r) message += describe(r, now) + "\n";
    std::fputs(message.c_str(), stderr);
    abort_all_ranks(kExitFault);
  }

  void check(int64_t now) {
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const int64_t silent = now - heard_ns[static_cast<size_t>(p)];
      if (silent > timeout_ns)
        abort_job(fmt::format("rank {} on {} stopped responding: no heartbeat for {:.1f} s (killed, crashed, stopped "
                              "or its node is unreachable)",
                              p, hosts[static_cast<size_t>(p)], static_cast<double>(silent) / 1e9),
                  now);
    }
    if (!progress_rules.load(std::memory_order_relaxed)) return;
    const auto& mine = progress();
    const auto current = mine.current_op.load(std::memory_order_acquire);
    const int64_t waited = now - mine.since_ns.load(std::memory_order_relaxed);
    if (current == 0 || waited <= timeout_ns) return;
    // Blocked too long: on whom? A live rank that has not communicated for as long is stuck; one
    // in file I/O is given kFileIoTimeoutFactor times as long (a file system's stall).
    std::string stuck, stuck_in_io;
    bool all_blocked = true;
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const Beat& b = heard[static_cast<size_t>(p)];
      const int64_t state_ns = b.state_ms * 1000000 + (now - heard_ns[static_cast<size_t>(p)]);
      std::string& list = b.file_io ? stuck_in_io : stuck;
      if (b.current_op == 0 && state_ns > (b.file_io ? kFileIoTimeoutFactor * timeout_ns : timeout_ns))
        list += fmt::format("{}rank {} on {}", list.empty() ? "" : ", ", p, hosts[static_cast<size_t>(p)]);
      if (b.current_op == 0 || state_ns <= timeout_ns) all_blocked = false;
    }
    const double waited_s = static_cast<double>(waited) / 1e9;
    if (!stuck.empty())
      abort_job(fmt::format("{} made no progress for more than {} s outside communication while this rank waited "
                            "{:.1f} s in {}",
                            stuck, timeout_s, waited_s, op_name(static_cast<Op>(current))),
                now);
    if (!stuck_in_io.empty())
      abort_job(fmt::format("{} has been in file I/O for more than {} s ({} x run.fail_timeout_s: its file system "
                            "hangs?) while this rank waited {:.1f} s in {}",
                            stuck_in_io, kFileIoTimeoutFactor * timeout_s, kFileIoTimeoutFactor, waited_s,
                            op_name(static_cast<Op>(current))),
                now);
    if (all_blocked)
      abort_job(fmt::format("every rank has been blocked in communication for more than {} s: the ranks wait for "
                            "each other (mismatched operations)",
                            timeout_s),
                now);
  }

  // Ends this rank's part without waiting for anyone: cancel what is posted, forget what is sent.
  void release_requests() {
    for (auto& r : recvs)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
    for (auto& s : sends)
      if (s != MPI_REQUEST_NULL) MPI_Request_free(&s);
  }
};

Watchdog::Watchdog(MPI_Comm comm, double timeout_s) {
  int size = 1, level = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_CHECK(MPI_Query_thread(&level));
  // The decision depends only on values every rank shares, so all ranks make the same one.
  if (timeout_s <= 0 || size < 2) return;
  if (level != MPI_THREAD_MULTIPLE) {
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    if (rank == 0)
      log::warn("run.fail_timeout_s = {} asks for the fail-fast watchdog, but this MPI library gives threads level "
                "{}, not MPI_THREAD_MULTIPLE: the watchdog is off, and a rank that dies or hangs can leave the "
                "others waiting until the job's time limit (Cray MPICH: export MPICH_MAX_THREAD_SAFETY=multiple)",
                timeout_s,
                level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
                : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
                : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
                                                 : "unknown");
    return;
  }
  impl_ = std::make_unique<Impl>();
  auto& d = *impl_;
  MPI_CHECK(MPI_Comm_dup(comm, &d.comm));
  MPI_CHECK(MPI_Comm_rank(d.comm, &d.rank));
  d.size = size;
  d.timeout_s = timeout_s;
  d.timeout_ns = static_cast<int64_t>(timeout_s * 1e9);
  d.period_ns = std::clamp<int64_t>(d.timeout_ns / 10, 10000000, 1000000000);
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int length = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &length));
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_CHECK(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                          d.comm));
  for (int r = 0; r < size; ++r) d.hosts.emplace_back(&names[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  const auto n = static_cast<size_t>(size);
  d.outgoing.resize(n);
  d.incoming.resize(n);
  d.heard.resize(n);
  d.heard_ns.assign(n, monotonic_ns());
  // A process that has communicated through no tracked operation yet has been "computing" since
  // now, not since the clock's zero.
  int64_t never = 0;
  progress().since_ns.compare_exchange_strong(never, monotonic_ns());
  d.sends.assign(n, MPI_REQUEST_NULL);
  d.recvs.assign(n, MPI_REQUEST_NULL);
  for (int p = 0; p < size; ++p)
    if (p != d.rank) d.post_recv(p);
  // The main thread's log lines are file I/O too (a Slurm log on a stalled shared file system).
  log::bracket_this_threads_lines(begin_log_line, end_log_line);
  d.thread = std::thread([&d] { d.loop(); });
}

void Watchdog::watch_progress() {
  if (impl_) impl_->progress_rules = true;
}

bool Watchdog::enabled() const { return impl_ != nullptr; }

double Watchdog::thread_cpu_seconds() const { return impl_ ? impl_->cpu_seconds.load() : 0.0; }

void Watchdog::stop() {
  if (!impl_ || impl_->stopped) return;
  auto& d = *impl_;
  {
    OpScope scope(Op::shutdown);  // still watched: a rank that never arrives is reported
    MPI_CHECK(MPI_Barrier(d.comm));
  }
  d.quit = true;
  d.thread.join();
  log::bracket_this_threads_lines(nullptr, nullptr);  // (no one watches the clock any more)
  // Every peer still has a receive posted for this rank, so the last beats complete; after the
  // second barrier no beat is on its way and the posted receives can be cancelled.
  MPI_CHECK(MPI_Waitall(static_cast<int>(d.sends.size()), d.sends.data(), MPI_STATUSES_IGNORE));
  MPI_CHECK(MPI_Barrier(d.comm));
  d.release_requests();
  for (int pending = 1; pending;) {  // a beat that arrived after its receive completed
    MPI_Status status;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kTag, d.comm, &pending, &status));
    if (!pending) break;
    Beat sink;
    MPI_CHECK(MPI_Recv(&sink, kBeatWords, MPI_INT64_T, status.MPI_SOURCE, kTag, d.comm, MPI_STATUS_IGNORE));
  }
  MPI_CHECK(MPI_Comm_free(&d.comm));
  d.stopped = true;
}

Watchdog::~Watchdog() {
  if (!impl_ || impl_->stopped) return;
  impl_->quit = true;
  impl_->thread.join();
  log::bracket_this_threads_lines(nullptr, nullptr);
  impl_->release_requests();
  MPI_Comm_free(&impl_->comm);
}

}  // namespace trident::comm
