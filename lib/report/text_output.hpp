#pragma once
// What the `trident report` writers share (study.cpp, goodput.cpp, sweep.cpp): XML escaping for
// SVG, CSV quoting, round axis steps, and writing the files out.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
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
  const auto give_up = [&](const std::string& why) {
    std::error_code ignored;
    for (const auto& tmp : tmps) fs::remove(tmp, ignored);
    remove_made_folders(made);
    throw BadInput(why);
  };
  for (const auto& [name, text] : files) {
    paths.push_back((fs::path(out_dir) / name).string());
    // A name nothing has (a user's file or folder named report.csv.tmp is not this one's).
    std::string tmp = fmt::format("{}.tmp.{}", paths.back(), static_cast<long>(getpid()));
    for (int n = 1; fs::exists(fs::symlink_status(tmp, ec)); ++n)
      tmp = fmt::format("{}.tmp.{}.{}", paths.back(), static_cast<long>(getpid()), n);
    std::ofstream out(tmp);
    if (out.is_open()) tmps.push_back(tmp);
    out << text;
    out.close();
    const bool folder = fs::is_directory(paths.back(), ec);
    if (!out || folder)
      give_up(fmt::format("report: cannot write {}{}", paths.back(), folder ? ": a folder has its name" : ""));
  }
  // Every file written before any replaces its old copy: one that cannot be written leaves none.
  for (size_t i = 0; i < paths.size(); ++i) {
    fs::rename(tmps[i], paths[i], ec);
    if (ec) give_up(fmt::format("report: cannot write {}: {}", paths[i], ec.message()));
  }
  return paths;
}

}  // namespace trident::report
