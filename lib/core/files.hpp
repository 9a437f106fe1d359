#pragma once
// Files and folders a command writes: the folders it makes for its output, which it takes back
// when it is refused (bad input leaves nothing behind, not even the folders made for it, nor a
// changed time on the folder they were made in), probe files that leave no trace, and fsync.
#include <sys/stat.h>

#include <filesystem>
#include <system_error>
#include <vector>

namespace trident {

// A folder's times around one entry this process makes in it and may remove again (the folder
// made for a run, a run folder's lock file): put back after the removal only when nothing else
// changed the folder in between (its modification time and link count still the ones just after
// the entry was made: a sibling task's folder made in the same clock tick adds a link).
class FolderChange {
 public:
  void before(const std::filesystem::path& folder);  // just before the entry is made
  void after(bool made_a_folder);                     // just after (a folder adds a link)
  bool unchanged() const;                             // just before the entry is removed
  void put_back() const;                              // just after it is removed
 private:
  std::filesystem::path folder_;
  bool before_known_ = false, known_ = false;
  struct timespec times_[2] = {}, mtime_after_ = {};
  nlink_t links_before_ = 0, links_after_ = 0;
};

// What make_folders made: the folders, outermost first, and the times of the folder it made the
// outermost in.
struct MadeFolders {
  std::vector<std::filesystem::path> paths;
  FolderChange parent;
};

// Makes `dir` and the folders above it that are missing, one at a time along the path as it is
// written (through its links and its ..: where the kernel resolves it), each folder made added to
// `made`, outermost first. An error leaves in `made` what was made before it.
std::error_code make_folders(const std::filesystem::path& dir, MadeFolders& made);

// Removes the folders in `made`, innermost first, those that are still empty, and when all are
// gone puts back the times of the folder they were made in (FolderChange); clears `made`.
void remove_made_folders(MadeFolders& made);

// The access and modification times of a file or folder as they are at construction, put back at
// destruction: a probe file made and removed in a folder does not show as a change to it. Only
// for a folder no other process changes meanwhile (a run folder under this run's lock).
class TimesKept {
 public:
  explicit TimesKept(const std::filesystem::path& path);
  ~TimesKept();
  TimesKept(const TimesKept&) = delete;
  TimesKept& operator=(const TimesKept&) = delete;

 private:
  std::filesystem::path path_;
  bool known_ = false;
  struct timespec times_[2] = {};
};

// fsync(fd): true when done, or when the file system has no such call (EINVAL: nothing to do);
// errno tells why not otherwise.
bool sync_file(int fd);

}  // namespace trident
