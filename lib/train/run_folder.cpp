#include "train/run_folder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include "comm/world.hpp"
#include "core/error.hpp"
#include "core/files.hpp"
#include "core/host.hpp"
#include "core/log.hpp"

namespace trident::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".trident-lock";

// The whole file (a refused start puts an earlier run's lock file's text back as it was).
std::string read_file(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = pread(fd, buffer, sizeof(buffer), static_cast<off_t>(text.size()))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) text.append(buffer, static_cast<size_t>(n));
  return text;
}

std::string read_owner(int fd) {
  std::string text = read_file(fd);
  text = text.substr(0, text.find('\n'));  // the owner line (a user's notes after it are not the message's)
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text.empty() ? "an owner that has not written its name yet (it is starting)" : text;
}

// A Slurm job's id and its lifetime (SLURM_RESTART_COUNT: 0, then 1 after the first requeue), as
// this process has them or as an owner line names them ("job 4242 (restart 1), host ..."; no id
// outside Slurm).
struct JobLifetime {
  std::string id;
  long restart = 0;
};

JobLifetime this_job() {
  const char* id = std::getenv("SLURM_JOB_ID");
  const char* restart = std::getenv("SLURM_RESTART_COUNT");
  return {id ? id : "", restart ? std::strtol(restart, nullptr, 10) : 0};
}

JobLifetime job_of_owner(const std::string& owner) {
  if (owner.rfind("job ", 0) != 0 || owner.rfind("job (none", 0) == 0) return {};
  const size_t end = owner.find_first_of(", ", 4);
  JobLifetime job{owner.substr(4, end == std::string::npos ? std::string::npos : end - 4), 0};
  constexpr const char* kRestart = " (restart ";
  if (end != std::string::npos && owner.compare(end, std::strlen(kRestart), kRestart) == 0)
    job.restart = std::strtol(owner.c_str() + end + std::strlen(kRestart), nullptr, 10);
  return job;
}

// The folder is locked by a job Slurm has ended: an earlier lifetime of this very job (Slurm runs
// one lifetime of a job at a time and starts the next only once the earlier one is gone), or the
// link before this one of a jobs/restart_chain.sh chain (TRIDENT_CHAIN_PREVIOUS_JOB; this link
// depends on it with afterany). Its lock is then a dead process's, held for it by the file system
// because its node failed (NFSv4 until the lease expires, about 90 s; NFSv3 until that client
// reboots; Lustre until it evicts the client). What it is, or "" for another job's lock.
std::string ended_holder(const std::string& owner) {
  const JobLifetime mine = this_job(), theirs = job_of_owner(owner);
  if (theirs.id.empty()) return "";
  if (theirs.id == mine.id && theirs.restart < mine.restart) return "an earlier lifetime of this job";
  const char* previous_link = std::getenv("TRIDENT_CHAIN_PREVIOUS_JOB");
  if (previous_link && theirs.id == previous_link) return "the previous link of this job chain";
  return "";
}

// The checkpoints folder a run saves into, when it is there already (a link to scratch, a folder
// of an earlier run): it must take a new file, and `latest` in it must be a file. Found only at
// the first save, the run's work so far would be lost, and a requeued job would repeat it. (A
// folder still to be made goes where the lock file was just written.)
std::string checkpoints_problem(const std::string& dir, bool locked) {
  const fs::path folder = fs::path(dir) / "checkpoints";
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(folder, ec)) && !fs::exists(folder, ec))
    return fmt::format("run.output_dir {}: its checkpoints folder {} is a link to {}, which does not exist (make it, "
                       "or remove the link)",
                       dir, folder.string(), fs::read_symlink(folder, ec).string());
  if (!fs::is_directory(folder, ec)) return "";  // made at the first save (unusable_entry checks its kind)
  const auto latest = fs::symlink_status(folder / "latest", ec);
  if (fs::exists(latest) && latest.type() != fs::file_type::regular)
    return fmt::format("run.output_dir {}: {} is not a regular file; the run names its newest checkpoint there (move "
                       "it away)",
                       dir, (folder / "latest").string());
  std::optional<TimesKept> unchanged;  // (by the probe made and removed in it; no one else writes there meanwhile)
  if (locked) unchanged.emplace(folder);
  const std::string probe = (folder / fmt::format(".trident-write-test.{}", static_cast<long>(getpid()))).string();
  unlink(probe.c_str());  // one a run killed here left, under a process id used again (containers)
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return fmt::format("run.output_dir {}: cannot write into its checkpoints folder {} ({}); a run there could save "
                       "nothing: make it writable, or give the run another run.output_dir",
                       dir, folder.string(), std::strerror(errno));
  close(fd);
  unlink(probe.c_str());
  return "";
}

// A run writes these names into its folder; one of the wrong kind there (a file where the
// checkpoints folder goes) would fail only at the first save or the end, after the run's work.
std::string unusable_entry(const std::string& dir, bool locked) {
  const std::pair<const char*, fs::file_type> expected[] = {{"checkpoints", fs::file_type::directory},
                                                            {"metrics.jsonl", fs::file_type::regular},
                                                            {"evaluations.jsonl", fs::file_type::regular},
                                                            {"report.json", fs::file_type::regular},
                                                            {"goodput.jsonl", fs::file_type::regular}};
  for (const auto& [name, type] : expected) {
    std::error_code ec;
    const auto status = fs::status(fs::path(dir) / name, ec);
    if (fs::exists(status) && status.type() != type)
      return fmt::format("run.output_dir {}: {} there is not a {}; the run writes its {} there (move it away, or "
                         "give the run another run.output_dir)",
                         dir, name, type == fs::file_type::directory ? "folder" : "regular file",
                         type == fs::file_type::directory ? "checkpoints" : "records");
  }
  return checkpoints_problem(dir, locked);
}

}  // namespace

std::string owner_description() {
  const JobLifetime job = this_job();
  const std::time_t now = std::time(nullptr);
  char when[32] = {0};
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return fmt::format("job {}{}, host {}, pid {}, started {}", job.id.empty() ? "(none: not under SLURM)" : job.id,
                     !job.id.empty() && job.restart > 0 ? fmt::format(" (restart {})", job.restart) : "", host_name(),
                     static_cast<long>(getpid()), when);
}

std::unique_ptr<RunFolder> RunFolder::claim(const std::string& dir, MPI_Comm comm, double requeue_lock_wait_s,
                                            const std::atomic<int>& stop_signal) {
  std::unique_ptr<RunFolder> folder(new RunFolder());
  folder->dir_ = dir;
  folder->lock_path_ = (fs::path(dir) / kLockName).string();
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string error, stopped;
  if (rank == 0) {
    if (const auto ec = make_folders(dir, folder->created_folders_)) {
      error = fmt::format("run.output_dir {}: cannot create it ({})", dir, ec.message());
    } else {
      error = folder->lock(requeue_lock_wait_s, stop_signal, stopped);
      if (error.empty() && stopped.empty()) error = unusable_entry(dir, folder->locked());
    }
    // Refused: what this attempt created goes again (the owner's files are untouched).
    if (!error.empty() || !stopped.empty()) folder->abandon();
  }
  // A stop signal while rank 0 waited for an earlier lifetime's lock: nothing was trained or
  // written, and a later start may find the lock freed (exit 3: the job scripts requeue).
  if (const std::string why = comm::broadcast(comm, stopped); !why.empty()) throw StoppedBySignal(why);
  comm::agree_or_throw(comm, error);
  // Every rank saves its pieces of each checkpoint into this folder: one that sees another
  // folder under the name (node-local scratch, a relative path under another working directory)
  // would fail at the first save, after the work it was to keep. Found now, it is bad input.
  const std::string owner = comm::broadcast(comm, rank == 0 ? folder->owner_ : "");
  try {
    comm::agree_or_throw(comm, rank == 0 || owner.empty() ? "" : folder->seen_elsewhere(owner));
    // The same for a checkpoints folder already there, which can be a link to other storage
    // (scratch): rank 0 leaves its owner line in a probe file there for the others to read.
    std::optional<TimesKept> unchanged;  // (the checkpoints folder, by the probe made and removed in it)
    if (rank == 0 && !owner.empty() && folder->locked()) unchanged.emplace(fs::path(dir) / "checkpoints");
    const std::string probe = comm::broadcast(comm, rank == 0 && !owner.empty() ? folder->checkpoints_probe() : "");
    if (!probe.empty()) {
      const std::string error = comm::first_error(comm, rank == 0 ? "" : folder->probe_unseen(probe, owner));
      if (rank == 0) unlink(probe.c_str());
      if (!error.empty()) throw BadInput(error);
    }
  } catch (...) {
    if (rank == 0) folder->abandon();
    throw;
  }
  return folder;
}

namespace {

std::string text_of(const std::string& path) {
  std::string text;
  if (const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    text = read_file(fd);
    close(fd);
  }
  return text;
}

}  // namespace

std::string RunFolder::seen_elsewhere(const std::string& owner) const {
  const std::string seen = text_of(lock_path_);
  if (seen == owner) return "";
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  return fmt::format(
      "run.output_dir {}: {} does not see the folder rank 0 claimed ({} {}): every rank writes its part of each "
      "checkpoint there, so it must be one folder that every node shares, not node-local storage{}",
      dir_, who(), lock_path_,
      seen.empty() ? "is not there" : "has another run's owner line in it",
      fs::path(dir_).is_absolute() ? "" : fmt::format(" (a relative path: this rank resolves it in {})", cwd));
}

std::string RunFolder::checkpoints_probe() const {
  const fs::path folder = fs::path(dir_) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return "";  // made at the first save, inside the folder just checked
  const std::string probe =
      (folder / fmt::format(".trident-seen.{}.{}", host_name(), static_cast<long>(getpid()))).string();
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "";  // (unusable_entry found it writable; nothing to compare otherwise)
  const bool written = write(fd, owner_.data(), owner_.size()) == static_cast<ssize_t>(owner_.size()) &&
                       sync_file(fd);
  close(fd);
  if (written) return probe;
  unlink(probe.c_str());
  return "";
}

std::string RunFolder::probe_unseen(const std::string& probe, const std::string& owner) const {
  if (text_of(probe) == owner) return "";
  std::error_code ec;
  const fs::path folder = fs::path(dir_) / "checkpoints";
  const fs::path target = fs::read_symlink(folder, ec);
  return fmt::format(
      "run.output_dir {}: {} does not see the checkpoints folder rank 0 writes into ({}{}: rank 0's probe {} is not "
      "there): every rank writes its part of each checkpoint there, so it must be storage that every node shares, "
      "not node-local",
      dir_, who(), folder.string(), ec ? "" : fmt::format(", a link to {}", target.string()),
      fs::path(probe).filename().string());
}

std::string RunFolder::lock(double requeue_lock_wait_s, const std::atomic<int>& stop_signal, std::string& stopped) {
  const auto start = std::chrono::steady_clock::now();
  const auto waited_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  bool waiting = false;
  // A few tries: the file locked can have been unlinked in between by a run that abandoned the
  // folder (bad input) -- a lock on a deleted file guards nothing.
  for (int attempt = 0; attempt < 5;) {
    std::error_code ec;
    created_lock_file_ = !fs::exists(lock_path_, ec);
    if (created_lock_file_) lock_file_made_.before(dir_);
    // O_CLOEXEC: a child process must not hold on to the lock after this run ends.
    fd_ = open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return fmt::format("run.output_dir {}: cannot create its lock file {} ({})", dir_, lock_path_,
                         std::strerror(errno));
    if (created_lock_file_) lock_file_made_.after(/*made_a_folder=*/false);
    struct flock whole {};
    whole.l_type = F_WRLCK;
    whole.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
    // An open-file-description lock (Linux >= 3.15) belongs to this open file, not to the
    // process: a second claim from the same process is refused too, and closing some other
    // descriptor of the file does not drop it. Older kernels: the classic process lock.
    int rc = fcntl(fd_, F_OFD_SETLK, &whole);
    if (rc != 0 && errno == EINVAL) rc = fcntl(fd_, F_SETLK, &whole);
    if (rc != 0 && (errno == EACCES || errno == EAGAIN)) {
      const std::string owner = read_owner(fd_);
      const std::string holder = ended_holder(owner);
      if (holder.empty())
        return fmt::format(
            "run.output_dir {} is in use by another run: {} (lock {}). Two runs in one folder would mix their "
            "checkpoints and reports: wait for that run to end, or give this one another run.output_dir",
            dir_, owner, lock_path_);
      if (waited_s() >= requeue_lock_wait_s)
        return fmt::format(
            "run.output_dir {} is still locked by {} ({}; lock {}) after {:.0f} s (run.requeue_lock_wait_s = {:g}). "
            "Slurm has ended that job, so its node has failed or hangs, and the file system still holds its lock. If "
            "that node is down for good, remove {} and start the job again",
            dir_, holder, owner, lock_path_, waited_s(), requeue_lock_wait_s, lock_path_);
      if (!waiting)
        log::warn("run.output_dir {} is locked by {} ({}), which Slurm has ended: its node failed, and the file "
                  "system frees its lock only after a while. Waiting up to {:g} s for it (run.requeue_lock_wait_s)",
                  dir_, holder, owner, requeue_lock_wait_s);
      waiting = true;
      close(fd_);
      fd_ = -1;
      for (int tick = 0; tick < 10 && stop_signal.load() == 0; ++tick) usleep(50 * 1000);
      if (stop_signal.load() != 0) {
        stopped = fmt::format("stopped by a signal while waiting for the lock of run.output_dir {} (held by {}); "
                              "nothing was written",
                              dir_, holder);
        return "";
      }
      continue;
    }
    if (rc != 0) {
      write_owner();  // the folder check of claim() reads it
      log::warn("run.output_dir {}: its file system does not support locks ({}); a second run started into this "
                "folder would not be refused",
                dir_, std::strerror(errno));
      unguarded_ = true;
      return "";
    }
    struct stat held {}, named {};
    if (fstat(fd_, &held) == 0 && stat(lock_path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      write_owner();
      if (waiting) log::info("run.output_dir {}: its lock was freed after {:.1f} s; this run holds it", dir_, waited_s());
      return "";
    }
    close(fd_);  // the file was replaced under us: lock the one the path names now
    fd_ = -1;
    ++attempt;
  }
  return fmt::format("run.output_dir {}: its lock file {} keeps being replaced; is another run starting there?",
                     dir_, lock_path_);
}

void RunFolder::write_owner() {
  struct stat st {};  // (before the text is read, which can set its access time)
  if ((lock_times_known_ = fstat(fd_, &st) == 0)) {
    lock_times_[0] = st.st_atim;
    lock_times_[1] = st.st_mtim;
  }
  previous_owner_ = read_file(fd_);
  wrote_owner_ = true;
  owner_ = owner_description() + "\n";
  // fsync: ranks on other nodes read it next (an NFS client sends an open file's writes to the
  // server only at close or fsync).
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, owner_.data(), owner_.size(), 0) != static_cast<ssize_t>(owner_.size()) ||
      !sync_file(fd_)) {
    log::warn("run.output_dir {}: could not write the owner into {} ({})", dir_, lock_path_, std::strerror(errno));
    owner_.clear();  // nothing for the other ranks to compare
  }
}

void RunFolder::abandon() {
  std::error_code ec;
  // The run folder's times go back only for a lock file this run made and removed there under its
  // lock, when nothing else changed the folder since.
  const bool folder_unchanged = created_lock_file_ && wrote_owner_ && !unguarded_ && lock_file_made_.unchanged();
  if (created_lock_file_ && (wrote_owner_ || unguarded_)) {
    fs::remove(lock_path_, ec);  // made by this run and still locked by it: no one else uses it
  } else if (wrote_owner_ && !unguarded_) {  // an earlier run's lock file: its text as it was (unlocked, it may be a live run's)
    if (ftruncate(fd_, 0) != 0 ||
        pwrite(fd_, previous_owner_.data(), previous_owner_.size(), 0) != static_cast<ssize_t>(previous_owner_.size()))
      log::warn("{}: could not restore its previous text ({})", lock_path_, std::strerror(errno));
    else if (lock_times_known_)
      futimens(fd_, lock_times_);
  }
  if (folder_unchanged) lock_file_made_.put_back();
  lock_file_made_ = FolderChange();
  lock_times_known_ = false;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  created_lock_file_ = wrote_owner_ = unguarded_ = false;
  remove_made_folders(created_folders_);
}

RunFolder::~RunFolder() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace trident::train
