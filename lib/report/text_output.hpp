#pragma once
// What the `trident report` writers share (study.cpp, goodput.cpp, sweep.cpp): XML escaping for
// SVG, CSV quoting, round axis steps, and writing the files out.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <cerrno>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/files.hpp"

namespace trident::report {

inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Text for a markdown table cell: a '|' would end the cell, a line break the row.
inline std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

// Round axis steps (1, 2, 5 x 10^k) with at most 8 ticks up to `top`.
inline double nice_step(double top) {
  double step = std::pow(10.0, std::floor(std::log10(top / 8)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (top / (m * step) <= 8) return m * step;
  return 10 * step;
}

// Writes each (file name, text) into out_dir (created), each through a temporary file and a
// rename, so a reader never sees half a file; returns the paths. BadInput naming what cannot be
// written; a file that cannot be written leaves none of them (no report.md of a set whose
// report.csv failed), nor the folders it made, and removes only temporary files of its own.
inline std::vector<std::string> write_text_files(const std::string& out_dir,
                                                 const std::vector<std::pair<std::string, std::string>>& files) {
  namespace fs = std::filesystem;
  std::error_code ec;  // the error_code forms throughout: a path error is bad input, not a fault
  if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
    throw BadInput(fmt::format("report: {} is a file, not a folder to write the report into", out_dir));
  MadeFolders made;
  if (const auto error = make_folders(out_dir, made)) {
    remove_made_folders(made);
    throw BadInput(fmt::format("report: cannot create {}: {}", out_dir, error.message()));
  }
  std::vector<std::string> paths, tmps;
  std::random_device random;  // (made before any file: it can throw)
  const auto give_up = [&](const std::string& why) {
    std::error_code ignored;
    for (const auto& tmp : tmps) fs::remove(tmp, ignored);
    remove_made_folders(made);
    throw BadInput(why);
  };
  for (const auto& [name, text] : files) {
    paths.push_back((fs::path(out_dir) / name).string());
    // A name nothing has, made only if new (a user's report.csv.tmp, another report's temporary
    // file into the same folder, a process of the same id in another container, are not this one's).
    int fd = -1;
    std::string tmp;
    for (int tries = 0; fd < 0 && tries < 100; ++tries) {
      tmp = fmt::format("{}.tmp.{}.{:08x}", paths.back(), static_cast<long>(getpid()), random());
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // (less the umask)
      if (fd < 0 && errno != EEXIST) break;
    }
    int reason = fd >= 0 ? 0 : errno;  // the system's, said with the path (a full disk, no permission)
    if (fd >= 0) {
      tmps.push_back(tmp);
      for (size_t done = 0; reason == 0 && done < text.size();) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n > 0) done += static_cast<size_t>(n);
        else if (n == 0) reason = EIO;
        else if (errno != EINTR) reason = errno;
      }
      if (::close(fd) != 0 && reason == 0) reason = errno;
    }
    const bool folder = fs::is_directory(paths.back(), ec);
    if (reason != 0 || folder)
      give_up(fmt::format("report: cannot write {}: {}", paths.back(),
                          folder ? "a folder has its name" : std::generic_category().message(reason)));
  }
  // Every file written before any replaces its old copy: one that cannot be written leaves none.
  for (size_t i = 0; i < paths.size(); ++i) {
    fs::rename(tmps[i], paths[i], ec);
    if (ec) give_up(fmt::format("report: cannot write {}: {}", paths[i], ec.message()));
  }
  return paths;
}

}  // namespace trident::report
