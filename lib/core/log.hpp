#pragma once
// Logging with a rank prefix. info() prints on rank 0 only (what a SLURM log should show
// once); info_all() prints on every rank. Lines are flushed: SLURM logs are read live.
#include <fmt/format.h>

#include <string>

namespace trident::log {

void set_rank(int rank);
int rank();
void write_line(const std::string& line, bool to_stderr);
// The lines the calling thread (the main thread) writes from now on are bracketed by `before` and
// `after` (the watchdog's file I/O, comm/progress.hpp): under Slurm, stdout and stderr go to a log
// on a shared file system, and a write stalls with it once the pipes on the way are full.
// (nullptr, nullptr) ends it.
void bracket_this_threads_lines(void (*before)(), void (*after)());

template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (rank() == 0) write_line(fmt::format(format, std::forward<Args>(args)...), false);
}
template <typename... Args>
void info_all(fmt::format_string<Args...> format, Args&&... args) {
  write_line(fmt::format(format, std::forward<Args>(args)...), false);
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (rank() == 0) write_line("warning: " + fmt::format(format, std::forward<Args>(args)...), true);
}

}  // namespace trident::log
