#include <gtest/gtest.h>

#include <numeric>

#include "parallel/element_partition.hpp"

using trident::parallel::ElementPartition;

TEST(ElementPartition, UnevenRangesCoverTheBufferAndCountsAddUp) {
  const ElementPartition p(10, 4);  // 3, 3, 2, 2
  EXPECT_EQ(p.range(0).end - p.range(0).begin, 3);
  EXPECT_EQ(p.range(3).begin, 8);
  EXPECT_EQ(p.range(3).end, 10);
  // A bucket [2, 7) meets ranks 0 (2), 1 (3..5 -> 3) and 2 (6).
  EXPECT_EQ(p.counts(2, 7), (std::vector<int64_t>{1, 3, 1, 0}));
  const auto empty = p.intersect(2, 7, 3);
  EXPECT_EQ(empty.begin, empty.end);
  for (int64_t b = 0; b <= 10; ++b)
    for (int64_t e = b; e <= 10; ++e) {
      const auto c = p.counts(b, e);
      EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t{0}), e - b);
    }
}

