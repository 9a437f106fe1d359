#include <gtest/gtest.h>

#include "parallel/buckets.hpp"

using trident::parallel::assign_buckets;

TEST(Buckets, ContiguousFromTheLastParameterAndWithinCap) {
  const std::vector<int64_t> numels{10, 20, 30, 40, 50, 5};
  const auto buckets = assign_buckets(numels, 4, 4 * 60);  // cap: 60 elements
  // From the end: {50,5} = 55, {40} (40+30 > 60), {10,20,30} = 60 (the cap is inclusive).
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].first_param, 4);
  EXPECT_EQ(buckets[0].end_param, 6);
  EXPECT_EQ(buckets[0].offset, 100);
  EXPECT_EQ(buckets[0].numel, 55);
  EXPECT_EQ(buckets[1].first_param, 3);
  EXPECT_EQ(buckets[1].end_param, 4);
  EXPECT_EQ(buckets[2].first_param, 0);
  EXPECT_EQ(buckets[2].end_param, 3);
  EXPECT_EQ(buckets[2].offset, 0);
  EXPECT_EQ(buckets[2].numel, 60);
  // Together the buckets cover every parameter exactly once.
  int64_t covered = 0;
  for (const auto& b : buckets) {
    covered += b.numel;
    EXPECT_LE(b.numel * 4, 4 * 60);
  }
  EXPECT_EQ(covered, 155);
}

TEST(Buckets, OversizedParameterGetsItsOwnBucket) {
  const auto buckets = assign_buckets({5, 1000, 5}, 4, 400);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[1].first_param, 1);
  EXPECT_EQ(buckets[1].end_param, 2);
  EXPECT_EQ(buckets[1].numel, 1000);
}

TEST(Buckets, LargeCapGivesOneBucket) {
  const auto buckets = assign_buckets({3, 4, 5}, 4, 25 << 20);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].offset, 0);
  EXPECT_EQ(buckets[0].numel, 12);
}
