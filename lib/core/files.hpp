#pragma once
// Files and folders a command writes: the folders it makes for its output, which it takes back
// when it is refused (bad input leaves nothing behind, not even the folders made for it, nor a
// changed time on the folder they were made in), probe files that leave no trace, and fsync.
#include <sys/stat.h>

#include <filesystem>
#include <system_error>
#include <vector>

namespace trident {

// What make_folders made: the folders, outermost first, and the times the folder it made the
// outermost in had before, and its modification time just after (put back when they are removed,
// unless something else changed that folder in between: a sibling task's folder, say).
struct MadeFolders {
  std::vector<std::filesystem::path> paths;
  bool parent_times_known = false;
  struct timespec parent_times[2] = {};
  struct timespec parent_mtime_after = {};
  nlink_t parent_links_after = 0;  // (a sibling folder made in the same clock tick adds a link)
};

// Makes `dir` and the folders above it that are missing, one at a time along the path as it is
// written (through its links and its ..: where the kernel resolves it), each folder made added to
// `made`, outermost first. An error leaves in `made` what was made before it.
std::error_code make_folders(const std::filesystem::path& dir, MadeFolders& made);

// Removes the folders in `made`, innermost first, those that are still empty, and when all are
// gone puts back the times of the folder they were made in (when nothing else changed it
// meanwhile); clears `made`.
void remove_made_folders(MadeFolders& made);

// The access and modification times of `path` (false when it cannot be read), and putting them
// back.
bool times_of(const std::filesystem::path& path, struct timespec times[2]);
void put_times_back(const std::filesystem::path& path, const struct timespec times[2]);

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
