#pragma once
#include <chrono>

namespace trident {

// Wall-clock stopwatch; seconds as double.
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Adds the time of a scope to an accumulator.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& total) : total_(total) {}
  ~ScopedTimer() { total_ += watch_.seconds(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  double seconds() const { return watch_.seconds(); }  // so far

 private:
  double& total_;
  Stopwatch watch_;
};

}  // namespace trident
