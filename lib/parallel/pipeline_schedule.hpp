#pragma once
// Pipeline schedules as data: for one stage, the ordered list of what it does with each
// micro-batch in one optimizer step. Pure functions, no MPI: tests simulate all stages together.
#include <string>
#include <vector>

namespace trident::parallel {

enum class OpKind { RecvActivation, Forward, SendActivation, RecvGradient, Backward, SendGradient };

struct ScheduleOp {
  OpKind kind;
  int micro;
  bool operator==(const ScheduleOp& o) const { return kind == o.kind && micro == o.micro; }
};

// GPipe: every forward, then every backward (micro-batches in order both times).
std::vector<ScheduleOp> gpipe_schedule(int pp, int micro_batches, int stage);
// 1F1B: pp - stage - 1 warm-up forwards, then one forward / one backward, then the remaining
// backwards; at most pp - stage activations are alive at once.
std::vector<ScheduleOp> one_f_one_b_schedule(int pp, int micro_batches, int stage);
std::vector<ScheduleOp> make_schedule(const std::string& name, int pp, int micro_batches, int stage);

// The idle share of a synchronous schedule with equal stage times: (p - 1) / (m + p - 1).
double expected_bubble_fraction(int pp, int micro_batches);

std::string to_string(const ScheduleOp& op);

}  // namespace trident::parallel
