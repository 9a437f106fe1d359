// Every schedule for pp <= 8 and m <= 16, simulated across all stages together: each
// micro-batch is forwarded then backwarded exactly once per stage, every send meets its
// receive, nothing deadlocks (sends never block, receives wait for the matching send), and
// 1F1B keeps at most pp - stage activations alive.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "parallel/pipeline_schedule.hpp"

using namespace trident::parallel;

namespace {

void check_schedule(const std::string& name, int pp, int m) {
  std::vector<std::vector<ScheduleOp>> ops;
  for (int s = 0; s < pp; ++s) ops.push_back(make_schedule(name, pp, m, s));
  // Per stage: forward and backward of each micro-batch once, forward first.
  for (int s = 0; s < pp; ++s) {
    std::map<int, int> forwards, backwards;
    int alive = 0, peak = 0;
    for (const auto& op : ops[s]) {
      if (op.kind == OpKind::Forward) {
        ASSERT_EQ(backwards[op.micro], 0) << name << " stage " << s << " backward before forward";
        ++forwards[op.micro];
        peak = std::max(peak, ++alive);
      }
      if (op.kind == OpKind::Backward) {
        ASSERT_EQ(forwards[op.micro], 1);
        ++backwards[op.micro];
        --alive;
      }
    }
    for (int i = 0; i < m; ++i) {
      EXPECT_EQ(forwards[i], 1);
      EXPECT_EQ(backwards[i], 1);
    }
    if (name == "1f1b") {
      EXPECT_LE(peak, pp - s) << "pp " << pp << " m " << m << " stage " << s;
    } else {
      EXPECT_EQ(peak, m);
    }
  }
  // Simulate: a stage advances while its next op can run. Sends are non-blocking (they post
  // a message); a receive needs the neighbour's matching send already posted.
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::set<std::tuple<int, int, int>> posted;  // (to stage, kind of receive, micro)
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      while (next[s] < ops[s].size()) {
        const auto& op = ops[s][next[s]];
        if (op.kind == OpKind::SendActivation) posted.insert({s + 1, static_cast<int>(OpKind::RecvActivation), op.micro});
        if (op.kind == OpKind::SendGradient) posted.insert({s - 1, static_cast<int>(OpKind::RecvGradient), op.micro});
        if (op.kind == OpKind::RecvActivation || op.kind == OpKind::RecvGradient) {
          auto it = posted.find({s, static_cast<int>(op.kind), op.micro});
          if (it == posted.end()) break;  // blocked: waits for the neighbour
          posted.erase(it);
        }
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s) EXPECT_EQ(next[s], ops[s].size()) << name << " deadlocks: pp " << pp << " m " << m;
  EXPECT_TRUE(posted.empty()) << "a send nobody received";
}

}  // namespace

TEST(Schedule, EveryScheduleRunsToTheEndForAllSizes) {
  for (const std::string name : {"gpipe", "1f1b"})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 16; ++m) check_schedule(name, pp, m);
}

TEST(Schedule, OneFOneBShape) {
  // pp 2, m 3, stage 0: warm-up F0, then F1 B0, F2 B1, then B2.
  const auto ops = one_f_one_b_schedule(2, 3, 0);
  std::vector<std::string> names;
  for (const auto& op : ops) names.push_back(to_string(op));
  EXPECT_EQ(names, (std::vector<std::string>{"F0", "send_act0", "F1", "send_act1", "recv_grad0", "B0", "F2",
                                             "send_act2", "recv_grad1", "B1", "recv_grad2", "B2"}));
  EXPECT_DOUBLE_EQ(expected_bubble_fraction(4, 8), 3.0 / 11.0);
}

#include "core/error.hpp"
#include "parallel/layer_cut.hpp"

TEST(StagePartition, BalancedByParametersOrExplicit) {
  // Layers 10, 10, 10, 30: two stages balance as {10,10,10} | {30}.
  EXPECT_EQ(cut_layers({10, 10, 10, 30}, 2, {}), (std::vector<int>{0, 3}));
  EXPECT_EQ(cut_layers({5, 5, 5, 5}, 4, {}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cut_layers({10, 10, 10, 30}, 2, {1}), (std::vector<int>{0, 1}));
  EXPECT_THROW(cut_layers({1, 2}, 3, {}), trident::BadInput);       // fewer layers than stages
  EXPECT_THROW(cut_layers({1, 2, 3}, 2, {3}), trident::BadInput);   // boundary past the last layer
  EXPECT_THROW(cut_layers({1, 2, 3}, 3, {1}), trident::BadInput);   // one boundary for three stages
}
