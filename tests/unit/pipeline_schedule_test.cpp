// Every schedule for pp <= 8, m <= 16 and (interleaved) v <= 4, simulated across all ranks
// together: each micro-batch gets exactly one forward and one backward (whole, or an input
// gradient followed later by a weight gradient) per virtual stage, every send meets its
// receive, nothing deadlocks (sends never block, receives wait for the matching send), and the
// activations alive at once are as each schedule promises. Then each schedule's simulated
// bubble against its closed form.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>

#include "parallel/pipeline_schedule.hpp"

using namespace trident::parallel;

namespace {

bool backward_done(OpKind k) { return k == OpKind::Backward || k == OpKind::BackwardWeight; }

void check_schedule(const std::string& name, const PipelineShape& shape) {
  const int pp = shape.pp, m = shape.micro_batches, v = shape.virtual_stages;
  const std::string where = name + " pp " + std::to_string(pp) + " m " + std::to_string(m) + " v " + std::to_string(v);
  std::vector<std::vector<ScheduleOp>> ops;
  for (int s = 0; s < pp; ++s) ops.push_back(make_schedule(name, shape, s));
  for (int s = 0; s < pp; ++s) {
    // Per (micro-batch, chunk): F, then B or Bi ... W, each once and in that order.
    std::map<std::pair<int, int>, std::string> done;
    int alive = 0, peak = 0;
    for (const auto& op : ops[s]) {
      auto& d = done[{op.micro, op.chunk}];
      switch (op.kind) {
        case OpKind::Forward: ASSERT_EQ(d, "") << where; d = "F"; peak = std::max(peak, ++alive); break;
        case OpKind::Backward: ASSERT_EQ(d, "F") << where; d = "FB"; break;
        case OpKind::BackwardInput: ASSERT_EQ(d, "F") << where; d = "FBi"; break;
        case OpKind::BackwardWeight: ASSERT_EQ(d, "FBi") << where; d = "FBiW"; break;
        default: break;
      }
      if (backward_done(op.kind)) --alive;
    }
    ASSERT_EQ(done.size(), static_cast<size_t>(m * v)) << where;
    for (const auto& [key, d] : done) EXPECT_TRUE(d == "FB" || d == "FBiW") << where << " micro " << key.first << ": " << d;
    if (name == "1f1b") {
      EXPECT_EQ(peak, std::min(pp - s, m)) << where << " stage " << s;
    }
    if (name == "gpipe") {
      EXPECT_EQ(peak, m) << where;
    }
    if (name == "interleaved" && v > 1) {
      EXPECT_EQ(peak, std::min((pp - s - 1) * 2 + (v - 1) * pp + 1, m * v)) << where;
    }
    if (name == "zb-h1") {
      EXPECT_LE(peak, std::min(pp, m)) << where << " stage " << s;  // 1F1B's first stage
    }
  }
  // Simulate: a rank advances while its next op can run. Sends are non-blocking (they post a
  // message); a receive needs the neighbour's matching send already posted. Activations go to
  // the next rank (from the last to rank 0's next chunk), gradients the other way.
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::multiset<std::tuple<int, int, int, int>> posted;  // (to rank, kind of receive, micro, chunk there)
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      while (next[s] < ops[s].size()) {
        const auto& op = ops[s][next[s]];
        if (op.kind == OpKind::SendActivation)
          posted.insert({(s + 1) % pp, static_cast<int>(OpKind::RecvActivation), op.micro, op.chunk + (s == pp - 1)});
        if (op.kind == OpKind::SendGradient)
          posted.insert({(s + pp - 1) % pp, static_cast<int>(OpKind::RecvGradient), op.micro, op.chunk - (s == 0)});
        if (op.kind == OpKind::RecvActivation || op.kind == OpKind::RecvGradient) {
          auto it = posted.find({s, static_cast<int>(op.kind), op.micro, op.chunk});
          if (it == posted.end()) break;  // blocked: waits for the neighbour
          posted.erase(it);
        }
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s) EXPECT_EQ(next[s], ops[s].size()) << where << " deadlocks at rank " << s;
  EXPECT_TRUE(posted.empty()) << where << ": a send nobody received";
}

template <typename F>
void for_every_shape(const std::string& name, F&& check) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m)
      for (int v = 1; v <= (name == "interleaved" ? 4 : 1); ++v)
        if (schedule_constraint(name, {pp, m, v}).empty()) check(PipelineShape{pp, m, v});
}

}  // namespace

TEST(Schedule, EveryScheduleRunsToTheEndForAllSizes) {
  for (const auto& name : schedule_names()) for_every_shape(name, [&](const PipelineShape& shape) { check_schedule(name, shape); });
}

TEST(Schedule, BubbleOfEachScheduleAgainstItsFormula) {
  // gpipe, 1f1b and interleaved reach their closed forms exactly when every op of a chunk takes
  // the same time; zb-h1 always beats 1f1b, never the paper's figure, and reaches it with as many
  // micro-batches as stages.
  for (const auto& name : schedule_names())
    for_every_shape(name, [&](const PipelineShape& shape) {
      const ScheduleFigures f = schedule_figures(name, shape);
      const std::string where = name + " pp " + std::to_string(shape.pp) + " m " + std::to_string(shape.micro_batches) +
                                " v " + std::to_string(shape.virtual_stages);
      if (name != "zb-h1") {
        EXPECT_NEAR(f.bubble, f.formula, 1e-9) << where;
        return;
      }
      const double one_f_one_b = schedule_formula("1f1b", shape);
      EXPECT_GE(f.bubble, schedule_formula("zb-h1", shape) - 1e-9) << where;
      if (shape.pp > 1) {
        EXPECT_LT(f.bubble, one_f_one_b - 1e-9) << where;
      }
      // At most p - 1 op times longer than the paper's figure; exactly it with m = p.
      const double p = shape.pp, m = shape.micro_batches;
      EXPECT_LE(f.bubble, 2 * (p - 1) / (3 * m + 2 * (p - 1)) + 1e-9) << where;
      // What a plan shows beside it: the paper's figure at m = p, the bound otherwise.
      EXPECT_LE(f.bubble, f.formula + 1e-9) << where;
      if (shape.micro_batches == shape.pp) {
        EXPECT_NEAR(f.bubble, f.formula, 1e-9) << where;
      } else {
        EXPECT_DOUBLE_EQ(f.formula, 2 * (p - 1) / (3 * m + 2 * (p - 1))) << where;
      }
    });
  EXPECT_DOUBLE_EQ(schedule_formula("1f1b", {4, 8, 1}), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(schedule_formula("interleaved", {4, 8, 2}), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(schedule_formula("zb-h1", {4, 8, 1}), 3.0 / 27.0);
}

TEST(Schedule, OneFOneBShape) {
  // pp 2, m 3, stage 0: warm-up F0, then F1 B0, F2 B1, then B2.
  const auto ops = one_f_one_b_schedule({2, 3, 1}, 0);
  std::vector<std::string> names;
  for (const auto& op : ops) names.push_back(to_string(op));
  EXPECT_EQ(names, (std::vector<std::string>{"F0", "send_act0", "F1", "send_act1", "recv_grad0", "B0", "F2",
                                             "send_act2", "recv_grad1", "B1", "recv_grad2", "B2"}));
}

TEST(Schedule, ZeroBubbleDefersWeightGradientsOnTheLastStage) {
  // pp 2, m 3, stage 1: each input gradient goes upstream at once; the weight gradients wait
  // for time the stage would otherwise spend waiting for its next forward's input.
  const auto ops = zero_bubble_h1_schedule({2, 3, 1}, 1);
  std::vector<std::string> names;
  for (const auto& op : ops) names.push_back(to_string(op));
  EXPECT_EQ(names, (std::vector<std::string>{"recv_act0", "F0", "Bi0", "send_grad0", "recv_act1", "F1", "Bi1",
                                             "send_grad1", "W0", "W1", "recv_act2", "F2", "Bi2", "send_grad2", "W2"}));
}

TEST(Schedule, ShapesASchedulerCannotTakeAreRefused) {
  EXPECT_NE(schedule_constraint("interleaved", {4, 6, 2}), "");  // 6 micro-batches over 4 stages
  EXPECT_EQ(schedule_constraint("interleaved", {4, 8, 2}), "");
  EXPECT_NE(schedule_constraint("1f1b", {4, 8, 2}), "");
  EXPECT_THROW(make_schedule("interleaved", {4, 6, 2}, 0), std::invalid_argument);
  EXPECT_THROW(make_schedule("round-robin", {2, 2, 1}, 0), std::invalid_argument);
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
  // An index past int (std::stoi faulted on it) is named as given, against the model's layers.
  EXPECT_EQ(parse_boundaries("2, 3000000000"), (std::vector<int64_t>{2, 3000000000}));
  try {
    cut_layers({1, 2, 3}, 2, parse_boundaries("3000000000"));
    ADD_FAILURE() << "a boundary past the model was accepted";
  } catch (const trident::BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.boundaries: 3000000000 must increase and lie in 1..2 (the model has 3 "
                                         "layers)"),
              std::string::npos)
        << e.what();
  }
}
