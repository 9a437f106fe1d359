#include "train/step_profiler.hpp"

#include <torch/version.h>

#include <cstdlib>
#include <exception>
#include <set>
#include <string>

#include "comm/cuda_runtime.hpp"
#include "core/log.hpp"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace trident::train {

StepProfiler::StepProfiler(const std::string& output_dir, int rank, int cuda_index) : cuda_index_(cuda_index) {
  const char* spec = std::getenv("TRIDENT_PROFILE_STEPS");
  if (!spec || !*spec) return;
  const std::string text(spec);
  char* end = nullptr;
  first_ = std::strtoll(spec, &end, 10);
  count_ = 1;
  bool parsed = end != spec;
  if (parsed && *end == ':') {
    const char* count_text = end + 1;
    count_ = std::strtoll(count_text, &end, 10);
    parsed = end != count_text;
  }
  if (!parsed || *end != '\0' || first_ < 0 || count_ < 1) {
    log::warn("TRIDENT_PROFILE_STEPS='{}' is not FIRST:COUNT (step numbers from 0, COUNT >= 1): no trace", text);
    first_ = -1;
    return;
  }
  path_ = output_dir + "/profile_rank" + std::to_string(rank) + ".json";
#if TORCH_VERSION_MAJOR < 2
  log::warn("TRIDENT_PROFILE_STEPS: this LibTorch ({}) is built without the Kineto profiler API used here: no trace",
            TORCH_VERSION);
  first_ = -1;
#endif
}

void StepProfiler::before_step(int64_t step) {
  if (step != first_) return;
#if TORCH_VERSION_MAJOR >= 2
  using torch::profiler::impl::ActivityType;
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda_index_ >= 0) activities.insert(ActivityType::CUDA);  // CUPTI only where there is a GPU
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/true);
  torch::autograd::profiler::prepareProfiler(config, activities);  // Kineto's set-up: enabling without it crashes
  torch::autograd::profiler::enableProfiler(config, activities);
  active_ = true;
#endif
}

void StepProfiler::after_step(int64_t step) {
  if (active_ && step == first_ + count_ - 1) finish();
}

StepProfiler::~StepProfiler() {
  try {
    if (active_) finish();
  } catch (const std::exception& e) {
    log::warn("TRIDENT_PROFILE_STEPS: the trace could not be written to {}: {}", path_, e.what());
  }
}

void StepProfiler::finish() {
#if TORCH_VERSION_MAJOR >= 2
  // The last step's kernels finish inside the trace, not after it.
  if (cuda_index_ >= 0) comm::cuda_synchronize(cuda_index_);
  auto result = torch::autograd::profiler::disableProfiler();
  result->save(path_);
  active_ = false;
  log::info("profile of steps from {} written to {}", first_ + 1, path_);
#endif
}

}  // namespace trident::train
