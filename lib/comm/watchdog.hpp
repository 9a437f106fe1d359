#pragma once
// Fail fast when a rank dies or stops making progress (README.md "When a rank dies or hangs"): without this a
// surviving rank waits forever in its next collective (MPICH has no timeout; srun does not kill
// the other tasks when one is SIGKILLed unless --kill-on-bad-exit).
//
// Every rank runs a thread that, on a duplicate of the run's communicator, sends a small
// heartbeat to every other rank (its progress: operations completed, the one it is blocked
// in, the step) and listens for theirs. The job is aborted (MPI_Abort, which also ends a
// stopped process), after one message naming the rank, its host and every rank's last
// completed operation, when
//   - a rank has sent no heartbeat for `timeout_s` (killed, crashed, SIGSTOPped, node gone), or
//   - this rank has been blocked in one operation for `timeout_s` and a live rank has made no
//     progress outside communication for as long (a stuck main thread), or every rank has
//     been blocked that long (mismatched collectives).
// The first rule holds from construction (a rank stopped during start-up), the other two once
// watch_progress() is called. The steady-state cost is one small message per peer per period
// (timeout / 10, at most 1 s).
#include <mpi.h>

#include <memory>

namespace trident::comm {

class Watchdog {
 public:
  // Collective over `comm`. timeout_s <= 0, one rank, or an MPI without MPI_THREAD_MULTIPLE:
  // disabled (no thread, no messages). It starts watching heartbeats only: a run's start-up has
  // phases where one rank works alone for long (the dataset scan of data.check_finite, timing
  // the layers) while the others wait, which the progress rules would take for a stuck rank.
  Watchdog(MPI_Comm comm, double timeout_s);
  // From now on also the progress rules (training: every rank communicates every step).
  void watch_progress();
  // Without stop(): ends the thread without waiting for the other ranks (an error path).
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Collective: once every rank got here, heartbeats stop and the communicator is freed.
  // A rank that dies before reaching it is still detected while the others wait.
  void stop();
  bool enabled() const;
  // CPU time the heartbeat thread has used (its whole cost to this rank's cores; 0 when
  // disabled). Final once stop() returned.
  double thread_cpu_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trident::comm
