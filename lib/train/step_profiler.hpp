#pragma once
// A trace of a few training steps for finding where a step's time goes: LibTorch's Kineto
// profiler (host operators and, on the GPU, every kernel and copy) over the steps that
// TRIDENT_PROFILE_STEPS = "FIRST:COUNT" names (0-based step numbers), written as a Chrome trace
// to <output_dir>/profile_rank<R>.json (chrome://tracing, Perfetto, benchmarks/profile_summary.py).
// Off when the variable is unset. Builds whose LibTorch lacks Kineto warn once and trace nothing.
#include <cstdint>
#include <string>

namespace trident::train {

class StepProfiler {
 public:
  // cuda_index: the rank's GPU, -1 on the CPU.
  StepProfiler(const std::string& output_dir, int rank, int cuda_index);
  // Around each step: starts the trace before FIRST, writes it after FIRST + COUNT - 1.
  void before_step(int64_t step);
  void after_step(int64_t step);
  // A trace still open (the run ended or was stopped inside the range) is written here.
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

 private:
  int cuda_index_;
  int64_t first_ = -1, count_ = 0;
  std::string path_;
  bool active_ = false;
  void finish();
};

}  // namespace trident::train
