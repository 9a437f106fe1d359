#include "parallel/bucket_readiness.hpp"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace trident::parallel {

BucketReadiness::BucketReadiness(const optim::FlatParams& flat, std::vector<Bucket> buckets,
                                 std::function<void(size_t)> on_ready)
    : buckets_(std::move(buckets)), on_ready_(std::move(on_ready)) {
  bucket_of_param_.resize(flat.slots.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int64_t p = buckets_[b].first_param; p < buckets_[b].end_param; ++p) bucket_of_param_[static_cast<size_t>(p)] = b;
  pending_.resize(buckets_.size());
  for (size_t i = 0; i < flat.slots.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(flat.slots[i].param);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

BucketReadiness::~BucketReadiness() = default;

void BucketReadiness::arm() {
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].end_param - buckets_[b].first_param;
  next_ = 0;
  armed_ = true;
  counting_ = true;
}

void BucketReadiness::on_gradient(size_t param) {
  if (!armed_ || !counting_) return;
  --pending_[bucket_of_param_[param]];
  while (next_ < buckets_.size() && pending_[next_] == 0) on_ready_(next_++);
}

void BucketReadiness::flush() {
  if (!armed_) return;
  while (next_ < buckets_.size()) on_ready_(next_++);
  armed_ = false;
}

}  // namespace trident::parallel
