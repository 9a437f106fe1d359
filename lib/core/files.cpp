#include "core/files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace trident {

namespace fs = std::filesystem;

std::error_code make_folders(const fs::path& dir, std::vector<fs::path>& made) {
  std::error_code ec;
  const fs::path whole = fs::absolute(dir, ec);
  if (ec) return ec;
  fs::path p;
  for (const auto& part : whole) {
    p /= part;
    if (part.empty() || p == whole.root_path()) continue;  // (a trailing separator, the root)
    if (::mkdir(p.c_str(), 0777) == 0)
      made.push_back(p);
    else if (const int error = errno; error != EEXIST && !fs::is_directory(p, ec))  // (an automount: stat mounts it)
      return {error, std::generic_category()};
  }
  if (!fs::is_directory(whole, ec)) return ec ? ec : std::make_error_code(std::errc::not_a_directory);
  return {};
}

void remove_made_folders(std::vector<fs::path>& made) {
  std::error_code ec;
  for (auto p = made.rbegin(); p != made.rend(); ++p) fs::remove(*p, ec);  // (only when empty)
  made.clear();
}

bool sync_file(int fd) { return ::fsync(fd) == 0 || errno == EINVAL; }

}  // namespace trident
