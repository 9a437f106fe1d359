#pragma once
// Learning rate by step: linear warmup from 0, then constant or cosine down to min_lr.
#include <cstdint>
#include <string>

namespace trident::optim {

struct LrSchedule {
  std::string kind = "constant";  // constant | cosine
  double lr = 1e-3, min_lr = 0.0;
  int64_t warmup_steps = 0, total_steps = 1;
  double at(int64_t step) const;  // step counted from 0
};

}  // namespace trident::optim
