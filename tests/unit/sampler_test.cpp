#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/sampler.hpp"

using trident::data::GlobalSampler;

TEST(Sampler, PermutationIsSeededAndDiffersPerEpoch) {
  GlobalSampler a(1000, 100, 42), b(1000, 100, 42), c(1000, 100, 43);
  auto p0 = a.permutation(0);
  EXPECT_EQ(p0, b.permutation(0));  // every rank computes the same order
  EXPECT_NE(p0, a.permutation(1));
  EXPECT_NE(p0, c.permutation(0));
  auto sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
}

// For every dp and micro-batch size: the ranks' micro-batches are disjoint, together they are
// exactly the step's global batch, chunk by chunk in the same order as dp = 1 sees them.
TEST(Sampler, ShardsAreDisjointCoverTheGlobalBatchAndMatchEveryLayout) {
  const int64_t n = 997, global = 96;
  GlobalSampler sampler(n, global, 5);
  for (int64_t step : {0, 3, 10, 11, 25}) {
    const auto expected = sampler.global_batch_indices(step);
    for (int dp : {1, 2, 3, 4}) {
      for (int64_t micro : {1, 8, 12, 24, 32}) {
        if (global % (micro * dp) != 0) continue;
        const int64_t accumulation = global / (micro * dp);
        std::vector<int64_t> concatenated;
        for (int r = 0; r < dp; ++r)
          for (int64_t m = 0; m < accumulation; ++m) {
            const auto mb = sampler.micro_batch_indices(step, m, r, dp, micro);
            ASSERT_EQ(static_cast<int64_t>(mb.size()), micro);
            concatenated.insert(concatenated.end(), mb.begin(), mb.end());
          }
        EXPECT_EQ(concatenated, expected) << "step " << step << " dp " << dp << " micro " << micro;
        // The same micro-batch under dp = 1: chunk c of the global batch.
        if (dp > 1) {
          EXPECT_EQ(sampler.micro_batch_indices(step, 0, 1, dp, micro),
                    sampler.micro_batch_indices(step, accumulation, 0, 1, micro));
        }
      }
    }
  }
}

TEST(Sampler, AnEpochVisitsEachSampleAtMostOnce) {
  GlobalSampler sampler(1000, 64, 9);
  std::set<int64_t> seen;
  for (int64_t s = 0; s < sampler.steps_per_epoch(); ++s)
    for (auto i : sampler.global_batch_indices(s)) EXPECT_TRUE(seen.insert(i).second);
  EXPECT_EQ(seen.size(), static_cast<size_t>(sampler.steps_per_epoch() * 64));
  EXPECT_EQ(sampler.steps_per_epoch(), 15);
  // Step 15 starts epoch 1: a new order.
  EXPECT_EQ(sampler.epoch_of(15), 1);
  EXPECT_EQ(sampler.cursor_of(15), 15 * 64);
}

TEST(Sampler, EvenShareCoversContiguously) {
  for (int parts : {1, 2, 3, 7}) {
    int64_t next = 0;
    for (int p = 0; p < parts; ++p) {
      const auto r = trident::data::even_share(100, p, parts);
      EXPECT_EQ(r.begin, next);
      EXPECT_LE(r.end - r.begin, 100 / parts + 1);
      next = r.end;
    }
    EXPECT_EQ(next, 100);
  }
}
