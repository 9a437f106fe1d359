#include "core/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>

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
void put_times_back(const fs::path& path, const struct timespec times[2]) {
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}
}  // namespace

void FolderChange::before(const fs::path& folder) {
  folder_ = folder;
  known_ = false;
  before_known_ = times_and_links_of(folder_, times_, links_before_);
}

void FolderChange::after(bool made_a_folder) {
  struct timespec now[2] = {};
  known_ = before_known_ && times_and_links_of(folder_, now, links_after_) &&
           links_after_ == links_before_ + (made_a_folder ? 1 : 0);
  mtime_after_ = now[1];
}

bool FolderChange::unchanged() const {
  struct timespec now[2] = {};
  nlink_t links = 0;
  return known_ && times_and_links_of(folder_, now, links) && same_time(now[1], mtime_after_) && links == links_after_;
}

void FolderChange::put_back() const {
  if (known_) put_times_back(folder_, times_);
}

std::error_code make_folders(const fs::path& dir, MadeFolders& made) {
  std::error_code ec;
  const fs::path whole = fs::absolute(dir, ec);
  if (ec) return ec;
  fs::path p;
  for (const auto& part : whole) {
    p /= part;
    if (part.empty() || p == whole.root_path()) continue;  // (a trailing separator, the root)
    const bool first = made.paths.empty();
    if (first) made.parent.before(p.parent_path());
    if (::mkdir(p.c_str(), 0777) == 0) {
      if (first) made.parent.after(/*made_a_folder=*/true);
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
    const bool unchanged = std::next(p) == made.paths.rend() && all && made.parent.unchanged();  // (the outermost)
    all = fs::remove(*p, ec) && all;
    if (unchanged && all) made.parent.put_back();
  }
  made = MadeFolders();
}

TimesKept::TimesKept(const fs::path& path) : path_(path) {
  nlink_t links = 0;
  known_ = times_and_links_of(path, times_, links);
}

TimesKept::~TimesKept() {
  if (known_) put_times_back(path_, times_);
}

bool sync_file(int fd) { return ::fsync(fd) == 0 || errno == EINVAL; }

}  // namespace trident
