#include "parallel/pipeline_schedule.hpp"

#include <algorithm>

namespace trident::parallel {

namespace {

// A compute op with the communication around it: receive first, send after.
void add_forward(std::vector<ScheduleOp>& ops, int pp, int stage, int m) {
  if (stage > 0) ops.push_back({OpKind::RecvActivation, m});
  ops.push_back({OpKind::Forward, m});
  if (stage < pp - 1) ops.push_back({OpKind::SendActivation, m});
}

void add_backward(std::vector<ScheduleOp>& ops, int pp, int stage, int m) {
  if (stage < pp - 1) ops.push_back({OpKind::RecvGradient, m});
  ops.push_back({OpKind::Backward, m});
  if (stage > 0) ops.push_back({OpKind::SendGradient, m});
}

}  // namespace

std::vector<ScheduleOp> gpipe_schedule(int pp, int micro_batches, int stage) {
  std::vector<ScheduleOp> ops;
  for (int m = 0; m < micro_batches; ++m) add_forward(ops, pp, stage, m);
  for (int m = 0; m < micro_batches; ++m) add_backward(ops, pp, stage, m);
  return ops;
}

std::vector<ScheduleOp> one_f_one_b_schedule(int pp, int micro_batches, int stage) {
  std::vector<ScheduleOp> ops;
  const int warmup = std::min(pp - stage - 1, micro_batches);
  int forward = 0, backward = 0;
  while (forward < warmup) add_forward(ops, pp, stage, forward++);
  while (forward < micro_batches) {
    add_forward(ops, pp, stage, forward++);
    add_backward(ops, pp, stage, backward++);
  }
  while (backward < micro_batches) add_backward(ops, pp, stage, backward++);
  return ops;
}

std::vector<ScheduleOp> make_schedule(const std::string& name, int pp, int micro_batches, int stage) {
  return name == "gpipe" ? gpipe_schedule(pp, micro_batches, stage) : one_f_one_b_schedule(pp, micro_batches, stage);
}

double expected_bubble_fraction(int pp, int micro_batches) {
  return static_cast<double>(pp - 1) / static_cast<double>(micro_batches + pp - 1);
}

std::string to_string(const ScheduleOp& op) {
  static const char* names[] = {"recv_act", "F", "send_act", "recv_grad", "B", "send_grad"};
  return std::string(names[static_cast<int>(op.kind)]) + std::to_string(op.micro);
}

}  // namespace trident::parallel
