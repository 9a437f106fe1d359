#include "train/step_profiler.hpp"

#include <torch/version.h>

#include <cstdlib>
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
  const auto colon = text.find(':');
  first_ = std::atoll(text.substr(0, colon).c_str());
  count_ = colon == std::string::npos ? 1 : std::atoll(text.substr(colon + 1).c_str());
  if (first_ < 0 || count_ < 1) {
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
  if (!active_ || step != first_ + count_ - 1) return;
#if TORCH_VERSION_MAJOR >= 2
  // The last step's kernels finish inside the trace, not after it.
  if (cuda_index_ >= 0) comm::cuda_synchronize(cuda_index_);
  auto result = torch::autograd::profiler::disableProfiler();
  result->save(path_);
  active_ = false;
  log::info("profile of steps {}..{} written to {}", first_ + 1, first_ + count_, path_);
#endif
}

}  // namespace trident::train
