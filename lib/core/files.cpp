#include "core/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cerrno>

namespace trident {

namespace fs = std::filesystem;

namespace {
bool times_and_links_of(const fs::path& path, struct timespec times[2], nlink_t& links) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  times[0] = st.st_atim;
  times[1] = st.st_mtim;
  links = st.st_nlink;
  return true;
}
bool same_time(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}
}  // namespace

bool times_of(const fs::path& path, struct timespec times[2]) {
  nlink_t links = 0;
  return times_and_links_of(path, times, links);
}

void put_times_back(const fs::path& path, const struct timespec times[2]) {
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}

std::error_code make_folders(const fs::path& dir, MadeFolders& made) {
  std::error_code ec;
  const fs::path whole = fs::absolute(dir, ec);
  if (ec) return ec;
  fs::path p;
  for (const auto& part : whole) {
    p /= part;
    if (part.empty() || p == whole.root_path()) continue;  // (a trailing separator, the root)
    struct timespec before[2] = {}, after[2] = {};
    nlink_t links_before = 0, links_after = 0;
    const bool first = made.paths.empty() && times_and_links_of(p.parent_path(), before, links_before);
    if (::mkdir(p.c_str(), 0777) == 0) {
      // Known when this mkdir alone changed the folder (one link more: no sibling made meanwhile).
      if (first && times_and_links_of(p.parent_path(), after, links_after) && links_after == links_before + 1) {
        made.parent_times_known = true;
        std::copy(before, before + 2, made.parent_times);
        made.parent_mtime_after = after[1];
        made.parent_links_after = links_after;
      }
      made.paths.push_back(p);
    } else if (const int error = errno; error != EEXIST && !fs::is_directory(p, ec)) {  // (an automount: stat mounts it)
      return {error, std::generic_category()};
    }
  }
  if (!fs::is_directory(whole, ec)) return ec ? ec : std::make_error_code(std::errc::not_a_directory);
  return {};
}

void remove_made_folders(MadeFolders& made) {
  std::error_code ec;
  bool all = true;
  for (auto p = made.paths.rbegin(); p != made.paths.rend(); ++p) {  // (only when empty)
    const bool outermost = std::next(p) == made.paths.rend();
    struct timespec now[2] = {};
    nlink_t links = 0;
    // The folder it is in, changed by nothing but this process since: its times go back.
    const bool unchanged = outermost && all && made.parent_times_known &&
                           times_and_links_of(p->parent_path(), now, links) &&
                           same_time(now[1], made.parent_mtime_after) && links == made.parent_links_after;
    all = fs::remove(*p, ec) && all;
    if (unchanged && all) put_times_back(p->parent_path(), made.parent_times);
  }
  made.paths.clear();
  made.parent_times_known = false;
}

TimesKept::TimesKept(const fs::path& path) : path_(path) { known_ = times_of(path, times_); }

TimesKept::~TimesKept() {
  if (known_) put_times_back(path_, times_);
}

bool sync_file(int fd) { return ::fsync(fd) == 0 || errno == EINVAL; }

}  // namespace trident
