#include "optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace trident::optim {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind != "cosine") return lr;
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps - 1);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(span));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace trident::optim
