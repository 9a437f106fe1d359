#pragma once
// run.output_dir is owned by one run at a time (README.md "What a run writes"). Two runs into
// one folder -- a deck submitted twice, a requeued job overlapping its predecessor -- would
// interleave their checkpoints, `latest`, metrics.jsonl and report.json. The first run holds a
// lock on <output_dir>/.trident-lock for its whole life; a second run is bad input (exit 2)
// naming the owner, before it writes anything.
//
// The lock is a POSIX record lock (fcntl, open-file-description F_OFD_SETLK where the kernel has
// it) on that file, held by rank 0's process: the kernel (or, on NFS, the lock manager) releases
// it when the process ends in any way, SIGKILL included, so a dead owner does not block the next
// run. A lost node's lock is the exception: the lock manager holds it until it gives up on that
// node (NFSv4 after its ~90 s lease, NFSv3 until the client reboots), so a requeued job that finds
// its own earlier lifetime's lock (or a chain link, its previous link's) waits a while
// (run.requeue_lock_wait_s) instead of failing. Record locks are what cluster file systems implement across nodes (NFSv3 via NLM,
// NFSv4, Lustre mounted with -o flock, GPFS/Spectrum Scale); flock(2) is node-local on some of
// them. Tested here on local ext4 and tmpfs. Where the file system refuses locks (ENOLCK,
// ENOSYS, EOPNOTSUPP), rank 0 warns and the run goes on unguarded. Mounts that keep locks
// node-local (NFS -o nolock or local_lock, Lustre -o localflock, BeeGFS without global locks)
// grant them: there a second run from another node is not refused.
//
// Every rank then reads the owner line back through its own path to the folder, and through the
// checkpoints folder when one is there already (a link to scratch): a rank on a node that sees
// another folder there (node-local scratch, a relative path under another working directory) is
// bad input at start-up, not a failed first save after the training.
#include <mpi.h>

#include "core/files.hpp"

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace trident::train {

class RunFolder {
 public:
  // Collective over `comm`: rank 0 creates `dir` if needed and takes the lock; every rank
  // throws BadInput when another live run owns the folder (or it cannot be created). A requeued
  // Slurm job finding the lock held by an earlier lifetime of the same job (its owner line names
  // the job and its restart count), or a chain link finding it held by the link before
  // (TRIDENT_CHAIN_PREVIOUS_JOB), waits up to `requeue_lock_wait_s` for it: that job is over, so
  // it is a failed node's lock the file system has not yet let go.
  // A stop signal (`stop_signal` set) during that wait throws StoppedBySignal on every rank.
  static std::unique_ptr<RunFolder> claim(const std::string& dir, MPI_Comm comm, double requeue_lock_wait_s,
                                          const std::atomic<int>& stop_signal);
  ~RunFolder();  // releases the lock
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  // Bad input found after claiming: take back what claim() created (the lock file it made,
  // the folders it made, when they hold nothing else), so bad input leaves nothing behind.
  // Rank 0 only; the others have nothing to undo.
  void abandon();

  const std::string& lock_path() const { return lock_path_; }
  // Rank 0: this run holds the folder's lock (false where the file system refused locks).
  bool locked() const { return wrote_owner_ && !unguarded_; }

 private:
  RunFolder() = default;
  // Rank 0: takes the lock, writes the owner; the refusal's message or "" (`stopped` says why when
  // a stop signal ended the wait for an earlier lifetime's lock).
  std::string lock(double requeue_lock_wait_s, const std::atomic<int>& stop_signal, std::string& stopped);
  void write_owner();  // rank 0: the owner line into the lock file (previous_owner_ keeps its text)
  // Ranks other than 0: "" when the lock file under this rank's path holds `owner` (rank 0's
  // line), else the bad-input message: this rank sees another folder under run.output_dir.
  std::string seen_elsewhere(const std::string& owner) const;
  // Rank 0: a probe file holding owner_ in the checkpoints folder when there is one already (a
  // link to other storage, an earlier run's); its path, or "" (no folder, or not written).
  std::string checkpoints_probe() const;
  // Ranks other than 0: "" when `probe` holds `owner`, else the bad-input message.
  std::string probe_unseen(const std::string& probe, const std::string& owner) const;
  std::string dir_, lock_path_;
  MadeFolders created_folders_;  // the folders claim() made
  bool created_lock_file_ = false;
  bool wrote_owner_ = false;     // this run holds the lock and wrote its owner line
  bool unguarded_ = false;       // the file system refused locks: the run goes on without one
  std::string previous_owner_;  // the lock file's text before that
  // The times of the lock file before this run wrote to it, and of the run folder around the lock
  // file's creation (put back by a refused start: it leaves no trace).
  struct timespec lock_times_[2] = {};
  bool lock_times_known_ = false;
  FolderChange lock_file_made_;
  std::string owner_;           // rank 0: the owner line it wrote ("" if it could not)
  int fd_ = -1;  // rank 0: the open, locked lock file
};

// The owner line written into the lock file: job id, host, pid, start time (UTC).
std::string owner_description();

}  // namespace trident::train
