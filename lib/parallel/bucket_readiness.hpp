#pragma once
// Tells a gradient strategy when backward has produced every gradient of a bucket, through
// post-hooks on the parameters' gradient accumulators (LibTorch 1.13 has no
// post-accumulate-grad hooks; this works on 1.13 and 2.x alike).
#include <functional>
#include <memory>
#include <vector>

#include "optim/flat_params.hpp"
#include "parallel/buckets.hpp"

namespace torch::autograd { struct Node; }

namespace trident::parallel {

class BucketReadiness {
 public:
  // `on_ready(b)` runs once per armed backward for each bucket, strictly in bucket order:
  // collectives must be issued in the same order on every rank.
  BucketReadiness(const optim::FlatParams& flat, std::vector<Bucket> buckets, std::function<void(size_t)> on_ready);
  ~BucketReadiness();
  BucketReadiness(const BucketReadiness&) = delete;
  BucketReadiness& operator=(const BucketReadiness&) = delete;

  void arm();    // the next backward's gradients are to be handed on (and counted)
  // Armed, but this backward's gradients do not count (an interleaved pipeline's backward of a
  // chunk whose last backward of the step is still to come).
  void set_counting(bool counting) { counting_ = counting; }
  void flush();  // after backward: buckets with parameters that got no gradient, in order; disarms
  bool armed() const { return armed_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void on_gradient(size_t param);
  std::vector<Bucket> buckets_;
  std::function<void(size_t)> on_ready_;
  std::vector<size_t> bucket_of_param_;
  std::vector<int64_t> pending_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // the params hold them weakly
  size_t next_ = 0;
  bool armed_ = false, counting_ = true;
};

}  // namespace trident::parallel
